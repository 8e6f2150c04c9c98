"""Where an SSH call goes: parse `host`, `user@host`, `user@host:port` and jump specs, resolve them through the
inventory and ssh_config into one connection identity, list every spelling of the target for policy, and describe
the resolved route to the rest of the server: its audit record (`target_record`) and its policy subject
(`host_subject`).

Policy sees the target in all its spellings: an IPv4 address written in decimal, hex, octal or shortened
form (`2130706433`, `0x7f000001`, `0177.0.0.1`, `127.1`) or as IPv4-mapped IPv6 reaches the same host as
its dotted quad, so a deny rule written for one spelling must match them all; the inventory alias and the
address it resolves to are both part of the text too.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from stat import S_ISREG
from typing import Any

from relay_shell.errors import ArgumentError
from relay_shell.plan import Subject
from relay_shell.ssh.connection_args import ConnectionArgs
from relay_shell.ssh.inventory.fields import KNOWN_HOSTS_MODES
from relay_shell.ssh.inventory.load import Inventory

DEFAULT_PORT = 22
MAX_JUMPS = 8
# POSIX names, plus `DOMAIN\\user` and `user@domain` (ssh splits user from host at the last '@')
_USER = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.\\-]|@(?!@)){0,62}(?<!@)")
# Host names, IPv4 in any inet_aton spelling, IPv6 (bracketed or not, with a zone id).
_HOST = re.compile(r"[A-Za-z0-9_.:%-]{1,253}")


@dataclass(frozen=True)
class HostSpec:
    user: str | None
    host: str
    port: int | None


@dataclass(frozen=True)
class Endpoint:
    """One hop: everything that decides which connection may be reused for it."""

    name: str  # what the caller or the inventory calls it
    address: str  # what is dialed
    port: int
    user: str
    key_path: str | None  # None: the agent and the default keys, as `ssh` would use them
    known_hosts_mode: str
    known_hosts_files: tuple[str, ...]
    # every name of this hop, for host-key matching: a key known under any of them is this host's key
    spellings: tuple[str, ...] = field(default=(), compare=False)
    proxy_command: str | None = None  # ssh_config's ProxyCommand: a local command that carries the stream

    def describe(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


@dataclass(frozen=True)
class Route:
    """The target and the jump hosts in front of it (first hop first)."""

    target: Endpoint
    jumps: tuple[Endpoint, ...]
    spellings: tuple[str, ...]  # every name of every hop, for policy


def parse_host_spec(argument: str, value: str) -> HostSpec:
    """`host`, `user@host`, `host:port`, `user@host:port`, `[v6]`, `user@[v6]:port`; a bare IPv6 address
    has no port."""
    text = value.strip()
    allowed = "allowed: host, user@host or user@host:port (IPv6 as [addr]:port), or an inventory alias"
    if not text:
        raise ArgumentError(f"{argument}: is empty; {allowed}")
    if any(char.isspace() for char in text) or text.startswith("-"):
        raise ArgumentError(f"{argument}: {value!r} is malformed (spaces or a leading '-'); {allowed}")
    user: str | None = None
    if "@" in text:
        user, _, text = text.rpartition("@")
        if not _USER.fullmatch(user):
            raise ArgumentError(f"{argument}: user {user!r} in {value!r} is not a valid user name; {allowed}")
    port_text: str | None = None
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ArgumentError(f"{argument}: {value!r} has '[' without ']'; {allowed}")
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ArgumentError(f"{argument}: {value!r} has text after ']'; {allowed}")
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host = text  # a name, or a bare IPv6 address
    if not host or not _HOST.fullmatch(host) or host.startswith("-"):
        raise ArgumentError(f"{argument}: host {host!r} in {value!r} is not a valid host name or address; {allowed}")
    if ":" not in host and _as_ip(host) is None:
        _check_labels(argument, host, value, allowed)
    port = None if port_text is None else parse_port(argument, port_text)
    return HostSpec(user=user, host=host, port=port)


def _check_labels(argument: str, host: str, value: str, allowed: str) -> None:
    """A host name no resolver can be asked for (a label over 63 characters, an empty label) is refused here,
    naming it, rather than failing later inside the resolver as something else."""
    for label in host.removesuffix(".").split("."):
        if not label or len(label) > 63:
            problem = "an empty label" if not label else f"a label of {len(label)} characters (at most 63)"
            raise ArgumentError(f"{argument}: host {host[:80]!r} in {value[:100]!r} has {problem}; {allowed}")


def parse_port(argument: str, value: str | int) -> int:
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ArgumentError(f"{argument}: port {value!r} is out of range; allowed: 1 to 65535")
    return int(text)


def host_spellings(host: str) -> list[str]:
    """The name as given and, for an address, its canonical forms; lowercased, without a trailing dot."""
    name = host.strip().strip("[]").lower().rstrip(".")
    spellings = [name]
    if name == "localhost":
        spellings += ["127.0.0.1", "::1"]
    address = _as_ip(name)
    if address is not None:
        if address.is_unspecified:  # 0, 0.0.0.0 and :: reach this machine too
            spellings += ["localhost", "127.0.0.1", "::1"]
        elif str(address) in ("127.0.0.1", "::1"):
            spellings.append("localhost")
        if isinstance(address, ipaddress.IPv6Address):
            spellings += [address.compressed, address.exploded]
            mapped = address.ipv4_mapped or _ipv4_compatible(address)
            if mapped is not None:
                spellings.append(str(mapped))
        else:
            spellings += [str(address), f"::ffff:{address}"]
    return list(dict.fromkeys(spellings))


def _as_ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    bare = name.split("%", 1)[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if ":" in bare or not re.fullmatch(r"[0-9a-fA-FxX.]+", bare):
        return None
    try:  # the resolver accepts what inet_aton accepts: decimal, hex, octal, shortened forms
        return ipaddress.IPv4Address(socket.inet_aton(bare))
    except OSError:
        return None


def _ipv4_compatible(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    # ::a.b.c.d (deprecated IPv4-compatible form), and NAT64's well-known prefix
    value = int(address)
    if value >> 32 == 0 and value > 1:
        return ipaddress.IPv4Address(value)
    if value >> 32 == 0x0064FF9B0000000000000000:
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    return None


def resolve_route(
    inventory: Inventory,
    host: str,
    *,
    user: str | None,
    port: int | None,
    key_path: str | None,
    known_hosts: str | None,
    jump: str | None,
    default_mode: str,
    argument: str = "host",
) -> Route:
    """The full identity of a call's target: explicit arguments, then the inventory file, then ssh_config,
    then the defaults (the local user, port 22, the agent and default keys) — as `ssh` would do it."""
    if port is not None:
        port = parse_port("port", port)
    if user is not None and not _USER.fullmatch(user):
        # What `user@host` may name, the `user` argument may too: anything else fails later as something else
        # (asyncssh refuses control characters as if the key were unusable).
        raise ArgumentError(
            f"user: {user[:80]!r} is not a valid user name; allowed: letters, digits, '_', '.', '-' (a "
            "'DOMAIN\\user' or 'user@domain' login too), at most 63 characters"
        )
    if known_hosts is not None and known_hosts not in KNOWN_HOSTS_MODES:
        raise ArgumentError(f"known_hosts: {known_hosts!r} is not a mode; allowed: {', '.join(KNOWN_HOSTS_MODES)}")
    if key_path is not None:
        key_path = _check_key(key_path, "key_path")
    spec = parse_host_spec(argument, host)
    target, jump_spec, spellings = _endpoint(
        inventory, spec, user, port if spec.port is None else spec.port, key_path, known_hosts, default_mode, argument
    )
    if jump is not None:
        jump_spec = jump if jump.strip().lower() != "none" else None
    jumps: list[Endpoint] = []
    pending = _split_jumps(jump_spec)
    while pending:
        hop_spec = parse_host_spec("jump", pending.pop())
        endpoint, own_jump, hop_spellings = _endpoint(
            inventory, hop_spec, None, hop_spec.port, None, known_hosts, default_mode, "jump"
        )
        if known_hosts is None and STRICTNESS[target.known_hosts_mode] > STRICTNESS[endpoint.known_hosts_mode]:
            # A jump host carries the target's traffic: it is checked at least as strictly as the target.
            endpoint = replace(endpoint, known_hosts_mode=target.known_hosts_mode)
        jumps.insert(0, endpoint)
        spellings += hop_spellings
        # The jump host's own ProxyJump (from the inventory or ssh_config) comes before it, as with `ssh -J`.
        pending += _split_jumps(own_jump)
        if len(jumps) + len(pending) > MAX_JUMPS:
            raise ArgumentError(
                f"jump: the chain to {host!r} has more than {MAX_JUMPS} hops (or loops through its own ProxyJump); "
                f"allowed: up to {MAX_JUMPS} jump hosts"
            )
    if jumps and target.proxy_command:
        target = replace(target, proxy_command=None)  # the jump hosts carry the stream instead
    return Route(target=target, jumps=tuple(jumps), spellings=tuple(dict.fromkeys(spellings)))


STRICTNESS = {"ignore": 0, "accept-new": 1, "strict": 2}


def _split_jumps(jump_spec: str | None) -> list[str]:
    if not jump_spec or jump_spec.strip().lower() == "none":
        return []
    hops = [hop.strip() for hop in jump_spec.split(",")]
    if len(hops) > MAX_JUMPS or not all(hops):
        raise ArgumentError(
            f"jump: {jump_spec!r} is malformed; allowed: up to {MAX_JUMPS} hosts separated by commas, "
            "each host, user@host or user@host:port"
        )
    return hops


def canonical_host(name: str) -> str:
    """The one spelling a host is dialed and recorded in known_hosts under: lowercase, no trailing dot, an IP
    address in its canonical form. Otherwise `LOCALHOST` or `127.1` would be a host known_hosts never saw."""
    spellings = host_spellings(name)
    address = _as_ip(spellings[0])
    if address is None:
        return spellings[0]
    zone = spellings[0].partition("%")[2]
    if zone.isdigit():  # `%1` and `%lo` are the same interface: one name for known_hosts
        with contextlib.suppress(OSError):
            zone = socket.if_indextoname(int(zone))
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address) + (f"%{zone}" if zone else "")


def _endpoint(
    inventory: Inventory,
    spec: HostSpec,
    user: str | None,
    port: int | None,
    key_path: str | None,
    known_hosts: str | None,
    default_mode: str,
    argument: str,
) -> tuple[Endpoint, str | None, list[str]]:
    # Names as written first, then lowercased, as `ssh` lowercases the host before matching ssh_config.
    entry = inventory.lookup(spec.host) or inventory.lookup(spec.host.lower())
    # ssh_config matches the name the connection is made to: the alias, or the inventory file's address.
    if entry is not None and entry.source != "ssh_config" and entry.hostname:
        config_name = entry.hostname
    else:
        config_name = entry.name if entry is not None else spec.host.lower()
    options = inventory.ssh_options(config_name)
    address = canonical_host((entry.hostname if entry and entry.hostname else None) or options.hostname or spec.host)
    chosen_user = spec.user or user or (entry.user if entry else None) or options.user or _local_user()
    chosen_port = port or (entry.port if entry else None) or options.port or DEFAULT_PORT
    chosen_key = key_path or (entry.key_path if entry else None) or (options.identity_files[:1] or (None,))[0]
    if chosen_key is not None and not key_path:
        chosen_key = _check_key(chosen_key, f"{argument} (key from the inventory for {spec.host!r})")
    mode = known_hosts or (entry.known_hosts if entry else None) or _config_mode(options.strict_host_key_checking)
    files = options.user_known_hosts_files or (str(Path("~/.ssh/known_hosts").expanduser()),)
    jump = (entry.jump if entry else None) or options.proxy_jump
    own_names = host_spellings(spec.host) + (host_spellings(address) if address != spec.host else [])
    names = own_names + [name for name in _aliases_of(inventory, address) if name not in own_names]
    endpoint = Endpoint(
        name=spec.host,
        address=address,
        port=chosen_port,
        user=chosen_user,
        key_path=chosen_key,
        known_hosts_mode=mode or default_mode,
        known_hosts_files=tuple(files),
        spellings=tuple(own_names),  # host keys match the host's own names, not other inventory aliases
        # As in OpenSSH, a ProxyJump (from the inventory or ssh_config) wins over a ProxyCommand.
        proxy_command=None if jump else options.proxy_command,
    )
    # A deny rule may name the login too (`root@db1`): pair this hop's user with every name of the hop.
    spellings = names + [f"{chosen_user}@{name}" for name in names]
    return endpoint, jump, spellings


_alias_cache: list[tuple[object, dict[str, list[str]]]] = []  # (the inventory's hosts, address -> names)


def _aliases_of(inventory: Inventory, address: str) -> list[str]:
    """Inventory names that lead to this address: a deny rule on an alias also holds for its address."""
    hosts = inventory.hosts()
    if not _alias_cache or _alias_cache[0][0] is not hosts:  # rebuilt when the inventory reloads
        by_address: dict[str, list[str]] = {}
        for entry in hosts.values():
            for spelling in host_spellings(entry.hostname or entry.name):
                by_address.setdefault(spelling, []).append(entry.name)
        _alias_cache[:] = [(hosts, by_address)]
    by_address = _alias_cache[0][1]
    names: list[str] = []
    for spelling in host_spellings(address):
        names += by_address.get(spelling, [])
    return list(dict.fromkeys(names))


def reached_spellings(inventory: Inventory, host: str) -> list[str]:
    """Every name of a host reached *through* an SSH connection (a port forward's destination): its own
    spellings, the address an inventory alias of that name leads to, and the aliases of its address. The SSH
    host resolves the name itself, so the inventory only widens what a deny rule can match, never narrows it."""
    names = host_spellings(host)
    entry = inventory.lookup(host) or inventory.lookup(host.lower())
    if entry is not None and entry.hostname:
        names += host_spellings(entry.hostname)
    names += _aliases_of(inventory, host)
    return list(dict.fromkeys(names))


def _config_mode(strict_host_key_checking: str | None) -> str | None:
    # ssh_config's StrictHostKeyChecking: `no` still never accepts a *changed* key here (ADR 0007).
    return {"yes": "strict", "ask": "strict", "accept-new": "accept-new", "no": "accept-new", "off": "accept-new"}.get(
        strict_host_key_checking or ""
    )


MAX_KEY_FILE = 64 * 1024  # an OpenSSH private key is a few KiB; anything larger is not one


def _check_key(path: str, argument: str) -> str:
    expanded = os.path.expanduser(path)
    allowed = f"allowed: a readable private key file (at most {MAX_KEY_FILE} bytes)"
    try:
        stat = os.stat(expanded)
    except OSError:
        raise ArgumentError(f"{argument}: key file {path!r} does not exist; {allowed}") from None
    except ValueError:  # a NUL byte (or text the OS cannot take): no file has that name
        raise ArgumentError(f"{argument}: {path[:200]!r} is not a file name (it holds a NUL byte); {allowed}") from None
    if not S_ISREG(stat.st_mode):
        raise ArgumentError(f"{argument}: {path!r} is not a regular file; {allowed}")
    if stat.st_size > MAX_KEY_FILE:
        raise ArgumentError(f"{argument}: {path!r} is {stat.st_size} bytes, too large for a key; {allowed}")
    if not os.access(expanded, os.R_OK):
        raise ArgumentError(f"{argument}: key file {path!r} is not readable; {allowed}")
    return expanded


_fingerprints: dict[tuple[str, int, int], str] = {}


def key_fingerprint(path: str) -> str:
    """SHA-256 fingerprint of a client key (from its .pub file when there is one: no passphrase needed)."""
    import asyncssh

    try:
        stat = os.stat(path)
    except OSError:
        return f"unreadable key {path}"
    cache_key = (path, stat.st_mtime_ns, stat.st_size)
    cached = _fingerprints.get(cache_key)
    if cached is not None:
        return cached
    try:
        if os.path.isfile(path + ".pub"):
            fingerprint = asyncssh.read_public_key(path + ".pub").get_fingerprint("sha256")
        else:
            fingerprint = asyncssh.read_private_key(path).get_fingerprint("sha256")
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError, OSError, ValueError) as exc:
        fingerprint = f"unknown ({type(exc).__name__}) {path}"
    _fingerprints[cache_key] = fingerprint
    return fingerprint


def _local_user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return os.environ.get("USER", "root")


def target_record(route: Route, fingerprints: dict[str, str] | None = None) -> dict[str, Any]:
    """The SSH identity for the audit record: where, as whom, with which key, through which hops, how trusted.
    `fingerprints`: key fingerprints already read in this call, by path (a call naming many hosts)."""
    target = route.target
    key = "default (agent and ~/.ssh keys)"
    if target.key_path:
        fingerprints = {} if fingerprints is None else fingerprints
        if target.key_path not in fingerprints:
            fingerprints[target.key_path] = key_fingerprint(target.key_path)
        key = fingerprints[target.key_path]
    record: dict[str, Any] = {
        "host": target.name,
        "address": target.address,
        "port": target.port,
        "user": target.user,
        "key": key,
        "host_key_mode": target.known_hosts_mode,
    }
    if route.jumps:
        record["jump"] = [hop.describe() for hop in route.jumps]
    # ssh_config's ProxyCommand runs a local command: the record names it, for the target or the first hop.
    proxy_commands = [hop.proxy_command for hop in (*route.jumps, target) if hop.proxy_command]
    if proxy_commands:
        record["proxy_command"] = proxy_commands[0]
    return record


def host_subject(route: Route, connection: ConnectionArgs, **texts: Any) -> Subject:
    return Subject(
        hosts=route.spellings,
        unverified_host_key=connection.known_hosts == "ignore",
        **texts,
    )
