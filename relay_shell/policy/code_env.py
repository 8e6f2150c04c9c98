"""The one table of code-carrying environment variables: every variable whose value a program runs as a command,
loads as code, reads as its options or configuration, or writes to as a file, with why (from each program's
documentation). Every place a variable can be set for a program is checked against it: the call's env overlay,
inline assignments (`VAR=… cmd`), bare assignments (`VAR=…` then a command), `env VAR=… cmd`, and `export`,
`declare -x`, `typeset`, `local`, `readonly`.

How a value is read depends on the kind:
- COMMAND: a command line the program runs (a pager, an editor, an askpass or ssh program): classified as shell text,
  so `PAGER=cat` is 0 and `GIT_PAGER='touch M'` is what `touch M` is.
- PIPE: LESSOPEN / LESSCLOSE: the command after the leading `|` / `||` / `-`.
- PROMPT: a prompt string; its `$(…)` and backquotes run each time it is shown.
- OPTIONS: options the program reads as if written on its command line (TAR_OPTIONS, LESS, MANOPT, GOFLAGS, …):
  the program is classified with them, in a neutral invocation.
- CONFIG: a configuration file (or a directory the program finds one in) whose contents can make it run commands
  (git's core.fsmonitor, kubeconfig exec plugins, aws credential_process): not seen, so 1; a configuration read
  from stdin or a pipe (`/dev/stdin`, `/dev/fd/N`, `/proc/…/fd/N`) is 2.
- CODE: code loaded into the program: 2 whatever the value.
- SEARCH_PATH: PATH: 2 when a directory comes before the system's own (a known name can run another program), 0
  when directories are only appended after $PATH.
- WRITES: a file the program writes (trace and key-log files): rated as a write to that path when it is one.
A value with expansions is read as written (`GIT_SSH_COMMAND="ssh -i $KEY"` is ssh; `PAGER=$x` is a command word
only known at run time).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping

from relay_shell.policy.findings import Finding

COMMAND, PIPE, PROMPT, OPTIONS, CONFIG, CODE, WRITES, GIT_OVERLAY, SEARCH_PATH = (
    "command",
    "pipe",
    "prompt",
    "options",
    "config",
    "code",
    "writes",
    "git-overlay",
    "search-path",
)


def _names(kind: str, why: str, names: str) -> dict[str, tuple[str, str]]:
    return dict.fromkeys(names.split(), (kind, why))


VARIABLES: dict[str, tuple[str, str]] = {
    # pagers and editors: run as a shell command line by git, man, systemctl, psql, less (`v`), crontab -e, fc, …
    **_names(
        COMMAND,
        "a pager: the program runs it as a command line to show its output",
        "PAGER MANPAGER GIT_PAGER SYSTEMD_PAGER PSQL_PAGER AWS_PAGER GH_PAGER BAT_PAGER DELTA_PAGER MYSQL_PAGER",
    ),
    **_names(
        COMMAND,
        "an editor: the program runs it as a command line (crontab -e, git commit, visudo, fc, less's v, kubectl edit)",
        "EDITOR VISUAL FCEDIT SUDO_EDITOR GIT_EDITOR GIT_SEQUENCE_EDITOR SYSTEMD_EDITOR KUBE_EDITOR SVN_EDITOR"
        " HGEDITOR PSQL_EDITOR LESSEDIT",
    ),
    **_names(
        COMMAND,
        "a program run to ask for a password or to connect (git, ssh, sudo -A, rsync, cvs, svn)",
        "SSH_ASKPASS SUDO_ASKPASS GIT_ASKPASS GIT_SSH GIT_SSH_COMMAND GIT_PROXY_COMMAND RSYNC_RSH RSYNC_CONNECT_PROG"
        " CVS_RSH SVN_SSH",
    ),
    **_names(
        COMMAND,
        "a command git, man -H, xdg-open or the shell runs (an external diff, a browser, the prompt hook)",
        "GIT_EXTERNAL_DIFF BROWSER PROMPT_COMMAND",
    ),
    **_names(
        COMMAND,
        "a program that builds run (compilers, linkers, cargo's wrappers) or that script/less start as the shell",
        "CC CXX CPP LD AR AS FC RUSTC RUSTC_WRAPPER RUSTC_WORKSPACE_WRAPPER RUSTDOC CARGO_BUILD_RUSTC_WRAPPER SHELL",
    ),
    **_names(SEARCH_PATH, "which program a command name runs: the first directory that has it", "PATH"),
    **_names(GIT_OVERLAY, "git's configuration overlay", "GIT_CONFIG_COUNT GIT_CONFIG_PARAMETERS"),
    **_names(PIPE, "less runs it as an input preprocessor or postprocessor", "LESSOPEN LESSCLOSE"),
    **_names(PROMPT, "a prompt string: its $(…) and backquotes run each time it is shown", "PS0 PS1 PS2 PS3 PS4"),
    # options read as if written on the program's command line
    **_names(OPTIONS, "options tar reads before its command line", "TAR_OPTIONS"),
    **_names(OPTIONS, "options less reads (systemd gives SYSTEMD_LESS to less)", "LESS SYSTEMD_LESS"),
    **_names(OPTIONS, "options man reads", "MANOPT"),
    **_names(OPTIONS, "options more reads", "MORE"),
    **_names(OPTIONS, "options the go command reads (-toolexec runs a program)", "GOFLAGS"),
    **_names(OPTIONS, "options make reads (--eval, -f)", "MAKEFLAGS GNUMAKEFLAGS"),
    **_names(OPTIONS, "options node reads (--require, --import load code)", "NODE_OPTIONS"),
    **_names(OPTIONS, "options perl reads (-M loads a module, -d starts the debugger)", "PERL5OPT"),
    **_names(OPTIONS, "options ruby reads (-r loads a library)", "RUBYOPT"),
    **_names(OPTIONS, "options the compressor reads", "GZIP BZIP2 BZIP XZ_OPT XZ_DEFAULTS ZIPOPT ZIP UNZIP UNZIPOPT"),
    **_names(OPTIONS, "options grep reads (old grep)", "GREP_OPTIONS"),
    # configuration files whose contents can make the program run commands
    **_names(
        CONFIG,
        "where git reads its configuration (core.fsmonitor, core.pager, aliases run commands)",
        "GIT_CONFIG GIT_CONFIG_GLOBAL GIT_CONFIG_SYSTEM GIT_TEMPLATE_DIR",
    ),
    **_names(
        CONFIG,
        "where programs find their configuration files (~/.gitconfig, ~/.config/…): they can run commands",
        "HOME XDG_CONFIG_HOME XDG_CONFIG_DIRS ZDOTDIR",
    ),
    **_names(
        CONFIG,
        "a configuration file that can run commands (kubeconfig exec plugins, aws credential_process, docker"
        " credential helpers, curlrc and wgetrc outputs, lesskey bindings, readline bindings, a Gemfile)",
        "KUBECONFIG AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE DOCKER_CONFIG CURL_HOME WGETRC LESSKEY LESSKEYIN"
        " LESSKEY_SYSTEM LESSKEYIN_SYSTEM INPUTRC BUNDLE_GEMFILE MAKEFILES PIP_CONFIG_FILE NPM_CONFIG_USERCONFIG"
        " NPM_CONFIG_GLOBALCONFIG CARGO_HOME RIPGREP_CONFIG_PATH MYSQL_HOME PSQLRC SCREENRC VIMINIT EXINIT"
        " MPLCONFIGDIR IPYTHONDIR JUPYTER_CONFIG_DIR",
    ),
    # code loaded into the program, or which program a name runs
    **_names(
        CODE,
        "code loaded into the programs it reaches, or which program a name runs",
        "LD_PRELOAD LD_LIBRARY_PATH LD_AUDIT BASH_ENV ENV SHELLOPTS BASHOPTS GCONV_PATH PYTHONSTARTUP"
        " PYTHONPATH PYTHONHOME PYTHONBREAKPOINT PYTHONWARNINGS PYTHONEXECUTABLE PERL5LIB PERLLIB PERL5DB"
        " PERLDB_OPTS RUBYLIB RUBYSHELL NODE_PATH GIT_EXEC_PATH"
        " GIT_ALLOW_PROTOCOL GIT_PROTOCOL_FROM_USER GOTOOLCHAIN LUA_PATH LUA_CPATH LUA_INIT TCLLIBPATH"
        " R_PROFILE R_PROFILE_USER JAVA_TOOL_OPTIONS _JAVA_OPTIONS JDK_JAVA_OPTIONS CLASSPATH LESSSECURE_ALLOW"
        " SYSTEMD_PAGERSECURE",
    ),
    # bash's own tables of what a command name runs: `BASH_CMDS[ls]=/bin/rm` makes `ls` run rm (the hash table),
    # `BASH_ALIASES[echo]='rm -rf D'` makes `echo` an alias where aliases expand
    **_names(CODE, "bash's table of which program or text a command name runs", "BASH_CMDS BASH_ALIASES"),
    # files written
    **_names(
        WRITES,
        "a file the program writes its trace, keys or history to",
        "SSLKEYLOGFILE HISTFILE LESSHISTFILE LD_DEBUG_OUTPUT LD_PROFILE_OUTPUT MALLOC_TRACE GIT_INDEX_FILE"
        " GCOV_PREFIX PYTHONPYCACHEPREFIX",
    ),
}
# Families: a prefix or suffix, the kind, why. Checked in order after the names above.
_FAMILIES: tuple[tuple[str, str, str, str], ...] = (
    ("prefix", "LD_", CODE, "the dynamic loader's settings: which libraries load into every program"),
    ("prefix", "BASH_FUNC_", CODE, "an exported bash function: it runs in place of a command"),
    ("prefix", "GIT_CONFIG_KEY_", GIT_OVERLAY, "git's configuration overlay (GIT_CONFIG_COUNT/KEY_n/VALUE_n)"),
    ("prefix", "GIT_CONFIG_VALUE_", GIT_OVERLAY, "git's configuration overlay (GIT_CONFIG_COUNT/KEY_n/VALUE_n)"),
    ("prefix", "GIT_TRACE", WRITES, "git writes its trace to the file it names"),
    ("prefix", "NPM_CONFIG_", CONFIG, "npm settings (script-shell, node-options, editor run programs)"),
    ("prefix", "npm_config_", CONFIG, "npm settings (script-shell, node-options, editor run programs)"),
    ("prefix", "CARGO_TARGET_", COMMAND, "cargo runs CARGO_TARGET_<triple>_RUNNER / _LINKER as a program"),
    ("prefix", "CARGO_ALIAS_", COMMAND, "a cargo alias: cargo runs it as a sub-command"),
    ("suffix", "_PAGER", COMMAND, "a pager: the program runs it as a command line"),
    ("suffix", "_EDITOR", COMMAND, "an editor: the program runs it as a command line"),
    ("suffix", "_ASKPASS", COMMAND, "a program run to ask for a password"),
    ("suffix", "_SSH_COMMAND", COMMAND, "a command run to connect"),
)
# For OPTIONS: the neutral invocation the options are classified in (words before them, words after them).
_INVOCATIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "TAR_OPTIONS": (("tar",), ("-tf", "/dev/null")),
    "LESS": (("less",), ("/dev/null",)),
    "SYSTEMD_LESS": (("less",), ("/dev/null",)),
    "MANOPT": (("man",), ("man",)),
    "MORE": (("more",), ("/dev/null",)),
    "GOFLAGS": (("go", "list"), ()),
    "MAKEFLAGS": (("make",), ()),
    "GNUMAKEFLAGS": (("make",), ()),
    "NODE_OPTIONS": (("node",), ("-e", "0")),
    "PERL5OPT": (("perl",), ("-e", "0")),
    "RUBYOPT": (("ruby",), ("-e", "0")),
    "GREP_OPTIONS": (("grep",), ("x", "/dev/null")),
    "ZIPOPT": (("zip",), ("x.zip", "x")),
    "ZIP": (("zip",), ("x.zip", "x")),
    "UNZIP": (("unzip",), ("-l", "x.zip")),
    "UNZIPOPT": (("unzip",), ("-l", "x.zip")),
}
PROMPT_VARIABLES = frozenset(name for name, (kind, _) in VARIABLES.items() if kind == PROMPT)
_COMPRESSORS = {"GZIP": "gzip", "BZIP2": "bzip2", "BZIP": "bzip2", "XZ_OPT": "xz", "XZ_DEFAULTS": "xz"}
_PIPED_CONFIG = ("/dev/stdin", "/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/", "-")

ShellFindings = Callable[[str, int], list[Finding]]
WordsFindings = Callable[[list[str], int], list[Finding]]


def kind_of(name: str) -> tuple[str, str] | None:
    """The kind of a variable and why it carries code, or None for a variable that carries none."""
    found = VARIABLES.get(name)
    if found is not None:
        return found
    for where, affix, kind, why in _FAMILIES:
        if name.startswith(affix) if where == "prefix" else name.endswith(affix):
            return kind, why
    return None


def assignment_findings(
    name: str, value: str, depth: int, shell: ShellFindings, command: WordsFindings
) -> list[Finding]:
    """What setting NAME to value does to the programs that read it (nothing for most variables)."""
    found = kind_of(name)
    if found is None:
        return []
    kind, why = found
    shown = f"{name}={value}"[:200]
    if kind == COMMAND:
        return shell(value, depth + 1) if value.strip() else []
    if kind == PIPE:
        return shell(value.lstrip("|-").replace("%s", "FILE"), depth + 1) if value.strip("|- ") else []
    if kind == PROMPT:
        return _prompt_findings(value, depth, shell)
    if kind == OPTIONS:
        return _options_findings(name, value, depth, command)
    if kind == CONFIG:
        if not value:
            return []
        if value.startswith(_PIPED_CONFIG):
            return [Finding(shown, 2, f"{name} ({why}) read from stdin or a pipe: cannot classify")]
        return [Finding(shown, 1, f"{name}: {why}; the file is not seen")]
    if kind == WRITES:
        if "/" not in value and not value.startswith("~"):
            return []  # GIT_TRACE=1 (to stderr), HISTFILE= (off)
        return command(["tee", value], depth + 1)
    if kind == GIT_OVERLAY:
        return []  # read as pairs by git_overlay_findings
    if kind == SEARCH_PATH:
        return _search_path_findings(value)
    return [Finding(shown, 2, f"env {name} can inject code: {why}")]


def git_overlay_pairs(assigned: Mapping[str, str]) -> list[tuple[str, str]]:
    """The configuration git reads from GIT_CONFIG_COUNT / GIT_CONFIG_KEY_n / GIT_CONFIG_VALUE_n and
    GIT_CONFIG_PARAMETERS ('key'='value' pairs, as git quotes them)."""
    pairs = []
    count = assigned.get("GIT_CONFIG_COUNT", "")
    keys = [name for name in assigned if name.startswith("GIT_CONFIG_KEY_")]
    limit = int(count) if count.isdigit() else len(keys)
    for index in range(min(limit, 256)):
        key = assigned.get(f"GIT_CONFIG_KEY_{index}")
        if key is not None:
            pairs.append((key, assigned.get(f"GIT_CONFIG_VALUE_{index}", "")))
    for name in keys:  # keys beyond the count, or with gaps: git ignores them, classified all the same
        number = name.removeprefix("GIT_CONFIG_KEY_")
        if not number.isdigit() or int(number) >= limit:
            pairs.append((assigned[name], assigned.get(f"GIT_CONFIG_VALUE_{number}", "")))
    parameters = assigned.get("GIT_CONFIG_PARAMETERS")
    if parameters:
        try:
            items = shlex.split(parameters)
        except ValueError:
            items = parameters.split()
        for item in items:
            key, _equals, value = item.partition("=")
            pairs.append((key, value))
    return pairs


# Directories of the system's own programs: a PATH of these (and $PATH) changes nothing a name runs.
_SYSTEM_BIN = frozenset(
    [
        "/bin",
        "/sbin",
        "/usr/bin",
        "/usr/sbin",
        "/usr/local/bin",
        "/usr/local/sbin",
        "/usr/games",
        "/snap/bin",
        "$PATH",
        "${PATH}",
    ]
)


def _search_path_findings(value: str) -> list[Finding]:
    """PATH decides which program a name runs: a directory searched before the system's own (or instead of them)
    can put any program under a known name (2); one appended after $PATH only adds names nothing knows (0)."""
    parts = [part.rstrip("/") or "/" for part in value.split(":")]
    if "$PATH" in parts or "${PATH}" in parts:
        first = parts.index("$PATH") if "$PATH" in parts else parts.index("${PATH}")
        before = parts[:first]
    else:
        before = parts
    if all(part in _SYSTEM_BIN for part in before):
        return []
    return [
        Finding(
            f"PATH={value}"[:200],
            2,
            "PATH puts a directory before the system's: any program name can run something else",
        )
    ]


def _prompt_findings(value: str, depth: int, shell: ShellFindings) -> list[Finding]:
    """A prompt string: what its command substitutions run (the tokenizer finds them as in `echo "…"`)."""
    if "$(" not in value and "`" not in value:
        return []
    return [finding for finding in shell('echo "' + value.replace('"', '\\"') + '"', depth + 1) if finding.tier]


def _options_findings(name: str, value: str, depth: int, command: WordsFindings) -> list[Finding]:
    if not value.strip():
        return []
    try:
        options = shlex.split(value)
    except ValueError:
        options = value.split()
    program = _COMPRESSORS.get(name)
    if program is not None:
        return command([program, *options, "-c"], depth + 1)
    before, after = _INVOCATIONS[name]
    return command([*before, *options, *after], depth + 1)
