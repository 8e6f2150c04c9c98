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
    " create_subprocess_shell startfile spawnv_passfds"
)
_CHANGES = words(
    "unlink rmdir removedirs renames chmod lchmod chown lchown killpg truncate write_text write_bytes symlink"
    " symlink_to hardlink_to link mkfifo mknod setuid setgid seteuid setegid chroot copyfile copytree sendfile"
    " utime fchmod fchown ftruncate pwrite pthread_kill pidfd_send_signal send_signal"
    # C functions called directly (`ctypes.CDLL(None).kill(pid, 9)`): whatever libc does, nothing reads it
    " CDLL PyDLL WinDLL LoadLibrary cdll pydll"
)
# Names other objects use too (`list.remove`, `str.replace`, `asyncio.run`): only called bare or on these modules.
_AMBIGUOUS = words("remove rename replace kill move copy copy2 run call")
_MODULES = words("os posix shutil subprocess sp signal")
_PROCESS_METHODS = words("kill terminate suspend send_signal nice ionice rlimit")
_DYNAMIC = words("eval exec compile __import__ execfile breakpoint")
_DYNAMIC_ATTRIBUTES = words("import_module load_module exec_module run_path run_module")
_WRITE_MODES = frozenset("wax+")
# Modules whose loaders run what the data names (pickle's `cos\nsystem`), and what their loaders are called.
_UNPICKLERS = words("pickle cPickle _pickle dill cloudpickle marshal shelve jsonpickle")
_UNPICKLING = words("loads load Unpickler open decode")
_RUNS_SOURCE = words("code")  # code.InteractiveInterpreter().runsource, code.interact, …
_NAMESPACES = words("vars globals locals")
_EXTRACTS = words("extractall unpack_archive")
_COMPUTED = "(a function of os/subprocess named at run time)"  # what a name bound to one is called


_CLIENT_CODE = "<client code>"  # the file name the parser gives warnings; the filter below matches it
warnings.filterwarnings("ignore", module=_CLIENT_CODE)


def python_verdict(code: str) -> Verdict:
    """What Python code does: its tier, why, and the command lines and argvs it runs."""
    try:
        tree = _parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return _by_markers(code)
    worst = (1, "python code")
    shell: list[str] = []
    argvs: list[tuple[str, ...]] = []
    nodes = list(ast.walk(tree))  # walked once: three passes read it
    names, modules = _bindings(nodes)
    called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
    found: tuple[int, str] | None
    for node in nodes:
        if isinstance(node, ast.Call):
            name = _called_name(node.func, names)
            if name in _PROCESS_METHODS and "psutil" in modules.values():  # psutil.Process(pid).kill()
                found = (2, "python code signals processes (psutil)")
            elif name in _AMBIGUOUS and not _bare_or_module(node.func, names, modules):
                continue
            elif name == _COMPUTED or (not name and _computed_module_function(node.func, modules)):
                found = (3, "python code calls a function of os/subprocess named at run time: only known at run time")
            else:
                found = _call(name, node, shell, argvs) or _module_call(node.func, modules)
        elif isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in called:
            found = _reference(node, names, modules)
        elif isinstance(node, ast.Subscript):
            found = _namespace_subscript(node)
        else:
            continue
        if found is not None and found[0] > worst[0]:
            worst = found
    if PYTHON_ROOT_RMTREE.search(code):
        worst = (3, "python deletes / or a system directory")
    return Verdict(worst[0], worst[1], shell=tuple(shell), commands=tuple(argvs))


def _call(name: str, node: ast.Call, shell: list[str], argvs: list[tuple[str, ...]]) -> tuple[int, str] | None:
    first = node.args[0] if node.args else None
    if name in _RUNS_SHELL or name in _RUNS_COMMAND:
        command = _literal(first)
        rest = [_literal(argument) for argument in node.args[1:]]
        if name.startswith(("execv", "posix_spawn")) and rest and isinstance(rest[0], list) and rest[0]:
            if all(isinstance(item, str) for item in rest[0]):  # execvp(file, argv), posix_spawn(path, argv, env)
                argvs.append(tuple(str(item) for item in rest[0]))
        elif name.startswith("execl") and rest and all(isinstance(item, str) for item in rest):
            argvs.append(tuple(str(item) for item in rest))  # execl(path, arg0, arg1, …)
        elif isinstance(command, str):
            shell.append(command)
        elif isinstance(command, list) and command and all(isinstance(item, str) for item in command):
            argvs.append(tuple(command))
        elif name == "spawnv_passfds" and rest and isinstance(rest[0], list):
            argvs.append(tuple(str(item) for item in rest[0]))
        elif name in _RUNS_COMMAND and name.startswith("exec") and rest:
            if all(isinstance(item, str) for item in rest):
                argvs.append(tuple(str(item) for item in rest))

        elif name in _RUNS_BUILT and first is not None and not _names_program(first, command):
            return 3, "python code runs a command built at run time: only known at run time (adr/0025)"
        return 2, "python code runs commands"
    if name in ("rmtree", "remove_tree"):  # a recursive delete: classified as rm -rf of its literal path
        target = _literal(first)
        if isinstance(target, str):
            argvs.append(("rm", "-rf", target))
            return 2, "python code deletes a directory tree"
        return 3, "python code deletes a directory tree named at run time"
    if name in _CHANGES or name in _AMBIGUOUS:
        return 2, "python code changes files or processes"
    if name in ("eval", "exec", "compile") and first is not None and not isinstance(_literal(first), str):
        return 3, "python code runs code built at run time: only known at run time (adr/0025)"
    if name in _DYNAMIC or name in _DYNAMIC_ATTRIBUTES:
        return 2, "python code runs code built at run time"
    if name in ("getattr", "setattr", "delattr") and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
        return 2, "python code looks up a name built at run time"
    if name == "getattr" and len(node.args) >= 2 and isinstance(node.args[1].value, str):  # type: ignore[attr-defined]
        looked_up = node.args[1].value  # type: ignore[attr-defined]
        if looked_up in _RUNS_SHELL | _RUNS_COMMAND | _CHANGES | _DYNAMIC | _DYNAMIC_ATTRIBUTES | {"rmtree"}:
            return 2, f"python code looks up {looked_up} by name"
    if name == "open":
        mode = node.args[1] if len(node.args) >= 2 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        if mode is None:
            return None
        value = _literal(mode)
        if not isinstance(value, str) or _WRITE_MODES & set(value):
            return 2, "python code writes files"
    return None


# Calls whose first argument is the command line or argv: when it is built at run time, any program can run.
_RUNS_BUILT = _RUNS_SHELL | words(
    "run call check_call check_output Popen create_subprocess_shell create_subprocess_exec"
)


def _names_program(first: ast.expr, value: object) -> bool:
    """Whether a command argument names its program in the text: a literal string, or a list whose first item is."""
    if isinstance(value, (str, list)):
        return True
    return isinstance(first, (ast.List, ast.Tuple)) and bool(first.elts) and isinstance(_literal(first.elts[0]), str)


def _parse(code: str) -> ast.AST:
    """The code's tree. A client's text, not ours: its invalid escapes would warn on the server's stderr, so its
    warnings are ignored by a filter of their own (at import; `catch_warnings` around every parse cost more than
    the parse of a short line). A filter put ahead of it later (`-W error` turning the warning into a SyntaxError)
    is met by parsing again with every warning ignored."""
    try:
        return ast.parse(code, _CLIENT_CODE)
    except SyntaxError:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(code, _CLIENT_CODE)


def _bindings(nodes: list[ast.AST]) -> tuple[dict[str, str], dict[str, str]]:
    """Names bound to other names' objects: `from shutil import rmtree as r` (r -> rmtree), `x = os.system`
    (x -> system), `f := os.system`; and modules by their local names (`import shutil as s`: s -> shutil)."""
    names: dict[str, str] = {}
    modules: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules[(alias.asname or alias.name).split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                local = alias.asname or alias.name
                names[local] = (
                    f"{node.module}.{alias.name}" if node.module in _UNPICKLERS | _RUNS_SOURCE else alias.name
                )
                if node.module in _MODULES:
                    modules.setdefault(local, f"{node.module}.{alias.name}")
        elif isinstance(node, (ast.Assign, ast.NamedExpr)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                pairs = (
                    zip(target.elts, node.value.elts, strict=False)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else [(target, node.value)]
                )
                for bound, value in pairs:
                    if not isinstance(bound, ast.Name):
                        continue
                    if isinstance(value, (ast.Name, ast.Attribute)):
                        names[bound.id] = _called_name(value, names)
                    elif _computed_module_function(value, modules):  # f = getattr(os, "sys" + "tem")
                        names[bound.id] = _COMPUTED
                    elif _looked_up(value) is not None and _called_name(value):  # f = getattr(os, "system")
                        names[bound.id] = _called_name(value)
    return names, modules


def _called_name(func: ast.expr, names: dict[str, str] | None = None) -> str:
    if isinstance(func, ast.Name):
        return (names or {}).get(func.id, func.id).rsplit(".", 1)[-1]
    if isinstance(func, ast.Attribute):
        return func.attr
    looked_up = _looked_up(func)
    return looked_up[0] if looked_up is not None and isinstance(looked_up[0], str) else ""


def _looked_up(func: ast.expr) -> tuple[str | None, ast.expr] | None:
    """A function reached by its name as data: `getattr(OBJ, "system")`, `vars(os)["system"]`,
    `os.__dict__["system"]`, `__builtins__["exec"]` — the name (None when it is built at run time) and the object
    it is taken from. Calling it is calling the named function (attack2 U1)."""
    if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr":
        if len(func.args) < 2:
            return None
        name = func.args[1].value if isinstance(func.args[1], ast.Constant) else None
        return (name if isinstance(name, str) else None), func.args[0]
    if isinstance(func, ast.Subscript) and _namespace_subscript(func) is not None:
        key = func.slice.value if isinstance(func.slice, ast.Constant) else None
        return (key if isinstance(key, str) else None), func.value
    return None


def _computed_module_function(func: ast.expr, modules: dict[str, str]) -> bool:
    """`getattr(os, "sys" + "tem")(…)`: a module's function, looked up by a name built at run time, called."""
    looked_up = _looked_up(func)
    return looked_up is not None and looked_up[0] is None and _module_object(looked_up[1], modules)


def _module_object(node: ast.expr, modules: dict[str, str]) -> bool:
    """Whether an object is a module whose functions run commands or change files: `os`, `__import__("os")`,
    `importlib.import_module("os")`, `vars(os)`, `os.__dict__`, `__builtins__`."""
    if isinstance(node, ast.Name):
        return modules.get(node.id, node.id).split(".")[0] in _MODULES or node.id == "__builtins__"
    if isinstance(node, ast.Attribute):
        return node.attr == "__dict__" and _module_object(node.value, modules)
    if isinstance(node, ast.Call):
        called = _called_name(node.func)
        if called in ("__import__", "import_module", "vars") and node.args:
            argument = node.args[0]
            return _literal(argument) in _MODULES or _module_object(argument, modules) or called != "vars"
        return called in ("globals", "locals")
    return False


def _base_module(func: ast.expr, modules: dict[str, str]) -> str:
    """The module an attribute is taken from (`os` in `o.system` after `import os as o`), or ''."""
    if isinstance(func, ast.Attribute):
        base = func.value
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name):
            return modules.get(base.id, base.id).split(".")[0]
    return ""


def _bare_or_module(func: ast.expr, names: dict[str, str], modules: dict[str, str]) -> bool:
    if isinstance(func, ast.Name):
        return True
    looked_up = _looked_up(func)
    if looked_up is not None:
        return _module_object(looked_up[1], modules)
    return isinstance(func, ast.Attribute) and _base_module(func, modules) in _MODULES


def _module_call(func: ast.expr, modules: dict[str, str]) -> tuple[int, str] | None:
    """Calls whose danger is their module's: unpickling, the code module, archive extraction."""
    module = _base_module(func, modules)
    attribute = func.attr if isinstance(func, ast.Attribute) else ""
    if module in _UNPICKLERS and attribute in _UNPICKLING:
        return 2, f"python code unpickles data ({module}.{attribute} runs what the data names)"
    if module in _RUNS_SOURCE:
        return 2, "python code runs source text (the code module)"
    if attribute in _EXTRACTS:
        return 2, "python code extracts an archive, writing (and overwriting) files"
    return None


def _reference(
    node: ast.Attribute | ast.Name, names: dict[str, str], modules: dict[str, str]
) -> tuple[int, str] | None:
    """A dangerous callable named without being called on the spot (passed, stored, subscripted, `.__call__`): it
    counts as called with arguments nobody can see."""
    if not isinstance(node.ctx, ast.Load):
        return None
    if isinstance(node, ast.Name):
        if node.id in _DYNAMIC and node.id not in names:
            # A builtin that runs code, named without a call on the spot: a decorator calls it with no `(`
            # (`@exec` over `@input` over a class runs the line read from stdin).
            return 2, f"python code refers to {node.id}, which runs code built at run time"
        if node.id not in names:
            return None  # a local variable that happens to be called `system` or `run`
        name = names[node.id]
        module = name.rsplit(".", 1)[0] if "." in name else ""
        if module in _UNPICKLERS or module in _RUNS_SOURCE:
            return 2, f"python code refers to {name}, which runs code"
        name = name.rsplit(".", 1)[-1]
    else:
        name = node.attr
        if name in _AMBIGUOUS and _base_module(node, modules) not in _MODULES:
            return None
        if _module_call(node, modules) is not None:
            return _module_call(node, modules)
    if name in ("rmtree", "remove_tree"):
        return 3, "python code refers to rmtree without calling it: a directory tree named at run time"
    if name in _RUNS_SHELL or name in _RUNS_COMMAND:
        return 2, f"python code refers to {name} without calling it directly: it counts as run"
    if name in _CHANGES or name in _AMBIGUOUS or name in _DYNAMIC or name in _DYNAMIC_ATTRIBUTES:
        return 2, f"python code refers to {name} without calling it directly: it counts as called"
    return None


def _namespace_subscript(node: ast.Subscript) -> tuple[int, str] | None:
    """`os.__dict__["system"]`, `vars(os)[…]`, `globals()[…]`, `__builtins__[…]`: a name reached through a
    namespace's dictionary."""
    value = node.value
    through = (
        (isinstance(value, ast.Attribute) and value.attr == "__dict__")
        or (isinstance(value, ast.Name) and value.id == "__builtins__")
        or (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in _NAMESPACES)
    )
    if through:
        return 2, "python code reaches a name through a namespace's dictionary (__dict__, vars(), globals())"
    return None


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
