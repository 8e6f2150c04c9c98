"""ruby -e and node -e (and deno/bun eval) code: always a program of unknown effect (1, so readonly refuses it),
and 2 when any name in it — read token by token over all of the text, strings included, since both languages run
code inside strings (`"#{…}"`, template literals) — runs commands, changes files or processes, or reaches code by a
name built at run time (`send`, `eval`, `require` of a module not known to be harmless, `process[…]`). A literal
command (`system("…")`, backquotes, `%x{…}`, `execSync("…")`) is classified as shell text.
"""

from __future__ import annotations

import re

from relay_shell.policy.calls import Verdict
from relay_shell.policy.vocabulary import words

_TOKEN = re.compile(r"[A-Za-z_$][\w$]*[?!]?")
_STRING_ARGUMENT = r"\(?\s{0,8}(?:\"([^\"\\\n]{0,4096})\"|'([^'\\\n]{0,4096})')"
_RUBY_RUNS = words("system exec spawn popen popen2 popen3 capture2 capture2e capture3 pipeline syscall fork")
_RUBY_CHANGES = words(
    "delete unlink rename chmod chown lchmod lchown truncate symlink link mkfifo rm rm_r rm_rf rm_f rmtree"
    " remove_dir remove_entry remove_entry_secure mv move cp cp_r copy_entry install mkdir mkdir_p makedirs"
    " touch binwrite sysopen kill setuid setgid chroot trap at_exit rmdir"
)
_RUBY_DYNAMIC = words(
    "eval instance_eval class_eval module_eval instance_exec class_exec send __send__ public_send method"
    " define_method const_get instance_variable_set binding load require require_relative autoload open"
    " ObjectSpace Fiddle DL"
)
_RUBY_SAFE_REQUIRES = frozenset(["json", "set", "date", "time", "pp", "yaml", "csv", "securerandom", "digest"])
_NODE_RUNS = words("exec execSync execFile execFileSync spawn spawnSync fork child_process")
_NODE_CHANGES = words(
    "unlink unlinkSync rm rmSync rmdir rmdirSync rename renameSync writeFile writeFileSync appendFile"
    " appendFileSync chmod chmodSync chown chownSync truncate truncateSync symlink symlinkSync link linkSync"
    " mkdir mkdirSync copyFile copyFileSync cp cpSync createWriteStream kill dlopen createServer listen"
)
_NODE_DYNAMIC = words(
    "eval Function constructor binding mainModule globalThis global Reflect Proxy WebAssembly import vm Deno Bun"
    " __proto__ prototype"
)
_NODE_SAFE_MODULES = frozenset(["path", "util", "url", "assert", "events", "string_decoder", "querystring", "crypto"])


def ruby_verdict(arguments: list[str]) -> Verdict:
    code = _code(arguments, ("-e",))
    if code is None:
        return Verdict(1, "ruby runs a script that cannot be seen")
    if any(word.startswith("-r") and word not in ("-rjson", "-rset", "-rdate", "-rtime") for word in arguments[1:]):
        return Verdict(2, "ruby -r loads a library: code that cannot be seen")
    shell = _string_calls(code, _RUBY_RUNS)
    shell += re.findall(r"`([^`\n]{0,4096})`", code) + re.findall(r"%x\{([^}\n]{0,4096})\}", code)
    names = set(_TOKEN.findall(code))
    if shell or names & _RUBY_RUNS:
        return Verdict(2, "ruby code runs commands", shell=tuple(shell))
    if names & _RUBY_CHANGES or ("write" in names and names & {"File", "IO", "Pathname"}):
        return Verdict(2, "ruby code changes files or processes")
    required = set(re.findall(r"require\s{0,8}\(?\s{0,8}['\"]([\w/]{1,64})['\"]", code))
    if names & (_RUBY_DYNAMIC - {"require"}) or ("require" in names and not required <= _RUBY_SAFE_REQUIRES):
        return Verdict(2, "ruby code reaches code by a name built at run time, or loads a library")
    return Verdict(1, "ruby runs code")


def node_verdict(arguments: list[str]) -> Verdict:
    code = _code(arguments, ("-e", "--eval", "-p", "--print", "eval"))
    if code is None:
        return Verdict(1, f"{arguments[0].rsplit('/', 1)[-1]} runs a script that cannot be seen")
    shell = _string_calls(code, _NODE_RUNS)
    names = set(_TOKEN.findall(code))
    modules = set(re.findall(r"require\s{0,8}\(\s{0,8}['\"`](?:node:)?([\w/.-]{1,64})['\"`]\s{0,8}\)", code))
    if shell or names & _NODE_RUNS:
        return Verdict(2, "javascript code runs commands", shell=tuple(shell))
    if names & _NODE_CHANGES:
        return Verdict(2, "javascript code changes files or processes")
    if names & _NODE_DYNAMIC or "process[" in code.replace(" ", "") or not modules <= _NODE_SAFE_MODULES:
        return Verdict(2, "javascript code reaches code by a name built at run time, or loads a module")
    if "require" in names and not modules:
        return Verdict(2, "javascript code loads a module named at run time")
    return Verdict(1, "javascript runs code")


def _code(arguments: list[str], options: tuple[str, ...]) -> str | None:
    """The code given with one of the options (joined when given more than once), or None."""
    codes = []
    for index, word in enumerate(arguments[1:], start=1):
        if word in options and index + 1 < len(arguments):
            codes.append(arguments[index + 1])
        elif word.startswith("-") and not word.startswith("--") and len(word) > 2:
            # A cluster (`-pe`, `-ne`, `-e'code'`): the first code letter takes the rest, or the next word.
            letters = {option[1] for option in options if len(option) == 2}
            cut = next((position for position, letter in enumerate(word[1:], start=1) if letter in letters), 0)
            rest = word[cut + 1 :] if cut else ""
            if cut and rest and not set(rest) <= letters | {"n", "l", "a", "W"}:
                codes.append(rest)
            elif cut and index + 1 < len(arguments):
                codes.append(arguments[index + 1])
    return "\n".join(codes) if codes else None


def _string_calls(code: str, names: frozenset[str]) -> list[str]:
    """The literal string given as the first argument of a call to one of the names."""
    found = []
    for match in re.finditer(r"\b(" + "|".join(sorted(names)) + r")\s{0,8}" + _STRING_ARGUMENT, code):
        found.append(match.group(2) if match.group(2) is not None else match.group(3))
    return found
