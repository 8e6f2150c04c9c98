"""Wrappers: programs that run another command with the same effect (`sudo`, `env`, `nice`, `timeout`, `xargs`,
`flock`, `chroot`, `nsenter`, `watch`, `script -c`, `su -c`, `runuser`, `busybox`, …). The classifier looks
through them to the command they run; some of them run shell text given as one argument, which is handed back
to be classified as shell text. Options are read as getopt reads them (calls.parse_options): `--name=value`,
`--name value`, flags bundled in one word, and the first letter of a bundle that takes a value takes the rest of
the word or the next word (`script -qc 'cmd'`, `runuser -lu bob`, `su --command='cmd'`). A wrapper given no
command that starts a shell (`script out.log`, `chroot /mnt`, `nsenter -t 1 -m`, `su`) is a shell session: its
commands come from stdin, which is classified as shell text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from relay_shell.policy.calls import long_names, parse_options, read_options
from relay_shell.policy.runners import RUNNER_PROGRAMS, runner_start
from relay_shell.policy.shell_invocation import inline_script
from relay_shell.policy.vocabulary import ESCALATION, SHELLS, WRAPPER_OPERANDS, WRAPPERS
from relay_shell.policy.vocabulary import words as word_set

MAX_WRAPPERS = 32  # wrappers nest (sudo env nice …); bounded, and more than this is too deep to look through


@dataclass
class Unwrapped:
    words: list[str]
    dynamic: list[bool]
    escalated: bool = False  # sudo, doas, su, runuser, pkexec: the command runs with more privileges
    via_xargs: bool = False  # xargs, parallel: the arguments arrive on stdin
    inline: list[str] = field(default_factory=list)  # shell text a wrapper runs (su -c 'cmd', watch 'cmd')
    shell_session: bool = False  # a shell that reads its commands from stdin (sudo -i, su, script, chroot DIR)
    too_deep: bool = False  # more than MAX_WRAPPERS wrappers: what they run was not looked at
    assignments: list[tuple[str, str]] = field(default_factory=list)  # env NAME=VALUE
    # What a wrapper itself writes (strace -o F, script's typescript, nohup.out, flock's lock file) and its own
    # effects beyond the command's (tier, reason): systemd-run's unit outside the call, ionice -p.
    writes: list[str] = field(default_factory=list)
    effects: list[tuple[int, str]] = field(default_factory=list)
    # The words from one that an option took as its value, when that word may be the command after all (a
    # value option listed by mistake, an exact flag name that is also the prefix of a value option): classified
    # as a command too. Over-classifying is safe; one per unwrap keeps nesting linear.
    possible_command: list[str] = field(default_factory=list)
    # xargs -I/-i/--replace: the string each input line replaces in the command (its words holding it are data
    # from stdin: a command word or a shell's script made of them is only known at run time).
    replace: str | None = None


_INIT_SCRIPT = re.compile(r"/etc/(?:init\.d|rc\.d|rc\.d/init\.d|rc[0-6S]\.d)/[^/]+")


def init_script_words(words: list[str]) -> list[str]:
    """A SysV init script run by its path (`/etc/init.d/ssh stop`) does what `service NAME ACTION` does: read
    that way, not as the program its file name happens to share (the ssh client)."""
    if not words or not words[0].startswith("/etc/") or not _INIT_SCRIPT.fullmatch(words[0]):
        return words
    return ["service", basename(words[0]).removeprefix("K").removeprefix("S").lstrip("0123456789"), *words[1:]]


def basename(word: str) -> str:
    stripped = word.rstrip("/")
    return stripped.rsplit("/", 1)[-1] if "/" in stripped else word


_WATCH_VALUE_OPTIONS = word_set("-n --interval -q --equexit")
_WATCH_KNOWN = long_names(_WATCH_VALUE_OPTIONS, word_set("--exec --differences"))
# su and runuser (util-linux): -c/--command/--session-command run shell text; runuser -u/--user runs an argv.
_SU_COMMAND_OPTIONS = word_set("-c --command --session-command")
_SU_VALUE_OPTIONS = word_set(
    "-c --command --session-command -s --shell -g --group -G --supp-group -w --whitelist-environment -u --user"
)
# script (util-linux); -t/--timing take their file only attached (-tFILE, --timing=FILE).
_SCRIPT_VALUE_OPTIONS = word_set(
    "-c --command -E --echo -I --log-in -O --log-out -B --log-io -T --log-timing -m --logging-format -o --output-limit"
)
_SCRIPT_OPTIONAL = word_set("-t --timing")
_SCRIPT_KNOWN = long_names(_SCRIPT_VALUE_OPTIONS, _SCRIPT_OPTIONAL, word_set("--help --version"))
_SU_KNOWN = long_names(_SU_VALUE_OPTIONS)
_FLOCK_COMMAND_OPTIONS = word_set("-c --command")
# Shell text given as an option's value: `env -S 'cmd'`, `kdesu -c 'cmd'`.
_INLINE_OPTIONS = {"env": word_set("-S --split-string"), "kdesu": word_set("-c")}
# Options whose value may only be attached (`-m/proc/1/ns/mnt`, `-i{}`, `--block-signal=INT`): the next word
# is not theirs (checked with each program's --help).
_OPTIONAL_VALUES = {
    "nsenter": word_set(
        "-m -u -i -n -p -U -C -T -r -w --mount --uts --ipc --net --pid --user --cgroup --time --root --wd"
    ),
    "unshare": word_set(
        "-m -u -i -n -p -U -C -T --mount --uts --ipc --net --pid --user --cgroup --time --kill-child --mount-proc"
    ),
    "xargs": word_set("-i -e -l --replace --eof"),
    "env": word_set("--block-signal --default-signal --ignore-signal"),
    "sudo": word_set("--preserve-env"),
    "strace": word_set("--daemonize --relative-timestamps --absolute-timestamps --syscall-times --decode-fds"),
}
_SUDO_SHELL_OPTIONS = word_set("-i -s --login --shell")
# Wrappers that, given no command, start a shell reading stdin (chroot runs `$SHELL -i`, nsenter and unshare
# `$SHELL`, pkexec and run0 the target user's shell); su, runuser, sg and script are handled where they are parsed.
_SHELL_WITHOUT_COMMAND = word_set("chroot nsenter unshare firejail pkexec run0")
# firejail options that act on running sandboxes (or print) instead of starting one.
_FIREJAIL_QUERIES = ("--list", "--tree", "--top", "--netstats", "--shutdown", "--join", "--ls", "--get", "--put")
_AST_GREP = word_set("run scan test new lsp completions help")
_SUDO_ONLY_OPTIONS = word_set("-l -v -k -K --list --validate --reset-timestamp -V --version")
# Every long name a wrapper's abbreviations may stand for (getopt_long reads `--us` as `--user`).
_KNOWN = {
    program: long_names(
        values,
        _INLINE_OPTIONS.get(program, frozenset()),
        _OPTIONAL_VALUES.get(program, frozenset()),
        _SUDO_SHELL_OPTIONS | _SUDO_ONLY_OPTIONS if program == "sudo" else frozenset(),
    )
    for program, values in WRAPPERS.items()
}
_OPERAND_KNOWN = {
    program: long_names(values, word_set("--pid")) for program, (values, _operands) in WRAPPER_OPERANDS.items()
}
_FLOCK_KNOWN = long_names(WRAPPER_OPERANDS["flock"][0], _FLOCK_COMMAND_OPTIONS)
# A word an option took as its value that may be a command word after all: a name or a path, not a number.
_COMMAND_LIKE = re.compile(r"(?:[./~]|[A-Za-z_])[A-Za-z0-9_./+-]{0,254}")


_LOADER = re.compile(r"ld(?:-linux[\w.-]*)?\.so(?:\.[0-9.]+)?|ld-[\w.-]*\.so(?:\.[0-9.]+)?")


def unwrap(words: list[str], dynamic: list[bool]) -> Unwrapped:
    """Strip wrappers from a simple command; what is left is the command they run."""
    result = Unwrapped(words, dynamic)
    index = 0
    for count in range(MAX_WRAPPERS + 1):
        if index >= len(words):
            break
        program = basename(words[index])
        if program.startswith("ld") and _LOADER.fullmatch(program):
            program = "ld.so"
            if any(word.startswith(("--preload", "--audit")) for word in words[index + 1 :]):
                result.effects.append((2, "the loader preloads a library into the program"))
        step = _step(program, words, index, result)
        if step is None:
            break
        if count == MAX_WRAPPERS:
            result.too_deep = True  # fail towards caution: the command under them was never looked at
            break
        if step >= len(words) and program in _SHELL_WITHOUT_COMMAND and not _firejail_query(program, words[index:]):
            result.shell_session = True
        index = step
    result.words = words[index:]
    result.dynamic = dynamic[index:]
    if result.replace:
        _replaced(result, result.replace)
    return result


def _replaced(result: Unwrapped, marker: str) -> None:
    """Words of xargs' command that are its replace string, or a command word holding it, are only known at run
    time; so is the text a shell or eval runs when it starts with the replace string (`xargs -I{} sh -c {}`: each
    input line is a command line). find's `-exec … {}` likewise, with the paths it finds."""
    result.dynamic = [
        flag or word == marker or (position == 0 and marker in word)
        for position, (word, flag) in enumerate(zip(result.words, result.dynamic, strict=True))
    ]
    program = basename(result.words[0]) if result.words else ""
    script = inline_script(program, result.words) if program in SHELLS or program == "eval" else None
    if script is not None and script.lstrip(" \t'\"(").startswith(marker):
        result.effects.append((3, "input lines or found paths become the shell text run: only known at run time"))


def replaced(words: list[str], marker: str = "{}") -> Unwrapped:
    """`words` (find's `-exec` command) with the words that are `marker` only known at run time."""
    result = Unwrapped(words, ["$" in word or "`" in word for word in words])
    _replaced(result, marker)
    return result


def _firejail_query(program: str, words: list[str]) -> bool:
    return program == "firejail" and any(word.startswith(_FIREJAIL_QUERIES) for word in words)


def _is_option(word: str) -> bool:
    return word.startswith("-") and word != "-"


def _step(program: str, words: list[str], index: int, result: Unwrapped) -> int | None:
    """Where the wrapped command starts after the wrapper at words[index], or None if it is not a wrapper."""
    if program in ("busybox", "toybox"):
        following = words[index + 1] if index + 1 < len(words) else "-"
        return None if following.startswith("-") else index + 1
    if program == "sudoedit":
        return None
    if program == "sg":
        return _sg(words, index, result)
    if program in ("su", "runuser"):
        return _switch_user(program, words, index, result)
    if program == "script":
        return _script(words, index, result)
    if program == "watch":
        return _watch(words, index, result)
    if program == "flock":
        return _flock(words, index, result)
    started = runner_start(program, words, index) if program in RUNNER_PROGRAMS else None
    if started is not None:
        position, texts, effects = started
        result.inline += texts
        result.effects += effects
        return position
    if program in WRAPPER_OPERANDS:
        value_options, operands = WRAPPER_OPERANDS[program]
        names, position = _skip_options(words, index + 1, value_options, _OPERAND_KNOWN[program], result)
        if program in ("taskset", "chrt") and names & {"-p", "--pid"}:
            return None  # changes a running process: no command
        return position + operands
    if program not in WRAPPERS:
        return None
    if program == "prlimit" and any(word in ("-p", "--pid") or word.startswith("--pid=") for word in words[index:]):
        return None  # changes a running process's limits: no command
    if program in ("sudo", "doas") and index + 1 < len(words) and words[index + 1] in _SUDO_ONLY_OPTIONS:
        return None
    if program == "command" and index + 1 < len(words) and words[index + 1] in ("-v", "-V"):
        return None  # `command -v rm` says where rm is; it runs nothing
    result.escalated = result.escalated or program in ESCALATION
    via_xargs_before, result.via_xargs = result.via_xargs, result.via_xargs or program in ("xargs", "parallel")
    inline_options = _INLINE_OPTIONS.get(program, frozenset())
    value_options = WRAPPERS[program] | inline_options
    optional = _OPTIONAL_VALUES.get(program, frozenset())
    position = index + 1
    while position < len(words):
        word = words[position]
        if word == "--":
            position += 1
            break
        if program == "env" and (word == "-" or ("=" in word and not _is_option(word))):  # env: any NAME=VALUE
            if word != "-":
                variable, _equals, assigned = word.partition("=")
                result.assignments.append((variable, assigned))
            position += 1  # `env - cmd` is `env -i cmd`
            continue
        if program == "nice" and re.fullmatch(r"-\d+", word):
            position += 1
            continue
        if not _is_option(word):
            break
        start = position
        options, position = parse_options(words, position, value_options, optional, _KNOWN[program])
        _note_swallowed(words, start, position, result)
        for name, value in options:
            _wrapper_effect(program, name, value, result)
            if program == "xargs" and name in ("-I", "-i", "--replace"):
                result.replace = value or "{}"
            if name in inline_options:
                if value is not None:
                    result.inline.append(value)
                return len(words)
            if program in ("sudo", "doas") and name in _SUDO_SHELL_OPTIONS:
                result.shell_session = True
    if program == "parallel":
        return _parallel(words, position, result, piped=via_xargs_before, options=words[index + 1 : position])
    if program == "nohup":
        result.effects.append((1, "nohup writes nohup.out in the working directory when its output is a terminal"))
    elif program == "systemd-run":
        result.effects.append((2, "systemd-run has the service manager run the command as a unit, outside the call"))
    return position


# Options of wrappers that write a file (the value) or act on processes that are not the command's.
_WRITING_OPTIONS = {
    "strace": word_set("-o --output"),
    "ltrace": word_set("-o --output"),
    "time": word_set("-o --output"),
    "parallel": word_set("--joblog --results --res --output-as-files"),
    "daemonize": word_set("-p -l -o -e"),
}
_PROCESS_OPTIONS = {
    "ionice": word_set("-p -P -u --pid --pgid --uid"),
    "strace": word_set("-p --attach"),
    "ltrace": word_set("-p"),
}


def _wrapper_effect(program: str, name: str, value: str | None, result: Unwrapped) -> None:
    if name in _WRITING_OPTIONS.get(program, ()) and value:
        result.writes.append(value)
    elif name in _PROCESS_OPTIONS.get(program, ()):
        what = "attaches to a running process" if program != "ionice" else "changes running processes' priority"
        result.effects.append((1, f"{program} {name} {what}"))
    elif program == "strace" and _injects(name, value):
        result.effects.append((2, "strace injects faults or return values into the traced program"))


def _injects(name: str, value: str | None) -> bool:
    """strace -e inject=… / -e fault=… / --inject / --fault change what the traced program's calls return."""
    return name in ("--inject", "--fault") or (name == "-e" and (value or "").startswith(("inject", "fault")))


def _parallel(words: list[str], position: int, result: Unwrapped, piped: bool, options: list[str]) -> int:
    """GNU parallel runs its command (the words before `:::`/`::::`, joined) through a shell for each argument,
    with `{}` replaced by it: the words are classified as a command run once per argument, and the joined text
    with the first arguments as shell text. With no command, each argument is a command line. With `--pipe` the
    input reaches the command's stdin in blocks, not its arguments (adr/0025 Round 6): `piped` is whether the
    arguments arrived on stdin before parallel (an outer xargs)."""
    if any(word in ("--pipe", "--pipepart", "--spreadstdin") for word in options):
        result.via_xargs = piped
    separators = [index for index in range(position, len(words)) if words[index] in (":::", "::::", ":::+", "::::+")]
    end = separators[0] if separators else len(words)
    arguments = [word for word in words[end:] if word not in (":::", "::::", ":::+", "::::+")]
    command = " ".join(words[position:end])
    if not command:
        result.inline += arguments
        return len(words)
    for argument in arguments[:16] or [""]:
        result.inline.append(command.replace("{}", argument) if "{}" in command else f"{command} {argument}")
    return position


def _note_swallowed(words: list[str], start: int, position: int, result: Unwrapped) -> None:
    """When the option at words[start] took the next word as its value, keep that word and the rest as a possible
    command (the first one only)."""
    swallowed = words[position - 1]
    if position - start == 2 and not result.possible_command and _COMMAND_LIKE.fullmatch(swallowed):
        result.possible_command = words[position - 1 :]


def _skip_options(
    words: list[str], position: int, value_options: frozenset[str], known: frozenset[str], result: Unwrapped
) -> tuple[set[str], int]:
    """The option names from words[position] on, and where the first operand is (after a `--`)."""
    names: set[str] = set()
    while position < len(words) and _is_option(words[position]):
        if words[position] == "--":
            return names, position + 1
        start = position
        options, position = parse_options(words, position, value_options, frozenset(), known)
        _note_swallowed(words, start, position, result)
        names.update(name for name, _value in options)
    return names, position


def _switch_user(program: str, words: list[str], index: int, result: Unwrapped) -> int:
    """su [options] [-] [user [shell arguments]], runuser the same, or runuser [options] -u user [[--] command].
    Options may come after the user (getopt permutes); after `--` the words are the shell's own arguments, where
    `-c` runs the next word too. With no command either way, the user's shell reads its commands from stdin."""
    result.escalated = True
    position = index + 1
    user_option = False  # runuser -u: what follows the options is an argv, not shell arguments
    operands = 0
    while position < len(words):
        word = words[position]
        if word == "--":
            position += 1
            break
        if _is_option(word):
            options, position = parse_options(words, position, _SU_VALUE_OPTIONS, frozenset(), _SU_KNOWN)
            for name, value in options:
                if name in _SU_COMMAND_OPTIONS:
                    if value is not None:
                        result.inline.append(value)
                    return len(words)
                user_option = user_option or (program == "runuser" and name in ("-u", "--user"))
            continue
        if user_option:
            return position  # runuser -u bob cmd …
        if word != "-":
            operands += 1  # the user, then arguments for the user's shell
        position += 1
    if user_option:
        if position >= len(words):
            result.shell_session = True
        return position
    shell_arguments = words[position:]
    for offset, word in enumerate(shell_arguments):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            if offset + 1 < len(shell_arguments):
                result.inline.append(shell_arguments[offset + 1])
            return len(words)
    if operands <= 1 and not shell_arguments:
        result.shell_session = True
    return len(words)


_SCRIPT_LOGS = word_set("-O --log-out -I --log-in -B --log-io -T --log-timing -t --timing")


def _script(words: list[str], index: int, result: Unwrapped) -> int | None:
    """script [options] [file]: -c/--command runs shell text; without it, script records an interactive shell,
    which reads its commands from stdin. Options may follow the file (getopt permutes). It writes its typescript
    (the file, or ./typescript) and the logs its options name."""
    position = index + 1
    operands: list[str] = []
    logs: list[str] = []
    command: str | None = None
    runs_command = False
    while position < len(words):
        word = words[position]
        if word == "--":
            operands += words[position + 1 : position + 2]
            break
        if not _is_option(word):
            operands.append(word)
            position += 1
            continue
        options, position = parse_options(words, position, _SCRIPT_VALUE_OPTIONS, _SCRIPT_OPTIONAL, _SCRIPT_KNOWN)
        for name, value in options:
            if name in ("-h", "--help", "-V", "--version"):
                return None  # prints help: rated as itself
            if name in ("-c", "--command"):
                runs_command, command = True, value
            elif name in _SCRIPT_LOGS and value:
                logs.append(value)
    result.writes += [operands[0] if operands else "typescript", *logs]
    if runs_command:
        if command is not None:
            result.inline.append(command)
        return len(words)
    result.shell_session = True
    return len(words)


def _sg(words: list[str], index: int, result: Unwrapped) -> int | None:
    """sg [-] group [[-c] command]: the command runs through /bin/sh -c; with only a group, a shell reads stdin."""
    following = words[index + 1] if index + 1 < len(words) else ""
    if following in _AST_GREP or (following.startswith("-") and following != "-"):
        return None  # ast-grep's `sg run --pattern …`, not `sg GROUP cmd`
    position = index + 2 if following == "-" else index + 1
    rest = words[position + 1 :]  # after the group
    if not rest:
        result.shell_session = True
        return len(words)
    rest = rest[1:2] if rest[0] == "-c" else rest
    result.inline.append(" ".join(rest))  # sg runs the rest through /bin/sh -c
    return len(words)


def _flock(words: list[str], index: int, result: Unwrapped) -> int:
    """flock [options] FILE (-c TEXT | COMMAND …). -c/--command is shell text wherever it is written (before the
    file flock itself refuses it; classified all the same)."""
    value_options = WRAPPER_OPERANDS["flock"][0] | _FLOCK_COMMAND_OPTIONS
    options, operands = read_options(words[index:], value_options, frozenset(), _FLOCK_KNOWN, permute=False)
    command = len(words) - len(operands) + 1  # after the lock file
    if command < len(words) and _is_option(words[command]) and words[command] != "--":
        options += parse_options(words, command, _FLOCK_COMMAND_OPTIONS, frozenset(), _FLOCK_KNOWN)[0]
    if operands and not operands[0].isdigit():
        result.writes.append(operands[0])  # opened with O_CREAT: the lock file is created when missing
    for name, value in options:
        if name in _FLOCK_COMMAND_OPTIONS:
            if value is not None:
                result.inline.append(value)
            return len(words)
    return command


def _watch(words: list[str], index: int, result: Unwrapped) -> int:
    """watch runs its arguments joined with spaces through `sh -c`, unless -x/--exec gives an argv."""
    position = index + 1
    execs = False
    while position < len(words) and words[position].startswith("-"):
        if words[position] == "--":
            position += 1
            break
        options, position = parse_options(words, position, _WATCH_VALUE_OPTIONS, frozenset(), _WATCH_KNOWN)
        execs = execs or any(name in ("-x", "--exec") for name, _value in options)
    if execs:
        return position
    if position < len(words):
        result.inline.append(" ".join(words[position:]))
    return len(words)
