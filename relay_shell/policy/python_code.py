"""Python code as Python reads it: parsed with the standard library's `ast` (nothing runs), then every call looked
at. A call that runs a command (`os.system`, `subprocess.run`, `os.popen`, `pty.spawn`, …) is classified with its
command (a literal string as shell text, a literal list as an argv); one that changes files or processes
(`os.remove`, `shutil.rmtree`, `Path.write_text`, `open(…, "w")`, `os.kill`) is 2, `rmtree` of / or a system
directory 3; code built at run time (`eval`, `exec`, `__import__`, `getattr` with a computed name) is 2. Python
code is at least 1: a program of unknown effect. Text that is not valid Python 3 (Python 2, a fragment) is read
by the markers it contains, the way the classifier read all Python before.
"""

from __future__ import annotations

import ast
import warnings

from relay_shell.policy.calls import Verdict
from relay_shell.policy.vocabulary import PYTHON_ROOT_RMTREE, PYTHON_SHELL_CALL, PYTHON_STATEFUL, words

_RUNS_SHELL = words("system popen getoutput getstatusoutput")
_RUNS_COMMAND = words(
    "run call check_call check_output Popen spawn spawnl spawnle spawnlp spawnlpe spawnv spawnve spawnvp spawnvpe"
    " execl execle execlp execlpe execv execve execvp execvpe posix_spawn posix_spawnp create_subprocess_exec"
    " create_subprocess_shell startfile"
)
_CHANGES = words(
    "unlink rmdir removedirs renames chmod lchmod chown lchown killpg truncate write_text write_bytes symlink"
    " symlink_to hardlink_to link mkfifo mknod setuid setgid seteuid setegid chroot copyfile copytree sendfile"
    " utime fchmod fchown ftruncate pwrite"
)
# Names other objects use too (`list.remove`, `str.replace`, `asyncio.run`): only called bare or on these modules.
_AMBIGUOUS = words("remove rename replace kill move copy copy2 run call")
_MODULES = words("os posix shutil subprocess sp signal")
_DYNAMIC = words("eval exec compile __import__ execfile breakpoint")
_DYNAMIC_ATTRIBUTES = words("import_module load_module exec_module run_path run_module")
_WRITE_MODES = frozenset("wax+")


def python_verdict(code: str) -> Verdict:
    """What Python code does: its tier, why, and the command lines and argvs it runs."""
    try:
        # A client's text, not ours: its invalid escapes would warn on the server's stderr (or raise under -W error).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return _by_markers(code)
    worst = (1, "python code")
    shell: list[str] = []
    argvs: list[tuple[str, ...]] = []
    # Only calls are looked at, and a call is written with `(`: a line without one (`7*7` typed at a REPL, every
    # step of a dialogue) has none, and walking its tree cost more than parsing it.
    for node in ast.walk(tree) if "(" in code else ():
        if not isinstance(node, ast.Call):
            continue
        name = _called_name(node.func)
        if name in _AMBIGUOUS and not _bare_or_module(node.func):
            continue
        found = _call(name, node, shell, argvs)
        if found is not None and found[0] > worst[0]:
            worst = found
    if PYTHON_ROOT_RMTREE.search(code):
        worst = (3, "python deletes / or a system directory")
    return Verdict(worst[0], worst[1], shell=tuple(shell), commands=tuple(argvs))


def _call(name: str, node: ast.Call, shell: list[str], argvs: list[tuple[str, ...]]) -> tuple[int, str] | None:
    first = node.args[0] if node.args else None
    if name in _RUNS_SHELL or name in _RUNS_COMMAND:
        command = _literal(first)
        if isinstance(command, str):
            shell.append(command)
        elif isinstance(command, list) and command and all(isinstance(item, str) for item in command):
            argvs.append(tuple(command))
        elif name in _RUNS_COMMAND and name.startswith("exec") and len(node.args) >= 2:
            rest = [_literal(argument) for argument in node.args[1:]]
            if all(isinstance(item, str) for item in rest):
                argvs.append(tuple(str(item) for item in rest))
        return 2, "python code runs commands"
    if name in ("rmtree", "remove_tree"):  # a recursive delete: classified as rm -rf of its literal path
        target = _literal(first)
        if isinstance(target, str):
            argvs.append(("rm", "-rf", target))
            return 2, "python code deletes a directory tree"
        return 3, "python code deletes a directory tree named at run time"
    if name in _CHANGES or name in _AMBIGUOUS:
        return 2, "python code changes files or processes"
    if name in _DYNAMIC or name in _DYNAMIC_ATTRIBUTES:
        return 2, "python code runs code built at run time"
    if name in ("getattr", "setattr", "delattr") and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
        return 2, "python code looks up a name built at run time"
    if name == "open":
        mode = node.args[1] if len(node.args) >= 2 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        if mode is None:
            return None
        value = _literal(mode)
        if not isinstance(value, str) or _WRITE_MODES & set(value):
            return 2, "python code writes files"
    return None


def _called_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _bare_or_module(func: ast.expr) -> bool:
    return isinstance(func, ast.Name) or (
        isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in _MODULES
    )


def _literal(node: ast.expr | None) -> object:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _by_markers(code: str) -> Verdict:
    tier, reason = 1, "python script"
    if any(marker in code for marker in PYTHON_STATEFUL):
        tier, reason = 2, "python script changes files, processes or runs commands"
    if PYTHON_ROOT_RMTREE.search(code):
        tier, reason = 3, "python deletes / or a system directory"
    shell = tuple(match.group("body") for match in PYTHON_SHELL_CALL.finditer(code))
    return Verdict(tier, reason, shell=shell)
