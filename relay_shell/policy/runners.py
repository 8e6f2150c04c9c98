"""Programs that run a command named after their own words, beyond the plain wrappers of wrappers.py (adr/0025,
round 5): project and environment runners reached by a sub-command (`uv run`, `poetry run`, `conda run -n X`,
`npm exec --`, `direnv exec DIR`, `nix develop -c`, `mise exec … --`), and wrappers whose command is spelled
differently from `wrapper [options] command` — `capsh … -- -c TEXT` (bash's arguments), `start-stop-daemon --start
--exec PATH -- ARGS` (and `--stop`, which signals the processes it matches), `pee 'cmd' 'cmd'` (shell text each),
`bwrap` (options with two values), `sbatch --wrap TEXT`, `nodemon --exec TEXT`, `ssh-agent -k`. Before, each was
"not known to be read-only" (1), whatever the command after it did: guarded mode ran `ssh-agent sh -c 'rm -rf d'`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from relay_shell.policy.calls import parse_options
from relay_shell.policy.vocabulary import words as word_set

Effect = tuple[int, str]
# Where the command starts (an index into the words), shell text the program runs, and its own effects.
Start = tuple[int, list[str], list[Effect]]

_ENVIRONMENTS = word_set("-n --name -p --prefix --cwd")
_PERF = word_set(
    "-o --output -e --event -c --count -F --freq -p --pid -t --tid -C --cpu -m --mmap-pages -G --cgroup -r --repeat"
    " -I --interval-print -x --field-separator -u --uid --call-graph"
)
# (program, sub-command) -> the options taking a value before the command, and how many operands come before it.
SUBCOMMAND_RUNNERS: dict[tuple[str, str], tuple[frozenset[str], int]] = {
    ("poetry", "run"): (word_set("-C --directory -P --project"), 0),
    ("pipenv", "run"): (frozenset(), 0),
    ("uv", "run"): (
        word_set(
            "--with --with-editable --with-requirements --python -p --package --extra --group --env-file"
            " --directory --project --index --default-index --index-url --extra-index-url -w"
        ),
        0,
    ),
    ("conda", "run"): (_ENVIRONMENTS, 0),
    ("mamba", "run"): (_ENVIRONMENTS, 0),
    ("micromamba", "run"): (_ENVIRONMENTS, 0),
    ("npm", "exec"): (word_set("--package -w --workspace"), 0),
    # Round 6 (attack2 U3): `npm x` is `npm exec`; dlx / `bun x` / `pipx run` fetch a package by name and run it.
    ("npm", "x"): (word_set("--package -w --workspace"), 0),
    ("pnpm", "dlx"): (word_set("--package"), 0),
    ("yarn", "dlx"): (word_set("-p --package"), 0),
    ("bun", "x"): (word_set("-p --package"), 0),
    ("pipx", "run"): (word_set("--spec --python --pip-args --index-url --path"), 0),
    ("yarn", "exec"): (frozenset(), 0),
    ("pnpm", "exec"): (word_set("--filter -F"), 0),
    ("bundle", "exec"): (frozenset(), 0),
    ("pyenv", "exec"): (frozenset(), 0),
    ("rbenv", "exec"): (frozenset(), 0),
    ("asdf", "exec"): (frozenset(), 0),
    ("hatch", "run"): (word_set("-e --env"), 0),
    ("pdm", "run"): (word_set("-p --project"), 0),
    ("rye", "run"): (frozenset(), 0),
    ("pixi", "run"): (word_set("-e --environment --manifest-path"), 0),
    ("direnv", "exec"): (frozenset(), 1),
    ("perf", "record"): (_PERF, 0),
    ("perf", "stat"): (_PERF, 0),
    ("perf", "trace"): (_PERF, 0),
}
_INSTALLS = word_set("--package --with --with-editable --with-requirements -w")
# Round 6: the options that name the package to fetch where `-p` means it (not conda's prefix).
_RUNNER_INSTALLS = {
    ("yarn", "dlx"): word_set("-p --package"),
    ("bun", "x"): word_set("-p --package"),
    ("pipx", "run"): word_set("--spec"),
}
_SUBCOMMAND_INLINE = {("npm", "exec"): word_set("-c --call"), ("npm", "x"): word_set("-c --call")}
# npx, pnpx, bunx: `npm exec` in one word (npx runs a program on PATH or in node_modules/.bin as it is, and fetches a
# package of that name otherwise); `-c TEXT` runs shell text.
_NPX_VALUES = word_set("-p --package --cache --registry --prefix --userconfig -w --workspace")
_NPX_TEXT = word_set("-c --call")
# Runners whose command comes only after `--` or an option (`nix develop -c CMD`, `mise exec node@20 -- CMD`).
_AFTER_MARK = {
    ("nix", "develop"): word_set("-c --command"),
    ("nix", "shell"): word_set("-c --command"),
    ("mise", "exec"): word_set("--"),
    ("mise", "x"): word_set("--"),
    ("rtx", "exec"): word_set("--"),
    ("guix", "shell"): word_set("--"),
}
# bubblewrap's options: these take two values, the listed ones below one; any other is a flag.
_BWRAP_TWO = word_set(
    "--bind --ro-bind --dev-bind --bind-try --ro-bind-try --dev-bind-try --symlink --setenv --file --bind-data"
    " --ro-bind-data --chmod"
)
_BWRAP_ONE = word_set(
    "--tmpfs --proc --dev --dir --unsetenv --uid --gid --hostname --chdir --remount-ro --mqueue --lock-file"
    " --sync-fd --info-fd --json-status-fd --block-fd --userns-block-fd --seccomp --add-seccomp-fd --exec-label"
    " --file-label --args --cap-add --cap-drop --perms --size --userns --userns2 --pidns --argv0 --overlay-src"
    " --overlay --tmp-overlay --ro-overlay"
)
_START_STOP_VALUES = word_set(
    "-x --exec -a --startas -p --pidfile -n --name -u --user -c --chuid -g --group -r --chroot -d --chdir -s"
    " --signal -R --retry -N --nicelevel -P --procsched -I --iosched -k --umask -m --make-pidfile --ppid"
    " --remove-pidfile --notify-await --notify-timeout --output"
)


def runner_start(program: str, words: list[str], index: int) -> Start | None:
    """Where the command a runner at words[index] runs starts, or None if the program is none of these."""
    following = words[index + 1] if index + 1 < len(words) else ""
    if (program, following) in SUBCOMMAND_RUNNERS:
        return _subcommand(program, following, words, index + 2)
    if (program, following) in _AFTER_MARK:
        marks = _AFTER_MARK[(program, following)]
        mark = next((position for position in range(index + 2, len(words)) if words[position] in marks), None)
        return None if mark is None else (mark + 1, [], [])
    special = _SPECIAL.get(program)
    started = special(words, index) if special is not None else None
    if started is not None and started[0] >= len(words) and not started[1] and not started[2]:
        return None  # no command after all (`ssh-agent`, `bwrap --help`): the program's own rule
    return started


def _subcommand(program: str, sub: str, words: list[str], position: int) -> Start:
    value_options, operands = SUBCOMMAND_RUNNERS[(program, sub)]
    inline = _SUBCOMMAND_INLINE.get((program, sub), frozenset())
    effects: list[Effect] = []
    while position < len(words):
        word = words[position]
        if word == "--":
            position += 1
            break
        if not word.startswith("-") or word == "-":
            break
        options, position = parse_options(words, position, value_options | inline)
        texts = [value for name, value in options if name in inline and value is not None]
        if texts:
            return len(words), texts, effects
        installs = _RUNNER_INSTALLS.get((program, sub), _INSTALLS)
        if any(name in installs for name, _value in options) and not effects:
            effects.append((1, f"{program} {sub} installs the packages it is told to run with"))
    if (program, sub) in _ALWAYS_FETCH and not effects:
        effects.append(_FETCHES)
    return min(len(words), position + operands), [], effects


def _capsh(words: list[str], index: int) -> Start | None:
    """`capsh [options] -- ARGS` runs `/bin/bash ARGS` (`--shell=PATH` another shell)."""
    if "--" not in words[index + 1 :]:
        return None
    mark = words.index("--", index + 1)
    shell = next((word.split("=", 1)[1] for word in words[index + 1 : mark] if word.startswith("--shell=")), "bash")
    return len(words), [shlex.join([shell, *words[mark + 1 :]])], []


def _start_stop_daemon(words: list[str], index: int) -> Start | None:
    position, executable, starts = index + 1, "", False
    effects: list[Effect] = []
    while position < len(words) and words[position] != "--":
        options, position = parse_options(words, position, _START_STOP_VALUES)
        for name, value in options:
            if name in ("-K", "--stop"):
                effects.append((2, "start-stop-daemon --stop signals the processes it matches, outside the call"))
            starts = starts or name in ("-S", "--start")
            if name in ("-x", "--exec", "-a", "--startas") and value:
                executable = executable or value
    if starts and executable:
        arguments = words[position + 1 :] if position < len(words) else []
        effects.append((2, "start-stop-daemon starts the command as a daemon, outside the call"))
        return len(words), [shlex.join([executable, *arguments])], effects
    return (len(words), [], effects) if effects else None


def _pee(words: list[str], index: int) -> Start:
    return len(words), [word for word in words[index + 1 :] if not word.startswith("-")], []


def _bwrap(words: list[str], index: int) -> Start:
    position = index + 1
    while position < len(words) and words[position].startswith("--"):
        word = words[position]
        if word == "--":
            return position + 1, [], []
        position += 3 if word in _BWRAP_TWO else 2 if word in _BWRAP_ONE else 1
    return position, [], []


def _option_text(names: frozenset[str], effect: Effect | None) -> Callable[[list[str], int], Start | None]:
    """A program that runs the shell text an option gives (`sbatch --wrap TEXT`, `nodemon --exec TEXT`)."""

    def start(words: list[str], index: int) -> Start | None:
        for position in range(index + 1, len(words)):
            name, equals, value = words[position].partition("=")
            if name in names:
                text = value if equals else (words[position + 1] if position + 1 < len(words) else "")
                return len(words), [text], [effect] if effect else []
        return None

    return start


def _ssh_agent(words: list[str], index: int) -> Start | None:
    if "-k" in words[index + 1 :]:
        return len(words), [], [(2, "ssh-agent -k kills the agent SSH_AGENT_PID names, outside the call")]
    position = index + 1
    while position < len(words) and words[position].startswith("-"):
        _options, position = parse_options(words, position, word_set("-a -E -O -P -t"))
    return position, [], []


def _npx(words: list[str], index: int) -> Start | None:
    position = index + 1
    effects: list[Effect] = []
    while position < len(words):
        word = words[position]
        if word == "--":
            position += 1
            break
        if not word.startswith("-") or word == "-":
            break
        options, position = parse_options(words, position, _NPX_VALUES | _NPX_TEXT)
        texts = [value for name, value in options if name in _NPX_TEXT and value is not None]
        if texts:
            return len(words), texts, effects
        if any(name in _NPX_VALUES and name in ("-p", "--package") for name, _value in options) and not effects:
            effects.append((1, f"{words[index]} installs the packages it is told to run with"))
    if position < len(words) and not effects:
        effects.append(_FETCHES)
    return position, [], effects


# A program name that is not installed is fetched from the registry and run: code from outside, at least 1.
_FETCHES: Effect = (1, "the package runner fetches and runs a package of that name when none is installed")
_ALWAYS_FETCH = frozenset({("pnpm", "dlx"), ("yarn", "dlx"), ("bun", "x"), ("pipx", "run")})


_SPECIAL: dict[str, Callable[[list[str], int], Start | None]] = {
    "npx": _npx,
    "pnpx": _npx,
    "bunx": _npx,
    "capsh": _capsh,
    "start-stop-daemon": _start_stop_daemon,
    "pee": _pee,
    "bwrap": _bwrap,
    "sbatch": _option_text(word_set("--wrap"), (2, "sbatch queues the job on the cluster, outside the call")),
    "nodemon": _option_text(word_set("--exec -x"), None),
    "ssh-agent": _ssh_agent,
    "nix-shell": _option_text(word_set("--run --command"), (1, "nix-shell builds the environment the command runs in")),
    "vagrant": _option_text(word_set("-c --command"), None),
}
RUNNER_PROGRAMS = frozenset([program for program, _sub in (*SUBCOMMAND_RUNNERS, *_AFTER_MARK)] + list(_SPECIAL))
