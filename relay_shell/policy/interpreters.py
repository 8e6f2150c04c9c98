"""Interpreters given code on their command line: `python -c` (python_code.py), `python -m MODULE`, perl's `-e`
(perl_code.py), ruby's and node's `-e`, php's `-r` and `-S`. The code is read as its language reads it; what it
runs is handed back as shell text or argvs (Verdict.shell, Verdict.commands). A script file, or code read where
it cannot be seen, is a program of unknown effect (1). The rubric's "awk/sed/perl to stdout" is 0 when the reader
can see the whole program and it only prints.
"""

from __future__ import annotations

import re

from relay_shell.policy.calls import Call, Context, Verdict, read_options, verdict
from relay_shell.policy.perl_code import perl_verdict
from relay_shell.policy.python_code import python_verdict
from relay_shell.policy.script_code import node_verdict, ruby_verdict
from relay_shell.policy.vocabulary import INTERPRETERS

_MODULE_TIERS = {"http.server": 2, "SimpleHTTPServer": 2, "json.tool": 0, "venv": 1, "pydoc": 0, "this": 0}


_VERSIONED = re.compile(r"(?:python|perl|ruby|node|php|pypy)[0-9][0-9.]*")


def is_interpreter(program: str) -> bool:
    """The interpreters by name, and their versioned names (python3.11, perl5.36), not their tools (perldoc)."""
    return program in INTERPRETERS or _VERSIONED.fullmatch(program) is not None


def interpreter_verdict(program: str, words: list[str], found: Verdict) -> Verdict:
    """`found` is what the program's own rule said (perl -i, php -S, awk's rule): the code decides the rest."""
    if program.startswith("python"):
        return _python(words, found)
    if program.startswith("perl"):
        code = perl_verdict(words)
        return code if code.tier >= found.tier else Verdict(found.tier, found.reason, code.shell, code.commands)
    if program.startswith("ruby"):
        return _at_least(ruby_verdict(words), found)
    if program.startswith(("node", "nodejs", "deno", "bun")):
        return _at_least(node_verdict(words), found)
    if program.startswith("php") and "-S" in words:
        return found
    if program in ("awk", "gawk", "mawk", "nawk"):
        return found  # awk_code.py read the whole program
    return Verdict(max(found.tier, 1), f"{program} runs code", found.shell, found.commands)


def _at_least(code: Verdict, found: Verdict) -> Verdict:
    return code if code.tier >= found.tier else Verdict(found.tier, found.reason, code.shell, code.commands)


_JSON_TOOL_VALUES = frozenset(["--indent"])


def _module(module: str, arguments: list[str]) -> Verdict:
    """`python -m json.tool IN OUT` writes OUT; `pydoc -w NAME` imports NAME and writes NAME.html."""
    if module == "json.tool":
        _options, operands = read_options(["json.tool", *arguments], _JSON_TOOL_VALUES)
        if len(operands) >= 2:
            return verdict(1, f"python -m json.tool writes {operands[1]}")
    if module == "pydoc" and "-w" in arguments:
        return verdict(1, "python -m pydoc -w imports a module and writes an HTML file")
    return verdict(_MODULE_TIERS.get(module, 1), f"python -m {module}")


def _python(words: list[str], found: Verdict) -> Verdict:
    """`python -c CODE` is read as Python; `python -m http.server` serves the directory to other hosts; `python
    -m pip install` is pip. Other scripts are code we cannot see (1)."""
    from relay_shell.policy.packages import RULES as PACKAGE_RULES  # pip's rule

    index = 1
    while index < len(words):
        word = words[index]
        if not word.startswith("-") or word in ("-", "--"):
            break
        letters = word[1:] if not word.startswith("--") else ""
        # Flags cluster (`-Ic`, `-Bc'…'`); -c and -m end the options, their value attached or the next word;
        # -W and -X take a value too.
        cut = next((position for position, letter in enumerate(letters) if letter in "cmWX"), -1)
        if cut < 0 or letters[cut] in "WX":
            skip = word == "--check-hash-based-pycs" or (cut >= 0 and cut == len(letters) - 1)
            index += 2 if skip else 1
            continue
        attached = letters[cut + 1 :]
        value = attached or (words[index + 1] if index + 1 < len(words) else "")
        rest = words[index + 1 :] if attached else words[index + 2 :]
        if letters[cut] == "c":
            code = python_verdict(value)
            return Verdict(max(1, code.tier), code.reason, code.shell, code.commands)
        if value in ("pip", "pip3"):
            return PACKAGE_RULES["pip"](Call("pip", ["pip", *rest], Context()))
        return _module(value, rest)
    return Verdict(max(found.tier, 1), f"{words[0].rsplit('/', 1)[-1]} runs code")
