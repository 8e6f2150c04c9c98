"""tar (GNU tar and bsdtar), read as tar reads its command line: the traditional first word of letters (`tar xzf A`),
bundles whose value letters take the next words in order, long options and their abbreviations. Beyond creating
and extracting (1) and deleting members (2), tar runs commands its options name (`--checkpoint-action=exec=CMD`,
`-I`/`--use-compress-program`, `-F`/`--info-script`/`--new-volume-script`, `--to-command`, `--rsh-command`,
`--rmt-command`: classified as shell text), reaches a remote archive through rsh or ssh (`-f host:file`, unless
`--force-local`), writes the files its options name (the archive when creating, `--index-file`,
`--listed-incremental`, `--volno-file`), and deletes files (`--remove-files`, `--recursive-unlink`,
`--unlink-first`). TAR_OPTIONS is read as options too (code_env.py).
"""

from __future__ import annotations

import re

from relay_shell.policy.calls import READ, Call, Verdict, is_protected, long_names, read_options, verdict
from relay_shell.policy.vocabulary import words

_SHORT_VALUES = words("-f -C -T -X -I -F -g -K -L -N -V -b -H")
_LONG_VALUES = words(
    "--file --directory --files-from --exclude-from --use-compress-program --info-script --new-volume-script"
    " --listed-incremental --starting-file --newer --newer-mtime --after-date --label --blocking-factor --format"
    " --checkpoint-action --rsh-command --rmt-command --to-command --index-file --volno-file --transform --xform"
    " --exclude --owner --group --mode --mtime --suffix --record-size --tape-length --quoting-style"
    " --strip-components --sparse-version --exclude-tag --exclude-tag-under --exclude-tag-all --owner-map"
    " --group-map --pax-option --level --hole-detection --clamp-mtime"
)
_OPTIONAL = words("--checkpoint --backup --occurrence --atime-preserve --sparse-version --verify")
_KNOWN = long_names(
    _LONG_VALUES,
    _OPTIONAL,
    words(
        "--create --extract --get --list --append --update --catenate --concatenate --delete --diff --compare"
        " --remove-files --recursive-unlink --unlink-first --force-local --to-stdout --overwrite --keep-old-files"
        " --test-label --verbose --gzip --bzip2 --xz --zstd --lzma --lzip --lzop --compress --auto-compress"
    ),
)
_COMMANDS = {
    "-I": "compressor",
    "--use-compress-program": "compressor",
    "-F": "script",
    "--info-script": "script",
    "--new-volume-script": "script",
    "--to-command": "command",
    "--rsh-command": "command",
    "--rmt-command": "command",
}
_WRITTEN = words("--index-file --listed-incremental -g --volno-file")
_DELETES = {"--remove-files": 2, "--recursive-unlink": 2, "--unlink-first": 2}
_COMPRESSORS = words("gzip pigz bzip2 pbzip2 lbzip2 xz pixz lz4 lzop zstd pzstd lzma lzip plzip brotli compress")
_REMOTE = re.compile(r"[^/:]+:")


def tar_verdict(call: Call) -> Verdict:
    words_ = _traditional(call.words)
    options, _operands = read_options(words_, _SHORT_VALUES | _LONG_VALUES, _OPTIONAL, _KNOWN)
    names = {name for name, _value in options}
    letters = {name[1] for name in names if len(name) == 2}
    creates = bool(letters & {"c", "r", "u", "A"} or names & {"--create", "--append", "--update", "--catenate"})
    extracts = "x" in letters or bool(names & {"--extract", "--get"})
    found = [READ]
    shell: list[str] = []
    written: list[str] = []
    if "--delete" in names:
        found.append(verdict(2, "tar deletes members of an archive"))
    if creates or extracts:
        directory = next((value or "" for name, value in options if name in ("-C", "--directory")), "")
        if extracts and (directory == "/" or is_protected(directory + "/")):
            found.append(verdict(2, "extracts into a system directory"))
        else:
            found.append(verdict(1, "tar creates or extracts an archive"))
    for name, value in options:
        if name in _DELETES and (creates or extracts):
            found.append(verdict(_DELETES[name], f"tar {name} deletes files"))
        elif name in ("-f", "--file") and value:
            if _REMOTE.match(value) and "--force-local" not in names:
                found.append(verdict(1, f"tar reaches the remote archive {value} through rsh or ssh"))
            elif creates:
                written.append(value)
        elif name in _WRITTEN and value:
            written.append(value)
        elif name in _COMMANDS and value:
            command = _command(_COMMANDS[name], value)
            if command:
                shell.append(command)
                found.append(verdict(0, f"tar {name} runs a command"))
        elif name == "--checkpoint-action" and value:
            action, _equals, command = value.partition("=")
            if action == "exec" and command:
                shell.append(command)
                found.append(verdict(0, "tar --checkpoint-action=exec runs a command"))
    worst = max(found, key=lambda item: item.tier)
    commands = tuple(("tee", path) for path in written if path != "-")
    if shell or commands:
        return Verdict(worst.tier, worst.reason, shell=tuple(shell), commands=commands)
    return worst


def _traditional(words: list[str]) -> list[str]:
    """The traditional first word (`tar cvfT ARCHIVE LIST`): letters without a dash, each letter that takes a value
    taking the next word in turn; read as the separate options it stands for."""
    if len(words) < 2 or not words[1] or words[1].startswith("-"):
        return words
    options: list[str] = []
    following = 2
    for letter in words[1]:
        options.append("-" + letter)
        if "-" + letter in _SHORT_VALUES and following < len(words):
            options.append(words[following])
            following += 1
    return [words[0], *options, *words[following:]]


def _command(kind: str, value: str) -> str:
    """The command line an option runs; a known compressor run as a filter writes nothing."""
    if kind == "compressor" and value.split()[0].rsplit("/", 1)[-1] in _COMPRESSORS:
        return ""
    return value
