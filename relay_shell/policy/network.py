"""Rules for users, network configuration, firewalls, system settings and logs, network clients (curl, wget,
httpie, netcat, ssh with its remote command) and servers that listen for other hosts.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.plan import Subject
from relay_shell.policy.calls import READ, Call, Verdict, verdict
from relay_shell.policy.clients import curl_verdict, scp_verdict, ssh_verdict, wget_verdict
from relay_shell.policy.findings import Finding

# -- users, network configuration, firewalls ------------------------------------------------------------------


def _userdel(call: Call) -> Verdict:
    if call.has("-r", "--remove", "--remove-home", "--remove-all-files"):
        return verdict(3, f"{call.program} deletes the user's home directory")
    return verdict(2, f"{call.program} removes a user")


def _passwd(call: Call) -> Verdict:
    if (call.program == "passwd" and call.has_exact("-S", "--status")) or (
        call.program == "chage" and call.has_exact("-l", "--list")
    ):
        return verdict(0, "shows account status")
    return verdict(2, f"{call.program} changes accounts")


def _iptables(call: Call) -> Verdict:
    if call.has("-F", "--flush", "-X", "--delete-chain"):
        return verdict(3, f"{call.program} flushes the firewall rules")
    if call.has_exact("-L", "--list", "-S", "--list-rules", "-C", "--check", "-h", "--help", "-V", "--version"):
        return verdict(0, "lists firewall rules")
    return verdict(2, f"{call.program} changes the firewall")


def _nft(call: Call) -> Verdict:
    words = call.operands
    if words[:1] == ["flush"] or words[:2] in (["delete", "table"], ["destroy", "table"]):
        return verdict(3, "nft flushes or deletes firewall tables")
    if words[:1] in (["list"], ["monitor"], ["describe"], []) and not call.has("-f", "--file"):
        return verdict(0, "lists firewall rules")
    return verdict(2, "nft changes the firewall")


def _ufw(call: Call) -> Verdict:
    if call.has_exact("--dry-run") or call.subcommand in ("status", "show", "app", "version", "help", ""):
        return verdict(0, "ufw shows or simulates")
    if call.subcommand == "reset":
        return verdict(3, "ufw reset removes every rule")
    return verdict(2, "ufw changes the firewall")


def _firewall_cmd(call: Call) -> Verdict:
    changes = [option for option in call.long if not option.startswith(("--list", "--get", "--query", "--info"))]
    if not [option for option in changes if option not in ("--permanent", "--zone", "--state")]:
        return verdict(0, "firewall-cmd shows settings")
    return verdict(2, "firewall-cmd changes the firewall")


_IP_READ = {"", "show", "sh", "s", "list", "ls", "lst", "get", "help"}


def _ip(call: Call) -> Verdict:
    operands = [word for word in call.operands if not word.startswith("-")]
    obj = operands[0] if operands else ""
    verb = operands[1] if len(operands) > 1 else ""
    if obj in ("", "help", "monitor", "mon") or verb in _IP_READ:
        return READ
    return verdict(2, f"ip {obj} {verb} changes network configuration")


def _nmcli(call: Call) -> Verdict:
    """nmcli OBJECT [COMMAND [ARGS]], each word abbreviated at will (`n r wifi off`): NetworkManager, a daemon
    outside the call, makes the change (readonly's kernel confinement does not reach it)."""
    words = call.operands
    if not words or words[-1] in ("help", "monitor") or "monitor".startswith(words[0]):
        return READ
    what, rest = words[0], words[1:]
    if "general".startswith(what):
        settable = rest[:1] and ("hostname".startswith(rest[0]) or "logging".startswith(rest[0]))
        if not rest or rest[0] in ("status", "permissions") or (settable and len(rest) == 1):
            return READ
        return verdict(2, "nmcli general changes NetworkManager's settings")
    if "radio".startswith(what) or "networking".startswith(what):
        if any(word in ("on", "off") for word in rest):
            return verdict(2, f"nmcli turns {what} on or off")
        return READ
    if not rest or rest[-1] in ("show", "status", "list", "show-password"):
        return READ
    if len(rest) >= 1 and rest[0] in ("show", "s", "status", "list"):
        return READ
    if "device".startswith(what) and rest[:1] == ["wifi"] and (len(rest) == 1 or rest[1] == "list"):
        return READ
    return verdict(2, "nmcli changes network configuration")


def _setting(call: Call) -> Verdict:
    """hostname, date, timedatectl, hostnamectl, localectl, sysctl: show without arguments, set with them."""
    sub = call.subcommand
    if call.program == "sysctl":
        changes = call.has("-w", "--write", "-p", "--load", "--system") or any("=" in word for word in call.operands)
        return verdict(2, "sysctl changes kernel parameters") if changes else READ
    if call.program == "date":
        reading = call.has_exact("-d", "--date", "-r", "--reference", "-f", "--file")
        if call.has("-s", "--set") or (sub and not sub.startswith("+") and not reading):
            return verdict(2, "date sets the clock")
        return READ
    if call.program == "hostname":
        return READ if not sub or call.short & {"f", "i", "I", "s", "d", "A"} else verdict(2, "sets the host name")
    if not sub or sub in ("status", "show", "timesync-status", "show-timesync") or sub.startswith("list"):
        return READ
    return verdict(2, f"{call.program} {sub} changes system settings")


def _dmesg(call: Call) -> Verdict:
    if call.has("-c", "--read-clear", "-C", "--clear", "-n", "--console-level", "-D", "-E"):
        return verdict(2, "dmesg clears or changes the kernel log")
    return READ


def _journalctl(call: Call) -> Verdict:
    if any(
        option.startswith(("--vacuum", "--rotate", "--flush", "--relinquish", "--setup-keys")) for option in call.long
    ):
        return verdict(2, "journalctl deletes or rotates journal files")
    return READ


# -- network clients and servers ---------------------------------------------------------------------------------

_HTTP_WRITES = {"POST", "PUT", "DELETE", "PATCH"}


def _httpie(call: Call) -> Verdict:
    words = call.operands
    method = words[0].upper() if words and words[0].isalpha() and words[0].upper() == words[0].upper() else ""
    if method in _HTTP_WRITES or any(re.match(r"^[\w.-]+(:=|=|@)", word) for word in words[1:]):
        return verdict(2, "HTTP request that changes a remote resource")
    return verdict(1 if call.has("-d", "--download", "-o", "--output") else 0, "HTTP request")


def _netcat(call: Call) -> Verdict:
    listening = call.has("-l", "--listen") or any("LISTEN" in word.upper() for word in call.words[1:])
    if listening:
        return verdict(2, "opens a listener for other hosts")
    if call.has("-U", "--unixsock") or any(
        word.upper().startswith(("UNIX-CONNECT:", "UNIX:")) for word in call.words[1:]
    ):
        # a local daemon's socket (docker.sock, D-Bus, a database): what is sent there acts with the daemon's rights
        return verdict(2, f"{call.program} talks to a local daemon's socket: what it sends cannot be classified")
    return verdict(1, f"{call.program} connects")


def listener(call: Call) -> Verdict:
    return verdict(2, f"{call.program} serves a network port to other hosts")


def _server(call: Call) -> Verdict:
    """Development servers bind the loopback unless told otherwise."""
    bind = call.value("--host", "-H", "--bind", "-b", "--address", "-a", "--listen") or ""
    if bind.startswith(("0.0.0.0", "::", "[::]", "*")) or (bind and not bind.startswith(("127.", "localhost", "::1"))):
        return verdict(2, f"{call.program} serves a network port to other hosts")
    return verdict(1, f"{call.program} serves on the loopback")


RULES: dict[str, Callable[[Call], Verdict]] = {
    "userdel": _userdel,
    "deluser": _userdel,
    "passwd": _passwd,
    "chage": _passwd,
    "iptables": _iptables,
    "ip6tables": _iptables,
    "iptables-legacy": _iptables,
    "iptables-nft": _iptables,
    "ebtables": _iptables,
    "nft": _nft,
    "ufw": _ufw,
    "firewall-cmd": _firewall_cmd,
    "ip": _ip,
    "nmcli": _nmcli,
    "sysctl": _setting,
    "date": _setting,
    "hostname": _setting,
    "hostnamectl": _setting,
    "timedatectl": _setting,
    "localectl": _setting,
    "resolvectl": _setting,
    "networkctl": _setting,
    "loginctl": _setting,
    "dmesg": _dmesg,
    "journalctl": _journalctl,
    "curl": curl_verdict,
    "wget": wget_verdict,
    "http": _httpie,
    "https": _httpie,
    "xh": _httpie,
    "nc": _netcat,
    "ncat": _netcat,
    "netcat": _netcat,
    "socat": _netcat,
    "ssh": ssh_verdict,
    "scp": scp_verdict,
    "sftp": scp_verdict,
    "flask": _server,
    "gunicorn": _server,
    "uvicorn": _server,
    "rails": _server,
    "hugo": _server,
    "jekyll": _server,
    "php": _server,
}


def connection_findings(subject: Subject) -> list[Finding]:
    """How an SSH call connects: host-key checking turned off, a listener open to other hosts."""
    findings = []
    if subject.unverified_host_key:
        findings.append(
            Finding("known_hosts=ignore " + " ".join(subject.hosts[:1]), 2, "host-key checking turned off (ignore)")
        )
    if subject.exposed_listener is not None:
        findings.append(Finding(f"bind_address {subject.exposed_listener}", 2, "a listener reachable from other hosts"))
    return findings
