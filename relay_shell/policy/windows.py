"""Windows command text, which reaches Windows OpenSSH hosts through ssh_exec: PowerShell cmdlets (Verb-Noun,
case-insensitive, parameters by unambiguous prefix) and their aliases, cmd.exe built-ins and the system tools
(del /s, rd /s, format, diskpart, vssadmin, bcdedit, shutdown, net, sc, reg, robocopy, wsl). `powershell
-Command`, `-EncodedCommand` (decoded) and `cmd /c` text is classified in turn.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable

from relay_shell.policy.calls import Call, Verdict, every_file, names_files, verdict
from relay_shell.policy.vocabulary import words

_VERB_NOUN = re.compile(r"^([a-z]+)-([a-z][a-z0-9]*)$")
# PowerShell's approved verbs: `Verb-Noun` with one of these is a cmdlet; `apt-get`, `ssh-keygen` are not.
_APPROVED_VERBS = words(
    "add approve assert backup block build checkpoint clear close compare complete compress confirm connect convert"
    " convertfrom convertto copy debug deny deploy disable disconnect dismount edit enable enter exit expand export"
    " find format get grant group hide import initialize install invoke join limit lock measure merge mount move new"
    " open optimize out ping pop protect publish push read receive redo register remove rename repair request reset"
    " resize resolve restart restore resume revoke save search select send set show skip split start step stop"
    " submit suspend switch sync test trace unblock undo uninstall unlock unprotect unpublish unregister update use"
    " wait watch where write foreach sort tee"
)
_READ_VERBS = words(
    "get test find measure compare select where sort group show read resolve search trace wait write convertto"
    " convertfrom convert join split foreach receive confirm assert push pop format debug"
)
_CMDLET_TIERS = {
    "remove-partition": 3,
    "remove-physicaldisk": 3,
    "remove-virtualdisk": 3,
    "remove-vm": 3,
    "remove-storagepool": 3,
    "clear-disk": 3,
    "clear-recyclebin": 3,
    "initialize-disk": 3,
    "format-volume": 3,
    "stop-computer": 3,
    "restart-computer": 3,
    "new-partition": 3,
    "new-volume": 3,
    "out-file": 1,
    "tee-object": 1,
    "export-csv": 1,
    "export-clixml": 1,
    "new-item": 1,
    "copy-item": 1,
    "move-item": 1,
    "rename-item": 1,
    "expand-archive": 1,
    "compress-archive": 1,
    "start-process": 1,
    "start-job": 1,
    "start-transcript": 1,
    "import-module": 1,
    "invoke-item": 1,
    "enter-pssession": 1,
    "set-content": 1,
    "add-content": 1,
    "add-type": 1,
    "checkpoint-computer": 1,
    "backup-sqldatabase": 1,
    "save-module": 1,
    "new-object": 0,
    "new-variable": 0,
    "new-timespan": 0,
    "new-guid": 0,
    "set-location": 0,
    "set-variable": 0,
    "set-alias": 0,
    "set-strictmode": 0,
    "add-member": 0,
    "remove-variable": 0,
    "remove-module": 0,
    "clear-host": 0,
    "clear-variable": 0,
    "clear-history": 0,
    "start-sleep": 0,
    "stop-transcript": 0,
    "import-csv": 0,
    "out-host": 0,
    "out-string": 0,
    "out-null": 0,
    "out-gridview": 0,
    "out-default": 0,
}
_ALIASES = {
    "ri": "remove-item",
    "erase": "remove-item",
    "del": "remove-item",
    "rd": "remove-item",
    "rmdir": "remove-item",
    "iex": "invoke-expression",
    "icm": "invoke-command",
    "iwr": "invoke-webrequest",
    "irm": "invoke-restmethod",
    "gci": "get-childitem",
    "gc": "get-content",
    "sp": "set-itemproperty",
    "si": "set-item",
    "ni": "new-item",
    "cpi": "copy-item",
    "mi": "move-item",
    "spps": "stop-process",
    "sasv": "start-service",
    "spsv": "stop-service",
    "saps": "start-process",
    "rni": "rename-item",
}


def _parameter(call: Call, name: str) -> bool:
    """A PowerShell switch by any prefix of its name (`-r`, `-Rec`, `-Recurse`), case-insensitive."""
    return any(word.startswith("-") and len(word) > 1 and name.startswith(word[1:].lower()) for word in call.words[1:])


def _parameter_value(call: Call, name: str) -> str | None:
    for index, word in enumerate(call.words[1:-1], start=1):
        if word.startswith("-") and len(word) > 2 and name.startswith(word[1:].lower().split(":", 1)[0]):
            return call.words[index + 1]
    return None


def _remove_item(call: Call, recursive: bool) -> Verdict:
    targets = [word for word in call.words[1:] if not word.startswith(("-", "/"))]
    if recursive:
        if targets and all(map(names_files, targets)):
            return verdict(2, "deletes files (-Recurse is moot)")
        return verdict(3, "recursive delete of a directory tree")
    if any(map(every_file, targets)) or any(target.endswith(("*", "\\*")) for target in targets):
        return verdict(3, "deletes every file of a directory")
    return verdict(2, "deletes files")


def cmdlet(call: Call, name: str) -> Verdict:
    """A PowerShell cmdlet or function by its lower-case Verb-Noun name."""
    if name == "remove-item":
        windows_switch = any(word.lower() in ("/s", "/s/q", "/q/s") for word in call.words[1:])
        return _remove_item(call, windows_switch or _parameter(call, "recurse"))
    if name in ("invoke-expression", "invoke-command"):
        texts = [word for word in call.words[1:] if not word.startswith("-")]
        return Verdict(2, f"{name} runs text as code", shell=tuple(texts))
    if name in ("invoke-webrequest", "invoke-restmethod"):
        method = (_parameter_value(call, "method") or "get").lower()
        if method in ("post", "put", "delete", "patch") or (_parameter(call, "body") and len(call.words) > 2):
            return verdict(2, "HTTP request that changes a remote resource")
        return verdict(1 if _parameter_value(call, "outfile") else 0, "HTTP request")
    if name == "start-process" and (_parameter_value(call, "verb") or "").lower() == "runas":
        return verdict(2, "starts a process elevated")
    if name in ("set-content", "add-content", "out-file", "new-item") and any(
        re.match(r"^[A-Za-z]:\\?windows", word, re.IGNORECASE) for word in call.words[1:]
    ):
        return verdict(2, f"{name} writes under the Windows directory")
    if name in _CMDLET_TIERS:
        return verdict(_CMDLET_TIERS[name], name)
    verb = name.split("-", 1)[0]
    if verb == "format":
        return verdict(0, f"{name} formats output")
    if verb in _READ_VERBS:
        return verdict(0, f"{name} reads")
    return verdict(2, f"{name} changes the system")


def _delete(call: Call) -> Verdict:
    switches = {word.lower() for word in call.words[1:] if word.startswith("/")}
    recursive = bool(switches & {"/s", "/s/q", "/q/s"}) or _parameter(call, "recurse")
    if call.program in ("rd", "rmdir"):
        return verdict(3, "rd /s deletes a directory tree") if recursive else verdict(1, "removes an empty directory")
    return _remove_item(call, recursive)


def _switches(call: Call) -> set[str]:
    return {word.lower() for word in call.words[1:] if word.startswith("/")}


def _shutdown(call: Call) -> Verdict:
    switches = _switches(call)
    if switches & {"/a", "/h", "/l", "/i"} and not switches & {"/s", "/r", "/p", "/g"}:
        return verdict(2, "cancels a shutdown, hibernates or logs off")
    if "/?" in switches:
        return verdict(0, "help")
    return verdict(3, "shuts down or restarts Windows")


def _by_action(reads: frozenset[str], destroys: frozenset[str] = frozenset()) -> Callable[[Call], Verdict]:
    def rule(call: Call) -> Verdict:
        actions = {word.lower().lstrip("/-").split(":", 1)[0] for word in call.words[1:]}
        if actions & destroys:
            return verdict(3, f"{call.program} {sorted(actions & destroys)[0]} destroys data")
        if len(call.words) == 1 or actions & reads:
            return verdict(0, f"{call.program} shows settings")
        return verdict(2, f"{call.program} changes the system")

    return rule


def _net(call: Call) -> Verdict:
    operands = [word.lower() for word in call.words[1:]]
    if any(word.startswith("/") and word not in ("/domain", "/y", "/n") for word in operands) or (
        operands[:1] in (["stop"], ["start"], ["pause"], ["continue"]) and len(operands) > 1
    ):
        return verdict(2, "net changes users, groups, shares or services")
    if operands[:1] == ["use"] and len(operands) > 1:
        return verdict(1, "net use maps a share")
    return verdict(0, "net shows settings")


def _robocopy(call: Call) -> Verdict:
    switches = _switches(call)
    if switches & {"/mir", "/purge"}:
        return verdict(3, "robocopy /mir deletes files in the destination tree")
    if switches & {"/mov", "/move"}:
        return verdict(2, "robocopy moves files")
    return verdict(1, "robocopy copies files")


def _shell_text(call: Call) -> Verdict:
    """powershell -Command / -EncodedCommand, cmd /c: the text they run."""
    texts: list[str] = []
    arguments = call.words[1:]
    for index, word in enumerate(arguments):
        lowered = word.lower()
        if call.program == "cmd" and lowered in ("/c", "/k", "/r"):
            texts.append(" ".join(arguments[index + 1 :]))
            break
        if lowered in ("-encodedcommand", "-enc", "-e", "-ec") and index + 1 < len(arguments):
            texts.append(_decode(arguments[index + 1]))
            break
        if lowered in ("-command", "-c") and index + 1 < len(arguments):
            texts.append(" ".join(arguments[index + 1 :]))
            break
        if lowered in ("-file", "-f"):
            return verdict(1, f"{call.program} runs a script file")
        if not word.startswith(("-", "/")):
            texts.append(" ".join(arguments[index:]))
            break
    if not texts:
        return verdict(1, f"{call.program}: interactive shell")
    return Verdict(1, f"{call.program} runs command text", shell=tuple(texts))


def _decode(encoded: str) -> str:
    try:
        return base64.b64decode(encoded[:1_000_000], validate=False).decode("utf-16-le", errors="replace")
    except (binascii.Error, ValueError):
        return "Invoke-Expression undecodable"  # what cannot be read is dynamic code (tier 2)


def _wsl(call: Call) -> Verdict:
    lowered = [word.lower() for word in call.words[1:]]
    if "--unregister" in lowered:
        return verdict(3, "wsl --unregister deletes a distribution's filesystem")
    if any(word in ("-l", "--list", "--status", "--version", "-v", "--help") for word in lowered):
        return verdict(0, "wsl shows distributions")
    if any(
        word in ("--shutdown", "--terminate", "-t", "--set-default", "--install", "--import", "--update")
        for word in lowered
    ):
        return verdict(2, "wsl changes distributions")
    separator = lowered.index("--") + 1 if "--" in lowered else 0
    command = tuple(call.words[1 + separator :]) if separator or (lowered and not lowered[0].startswith("-")) else ()
    return Verdict(1, "wsl runs a Linux command", commands=(command,) if command else ())


RULES: dict[str, Callable[[Call], Verdict]] = {
    "del": _delete,
    "erase": _delete,
    "rd": _delete,
    "rmdir": _delete,
    "format": lambda call: verdict(0 if "/?" in _switches(call) else 3, "format erases a volume"),
    "diskpart": lambda call: verdict(3, "diskpart repartitions disks"),
    "cipher": lambda call: verdict(2 if any(word.lower().startswith("/w") for word in call.words) else 1, "cipher"),
    "vssadmin": _by_action(words("list"), words("delete")),
    "wbadmin": _by_action(words("get"), words("delete")),
    "bcdedit": _by_action(words("enum v"), words("delete")),
    "bootrec": lambda call: verdict(3, "bootrec rewrites the boot sector"),
    "reg": _by_action(words("query compare export")),
    "sc": _by_action(words("query queryex qc qdescription qfailure getdisplayname getkeyname enumdepend sdshow")),
    "schtasks": _by_action(words("query")),
    "icacls": lambda call: verdict(2 if len(call.words) > 2 else 0, "icacls"),
    "takeown": lambda call: verdict(2, "takeown changes ownership"),
    "taskkill": lambda call: verdict(2, "taskkill ends processes"),
    "net": _net,
    "robocopy": _robocopy,
    "powershell": _shell_text,
    "pwsh": _shell_text,
    "cmd": _shell_text,
    "wsl": _wsl,
    "shutdown": _shutdown,
}
READ_ONLY = words(
    "tasklist systeminfo ipconfig getmac driverquery findstr where ver whoami hostname tracert pathping type cls"
    " chdir title color more fc comp"
)


def is_windows_style(words_: list[str]) -> bool:
    """cmd.exe switches (`/s`, `/q`, `/?`) rather than paths."""
    return any(
        word[:1] == "/" and ((len(word) in (2, 3) and word[1:].isalpha()) or word == "/?") for word in words_[1:]
    )


def windows_verdict(program: str, call: Call) -> Verdict | None:
    """The verdict for a Windows command or cmdlet, or None if the name is not one."""
    name = program.lower().removesuffix(".exe")
    if name in RULES:
        return RULES[name](call)
    if name in READ_ONLY:
        return verdict(0, f"{name} reads")
    name = _ALIASES.get(name, name)
    if "-" not in name:
        return None
    match = _VERB_NOUN.match(name)
    if match is not None and match.group(1) in _APPROVED_VERBS:
        return cmdlet(call, name)
    return None
