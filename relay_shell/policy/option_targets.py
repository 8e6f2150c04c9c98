"""What a program's option values name, for programs whose rule does not read them (adr/0025 Round 6, attack2 U4
and U8): a file it writes that is a critical system file, a file under a system directory or a block device, and a
library it loads.

Unknown programs are 1 by design, and so are many known ones (compilers, converters, `gpg`, `tcpdump`): a rule per
program would never end. The generic rule: an output option (`-o`, `--output`, `-out`, `-w`, `-E`, `--log-file`, …)
whose value is a critical file or a block device is 3, under `/etc`, `/boot`, `/usr` … 2, as the rubric rates the
same write through `>` or `sort -o` (files.writes_onto). Programs whose operands are what they write (`split`'s
prefix, `link`, `objcopy`, `strip` in place) are read the same way. Applied only where the program's own rule said
1 or less and not 0: a tier-0 program's options are read by its own rule (`ls -o FILE`, `wc -w FILE` read FILE).
"""

from __future__ import annotations

from relay_shell.policy.calls import Verdict, verdict
from relay_shell.policy.files import writes_onto
from relay_shell.policy.vocabulary import words

# Output options by their spelling in the programs that have them (gcc/ld/iconv/gpg/patch/msgfmt/pandoc `-o`,
# openssl `-out`, tcpdump `-w`, ssh `-E`, …).
_OUTPUT_OPTIONS = words(
    "-o --output -out --out -output --outfile -outfile --output-file --out-file --log-file --logfile -logfile"
    " --dump-file --pidfile --pid-file"
)
# Letters that are an output option only in some programs (`-w` is a flag of mount and badblocks, `-E` of sudo).
_OWN_OUTPUT_OPTIONS: dict[str, frozenset[str]] = {
    "tcpdump": words("-w"),
    "tshark": words("-w"),
    "dumpcap": words("-w"),
    "ssh": words("-E"),
    "scp": words("-E"),
    "sftp": words("-E"),
}
_ATTACHED = ("-o", "-w", "-E")  # `-o/etc/passwd`
# Programs whose operands are the files they write: the last one (its prefix for split), or every one (strip).
_LAST_OPERAND_WRITTEN = words("link objcopy llvm-objcopy csplit")
_PREFIX_OPERAND = words("split")
_EVERY_OPERAND_WRITTEN = words("strip llvm-strip")
# Options whose value is a shared library the program loads and runs (attack2 U8): code nobody can see, as
# `LD_PRELOAD` and `ssh -I` are (2).
_LIBRARY_OPTIONS: dict[str, frozenset[str]] = {
    "ssh-keygen": words("-D -w"),
    "ssh-add": words("-s -S"),
    "pkcs11-tool": words("--module"),
    "pkcs15-tool": words("--module"),
    "p11tool": words("--provider"),
    "openssl": words("-engine -keyengine -provider-path"),
}

LIBRARY_PROGRAMS = frozenset(_LIBRARY_OPTIONS)


def option_target_verdict(program: str, words_: list[str]) -> Verdict | None:
    """The worst thing the command's option values and written operands name, or None. Every file it could name is
    a path with a `/`: the caller skips commands without one (most tier-1 commands), cheaply."""
    libraries = _LIBRARY_OPTIONS.get(program, frozenset())
    found: list[Verdict] = []
    outputs = _OUTPUT_OPTIONS | _OWN_OUTPUT_OPTIONS.get(program, frozenset())
    for index, word in enumerate(words_[1:], start=1):
        name, equals, attached = word.partition("=")
        value = attached if equals else (words_[index + 1] if index + 1 < len(words_) else "")
        if not equals and word[:2] in _ATTACHED and len(word) > 2 and word[2] == "/":
            name, value = word[:2], word[2:]
        if name in libraries and value and value != "list":
            found.append(verdict(2, f"{program} {name} loads a library: code that cannot be seen"))
        elif name in outputs and value:
            onto = writes_onto(value, f"{program} {name} writes")
            if onto is not None:
                found.append(onto)
    found += _written_operands(program, [word for word in words_[1:] if not word.startswith("-")])
    return max(found, key=lambda item: item.tier) if found else None


def _written_operands(program: str, operands: list[str]) -> list[Verdict]:
    written: list[str] = []
    if program in _LAST_OPERAND_WRITTEN and len(operands) >= 2:
        written = operands[-1:]
    elif program in _PREFIX_OPERAND and len(operands) >= 2:
        written = [operands[-1] + "aa"]  # split writes PREFIXaa, PREFIXab, …
    elif program in _EVERY_OPERAND_WRITTEN:
        written = operands
    found = [writes_onto(path, f"{program} writes") for path in written]
    return [item for item in found if item is not None]
