"""What writing to a path risks: a redirection's target (a block device, a critical file, a system or login file, any
other file) and the root of a tree a transfer merges into (the worst file it could replace)."""

from __future__ import annotations

from relay_shell.policy.calls import is_device, is_protected
from relay_shell.policy.findings import Finding
from relay_shell.policy.vocabulary import CRITICAL_FILES, REDIRECT_WRITE, USER_CONFIG


def redirect_findings(redirects: list[tuple[str, str]]) -> list[Finding]:
    findings = []
    for operator, target in redirects:
        if operator not in REDIRECT_WRITE:
            continue
        if target in ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty") or target.startswith("/dev/fd/"):
            continue
        if target.startswith(("/dev/tcp/", "/dev/udp/")):
            tier = 1 if operator == "<>" else 2  # bash's network redirections: `>` sends data to a service
            findings.append(Finding(f"{operator} {target}", tier, f"bash connects to {target[5:]}"))
        elif is_device(target):
            findings.append(Finding(f"{operator} {target}", 3, f"writes onto block device {target}"))
        elif target in CRITICAL_FILES or target.startswith("/boot/"):
            tier = 3 if operator != ">>" and operator != "&>>" else 2
            findings.append(Finding(f"{operator} {target}", tier, f"writes {target}"))
        elif is_protected(target) or USER_CONFIG.match(target):
            findings.append(Finding(f"{operator} {target}", 2, f"writes system or login file {target}"))
        else:
            findings.append(Finding(f"{operator} {target}", 1, f"writes {target}"))
    return findings


def tree_findings(root: str) -> list[Finding]:
    """A tree merged into `root` may replace any file below it: the worst file it could reach counts."""
    below = root.rstrip("/") + "/"
    if root.startswith("/boot") or any(path.startswith(below) for path in CRITICAL_FILES):
        return [Finding(f"tree into {root}", 3, f"a tree merged into {root} can replace critical files there")]
    return redirect_findings([(">", root)])
