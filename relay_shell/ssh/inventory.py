"""Where SSH hosts are and how to reach them.

Two sources, merged: the OpenSSH client config (read only through asyncssh's own parser, so Include and Match
behave exactly as they will when asyncssh connects) and an optional inventory file — our own JSON/YAML format or
an Ansible inventory (YAML or INI). Both are re-read when any loaded file changes. Load problems never raise:
they are collected for `problems()` and the other source still loads.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import ipaddress
import json
import os
import re
import shlex
import string
import threading
import time
import types
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import asyncssh.config as asyncssh_config
import yaml  # type: ignore[import-untyped]  # no stubs installed (types-PyYAML)
from asyncssh.config import ConfigParseError, SSHClientConfig, SSHConfig

KNOWN_HOSTS_MODES = ("strict", "accept-new", "ignore")

MAX_INVENTORY_BYTES = 8 * 1024 * 1024
MAX_HOSTS = 10_000
MAX_GROUPS = 10_000
MAX_PROBLEMS = 100
# OpenSSH's own limit (READCONF_MAX_DEPTH); asyncssh has none, so an Include loop would recurse until it crashed.
MAX_INCLUDE_DEPTH = 16
# Callers look hosts up several times per tool call; one round of stats per interval is plenty.
RECHECK_INTERVAL_SECONDS = 0.5
MAX_CACHED_OPTIONS = 4096

OWN_FORMAT_KEYS = frozenset({"hosts", "groups"})
OWN_HOST_FIELDS = ("hostname", "port", "user", "key_path", "jump", "known_hosts", "groups")
ANSIBLE_GROUP_KEYS = ("hosts", "vars", "children")

# ssh_config's StrictHostKeyChecking -> our modes. `no`/`off` deliberately become accept-new, not ignore: a config
# line written for interactive convenience must not silently accept a *changed* host key here. `ignore` has to be
# asked for explicitly (inventory file or tool argument).
STRICT_HOST_KEY_CHECKING_MODES = {
    "yes": "strict",
    "ask": "strict",
    "accept-new": "accept-new",
    "no": "accept-new",
    "off": "accept-new",
}

_SignatureMap = dict[Path, "tuple[int, int, int] | None"]


@dataclass(frozen=True)
class InventoryHost:
    name: str  # the alias the operator wrote
    hostname: str | None  # where to connect; None = the name itself
    port: int | None
    user: str | None
    key_path: str | None  # ~ expanded
    jump: str | None  # OpenSSH -J / ProxyJump syntax: "user@host:port,host2"
    known_hosts: str | None  # one of KNOWN_HOSTS_MODES, or None
    groups: tuple[str, ...]  # sorted group names the host belongs to (not including "all")
    source: str  # "ssh_config" or the inventory file path


@dataclass(frozen=True)
class SshConfigOptions:
    """What ssh_config says for one host name (after Include/Match); None or empty when not set."""

    hostname: str | None
    port: int | None
    user: str | None
    identity_files: tuple[str, ...]
    proxy_jump: str | None
    user_known_hosts_files: tuple[str, ...]
    strict_host_key_checking: str | None  # raw value lowercased: yes/no/accept-new/ask/off
    proxy_command: str | None = None  # %-tokens expanded; None when unset or "none"


EMPTY_SSH_OPTIONS = SshConfigOptions(
    hostname=None,
    port=None,
    user=None,
    identity_files=(),
    proxy_jump=None,
    user_known_hosts_files=(),
    strict_host_key_checking=None,
)


class InventoryError(Exception):
    """A lookup that cannot be answered, e.g. an unknown group; the message says what exists instead."""


class _EntryError(ValueError):
    """One bad entry (host, group, field or line); the caller adds file and position and keeps loading."""


def _note(problems: list[str], message: str) -> None:
    """Record a load problem: each distinct message once, and a bounded number of them."""
    if message in problems or len(problems) > MAX_PROBLEMS:
        return
    if len(problems) == MAX_PROBLEMS:
        problems.append(f"more problems were found; only the first {MAX_PROBLEMS} are shown")
        return
    problems.append(message)


# --------------------------------------------------------------------------------------------------------------
# ssh_config, through asyncssh's parser


class _ClientConfig(SSHClientConfig):
    """asyncssh's client config parser, plus the StrictHostKeyChecking option asyncssh itself does not read."""

    # asyncssh's extension point is these plain class attributes (the base declares them without ClassVar).
    _handlers = {  # noqa: RUF012
        **SSHClientConfig._handlers,
        "stricthostkeychecking": ("StrictHostKeyChecking", SSHConfig._set_string),
    }
    # OpenSSH expands %-tokens in UserKnownHostsFile too; asyncssh only does it for the options in this set.
    _percent_expand = {*SSHClientConfig._percent_expand, "UserKnownHostsFile"}  # noqa: RUF012

    # user and port are Any because asyncssh passes its () sentinel for "not given".
    def __init__(
        self,
        last_config: SSHConfig | None,
        reload: bool,
        canonical: bool,
        final: bool,
        local_user: str,
        user: Any,
        host: str,
        port: Any,
    ) -> None:
        super().__init__(last_config, reload, canonical, final, local_user, user, host, port)  # type: ignore[arg-type]
        self.parsed_files: list[Path] = []
        self._include_depth = 0

    def parse(self, path: Path) -> None:
        # asyncssh calls parse() for the main file and for every file an Include pulls in.
        if self._include_depth >= MAX_INCLUDE_DEPTH:
            raise ConfigParseError(f"{path}: Include nested more than {MAX_INCLUDE_DEPTH} levels deep")
        self.parsed_files.append(path)
        self._include_depth += 1
        try:
            super().parse(path)
        finally:
            self._include_depth -= 1


def _include_watch_dir(pattern: str, default_dir: Path) -> Path:
    """The directory whose listing decides what an Include pattern matches (a new file there changes it).
    Relative patterns are relative to ~/.ssh, as asyncssh (and OpenSSH) read them."""
    path = Path(pattern).expanduser()
    if path.anchor:
        base, parts = Path(path.anchor), path.parts[1:]
    else:
        base, parts = default_dir, path.parts
    for part in parts[:-1]:
        if any(char in part for char in "*?["):
            break
        base = base / part
    return base


class _HostListingConfig(_ClientConfig):
    """One pass over every Host block and every Include, recording the concrete host names. It evaluates no
    condition: every block is entered (so Includes inside Host blocks are followed too) and `Match exec`
    commands never run just to list hosts."""

    def __init__(self, *args: Any) -> None:  # the same arguments as _ClientConfig (asyncssh's load passes them)
        super().__init__(*args)
        self.host_names: list[str] = []
        self.watched_dirs: list[Path] = []

    def _list_host_names(self, option: str, args: list[str]) -> None:
        for arg in args:
            # asyncssh joins a Host line's words with commas before matching, so a comma separates names too.
            for name in arg.split(","):
                if name and not any(char in name for char in "*?!"):
                    self.host_names.append(name)
        args.clear()
        self._matching = True

    def _enter_match(self, option: str, args: list[str]) -> None:
        args.clear()
        self._matching = True

    def _include_and_watch(self, option: str, args: list[str]) -> None:
        self.watched_dirs += [_include_watch_dir(pattern, self._default_path) for pattern in args]
        SSHConfig._include(self, option, args)

    _handlers = {  # noqa: RUF012
        **_ClientConfig._handlers,
        "host": ("Host", _list_host_names),
        "match": ("Match", _enter_match),
        "include": ("Include", _include_and_watch),
    }


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name in the environment or the password database
        return ""


def _string_option(config: SSHConfig, option: str) -> str | None:
    value = config.get(option)
    return value if isinstance(value, str) else None


def _list_option(config: SSHConfig, option: str) -> list[str]:
    value = config.get(option)
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


@functools.lru_cache(maxsize=65536)
def _split_line(line: str) -> tuple[str, ...]:
    return tuple(shlex.split(line))


@contextlib.contextmanager
def _cached_line_splitting() -> Iterator[None]:
    """asyncssh's parser shlex-splits every line it reads, and listing N hosts evaluates the file N times:
    with the splits remembered, a 300-host ssh_config lists in a third of the time (same tokens, same
    handlers; asyncssh's own parser still decides everything)."""
    original = asyncssh_config.shlex
    asyncssh_config.shlex = _CACHED_SHLEX  # type: ignore[assignment]
    try:
        yield
    finally:
        asyncssh_config.shlex = original


_CACHED_SHLEX = types.SimpleNamespace(split=_split_line)


def read_ssh_options(config_path: Path, host: str, user: str | None, port: int | None) -> SshConfigOptions:
    """ssh_config's options for one host, as asyncssh would apply them when connecting. Raises what asyncssh
    raises for a broken file (ConfigParseError, OSError, ...)."""
    local_user = _local_user()
    given_user: object = () if user is None else user  # asyncssh's "not given" sentinel is ()
    given_port: object = () if port is None else port
    with _cached_line_splitting():
        config = _ClientConfig.load(None, [config_path], False, False, False, local_user, given_user, host, given_port)
        if config.has_match_final():
            # What asyncssh does when connecting: a second pass in which `Match final` blocks apply.
            config = _ClientConfig.load(
                config, [config_path], True, False, True, local_user, given_user, host, given_port
            )
    port_value = config.get("Port")
    proxy_jump = _string_option(config, "ProxyJump")
    proxy_command = _string_option(config, "ProxyCommand")
    strict = _string_option(config, "StrictHostKeyChecking")
    return SshConfigOptions(
        hostname=_string_option(config, "Hostname"),
        port=port_value if isinstance(port_value, int) and not isinstance(port_value, bool) else None,
        user=_string_option(config, "User"),
        # asyncssh expands %-tokens; ~ is left for the key loader, so expand it here.
        identity_files=tuple(os.path.expanduser(path) for path in _list_option(config, "IdentityFile")),
        proxy_jump=None if proxy_jump is None or proxy_jump.lower() == "none" else proxy_jump,
        user_known_hosts_files=tuple(os.path.expanduser(path) for path in _list_option(config, "UserKnownHostsFile")),
        strict_host_key_checking=strict.lower() if strict else None,
        proxy_command=None if proxy_command is None or proxy_command.lower() == "none" else proxy_command,
    )


@dataclass
class _SshConfigLoad:
    hosts: dict[str, InventoryHost] = field(default_factory=dict)
    parsed_files: list[Path] = field(default_factory=list)
    watched_dirs: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _load_ssh_config_hosts(config_path: Path) -> _SshConfigLoad:
    loaded = _SshConfigLoad()
    listing = _HostListingConfig(None, False, False, False, _local_user(), (), "", ())
    try:
        listing.parse(config_path)
    # asyncssh raises several types for a broken file (ConfigParseError, OSError, UnicodeDecodeError, ...);
    # each is a problem with the file, never a crash of the server.
    except Exception as exc:
        _note(loaded.problems, f"ssh_config: {exc}")
    # Kept even after a failure, so fixing the broken file (or an included one) triggers a reload.
    loaded.parsed_files = list(dict.fromkeys(listing.parsed_files))
    loaded.watched_dirs = list(dict.fromkeys(listing.watched_dirs))
    if loaded.problems:
        return loaded

    names = list(dict.fromkeys(listing.host_names))
    if len(names) > MAX_HOSTS:
        _note(loaded.problems, f"ssh_config: {len(names)} hosts; only the first {MAX_HOSTS} are used")
        names = names[:MAX_HOSTS]
    for name in names:
        try:
            options = read_ssh_options(config_path, name, None, None)
        except Exception as exc:  # as above: a problem with the file
            _note(loaded.problems, f"ssh_config: host {name!r}: {exc}")
            continue
        known_hosts = STRICT_HOST_KEY_CHECKING_MODES.get(options.strict_host_key_checking or "")
        if options.strict_host_key_checking and known_hosts is None:
            _note(
                loaded.problems,
                f"ssh_config: host {name!r}: StrictHostKeyChecking {options.strict_host_key_checking!r} is not "
                "one of yes, ask, accept-new, no, off; ignored",
            )
        loaded.hosts[name] = InventoryHost(
            name=name,
            hostname=options.hostname,
            port=options.port,
            user=options.user,
            key_path=options.identity_files[0] if options.identity_files else None,
            jump=options.proxy_jump,
            known_hosts=known_hosts,
            groups=(),
            source="ssh_config",
        )
    return loaded


# --------------------------------------------------------------------------------------------------------------
# Field validation shared by our format and Ansible's


def _check_name(kind: str, value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # YAML reads a key like `101:` as a number
    if not isinstance(value, str) or not value or any(char.isspace() for char in value):
        raise _EntryError(f"{kind} name {value!r} must be a non-empty string without whitespace")
    return value


def _check_text(label: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _EntryError(f"{label} must be a non-empty string, got {value!r}")
    if "{{" in value:
        raise _EntryError(f"{label} {value!r} is a template; templated values are not supported")
    return value


def _check_word(label: str, value: object) -> str:
    text = _check_text(label, value)
    if any(char.isspace() for char in text):
        raise _EntryError(f"{label} {text!r} must not contain whitespace")
    return text


def _check_port(label: str, value: object) -> int:
    number = value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}", value.strip()):
        number = int(value)  # INI values are text
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 65535:
        raise _EntryError(f"{label} must be an integer 1..65535, got {value!r}")
    return number


def _check_known_hosts(label: str, value: object) -> str:
    if value not in KNOWN_HOSTS_MODES:
        raise _EntryError(f"{label} must be one of {', '.join(KNOWN_HOSTS_MODES)}, got {value!r}")
    return str(value)


def _check_jump(label: str, value: object) -> str | None:
    jump = _check_word(label, value)
    return None if jump.lower() == "none" else jump


def _check_key_path(label: str, value: object) -> str:
    return os.path.expanduser(_check_text(label, value))


# --------------------------------------------------------------------------------------------------------------
# Inventory files


@dataclass
class _ParsedInventory:
    path: Path
    hosts: dict[str, InventoryHost] = field(default_factory=dict)  # entries the file defines
    memberships: dict[str, set[str]] = field(default_factory=dict)  # group -> host names, without "all"
    rejected: set[str] = field(default_factory=set)  # host names whose entry was bad: kept out of groups too
    problems: list[str] = field(default_factory=list)


def _read_inventory_text(path: Path, parsed: _ParsedInventory) -> str | None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        _note(parsed.problems, f"inventory file {path} does not exist")
        return None
    except OSError as exc:
        _note(parsed.problems, f"inventory file {path} cannot be read: {exc.strerror}")
        return None
    if size > MAX_INVENTORY_BYTES:
        _note(parsed.problems, f"inventory file {path} is {size} bytes; at most {MAX_INVENTORY_BYTES} are read")
        return None
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_INVENTORY_BYTES + 1)  # bounded even if the file grew since the stat
    except OSError as exc:
        _note(parsed.problems, f"inventory file {path} cannot be read: {exc.strerror}")
        return None
    if len(raw) > MAX_INVENTORY_BYTES:
        _note(parsed.problems, f"inventory file {path} is over {MAX_INVENTORY_BYTES} bytes; not read")
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        _note(parsed.problems, f"inventory file {path} is not UTF-8 text (bad byte at offset {exc.start})")
        return None


def _inventory_kind(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "yaml"
    stripped = text.lstrip()
    if suffix == ".json" or stripped.startswith("{"):
        return "json"
    if stripped.startswith("---"):  # an extension-less YAML file announces itself
        return "yaml"
    return "ini"  # .ini, .cfg, no extension: Ansible's INI format


def _parse_inventory_file(path: Path) -> _ParsedInventory:
    parsed = _ParsedInventory(path)
    text = _read_inventory_text(path, parsed)
    if text is None:
        return parsed
    kind = _inventory_kind(path, text)
    if kind == "ini":
        return _resolve_ansible(_ansible_tree_from_ini(text, path))

    data: object
    try:
        data = json.loads(text) if kind == "json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        _note(parsed.problems, f"{path} line {exc.lineno}: invalid JSON: {exc.msg}")
        return parsed
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path} line {mark.line + 1}" if mark is not None else str(path)
        _note(parsed.problems, f"{where}: invalid YAML: {getattr(exc, 'problem', None) or exc}")
        return parsed
    except RecursionError:
        _note(parsed.problems, f"{path}: nested too deeply to read")
        return parsed

    if data is None:  # an empty YAML file is an empty inventory
        return parsed
    if not isinstance(data, dict):
        _note(parsed.problems, f"{path}: the top level must be a mapping, got {type(data).__name__}")
        return parsed
    if set(data) <= OWN_FORMAT_KEYS:
        return _parse_own_format(data, path)
    try:
        return _resolve_ansible(_ansible_tree_from_data(data, path))
    except RecursionError:  # children nested (or aliased) deeper than Python's stack
        _note(parsed.problems, f"{path}: groups nested too deeply to read")
        return parsed


# Our own format ------------------------------------------------------------------------------------------------


def _own_host(name: str, entry: dict[Any, Any], source: str) -> tuple[InventoryHost, list[str]]:
    unknown = [key for key in entry if key not in OWN_HOST_FIELDS]
    if unknown:
        raise _EntryError(f"unknown field {unknown[0]!r}; allowed: {', '.join(OWN_HOST_FIELDS)}")
    groups_value = entry.get("groups")
    if groups_value is None:
        groups_value = []
    if not isinstance(groups_value, list):
        raise _EntryError(f"groups must be a list of group names, got {groups_value!r}")
    groups = [_check_name("group", group) for group in groups_value]
    if "all" in groups:
        raise _EntryError("groups: 'all' is implicit and cannot be listed")

    def optional(check: Any, key: str) -> Any:
        value = entry.get(key)
        return None if value is None else check(key, value)

    host = InventoryHost(
        name=name,
        hostname=optional(_check_word, "hostname"),
        port=optional(_check_port, "port"),
        user=optional(_check_word, "user"),
        key_path=optional(_check_key_path, "key_path"),
        jump=optional(_check_jump, "jump"),
        known_hosts=optional(_check_known_hosts, "known_hosts"),
        groups=(),
        source=source,
    )
    return host, groups


def _parse_own_format(data: dict[Any, Any], path: Path) -> _ParsedInventory:
    parsed = _ParsedInventory(path)
    hosts = data.get("hosts")
    if hosts is None:
        hosts = {}
    if not isinstance(hosts, dict):
        _note(parsed.problems, f"{path}: 'hosts' must be a mapping of host name to settings")
        hosts = {}
    for raw_name, entry in hosts.items():
        if len(parsed.hosts) >= MAX_HOSTS:
            _note(parsed.problems, f"{path}: more than {MAX_HOSTS} hosts; the rest are ignored")
            break
        try:
            name = _check_name("host", raw_name)
        except _EntryError as exc:
            _note(parsed.problems, f"{path}: {exc}")
            continue
        try:
            if entry is None:
                entry = {}
            if not isinstance(entry, dict):
                raise _EntryError(f"must be a mapping of settings or null, got {type(entry).__name__}")
            host, groups = _own_host(name, entry, str(path))
        except _EntryError as exc:
            _note(parsed.problems, f"{path}: host {name!r}: {exc}")
            parsed.rejected.add(name)
            continue
        parsed.hosts[name] = host
        for group in groups:
            parsed.memberships.setdefault(group, set()).add(name)

    groups_data = data.get("groups")
    if groups_data is None:
        groups_data = {}
    if not isinstance(groups_data, dict):
        _note(parsed.problems, f"{path}: 'groups' must be a mapping of group name to a list of hosts")
        groups_data = {}
    for raw_group, members in groups_data.items():
        try:
            group = _check_name("group", raw_group)
            if group == "all":
                raise _EntryError("group 'all' is implicit (every host) and cannot be defined")
            if members is None:
                members = []
            if not isinstance(members, list):
                raise _EntryError(f"group {group!r} must be a list of host names")
        except _EntryError as exc:
            _note(parsed.problems, f"{path}: {exc}")
            continue
        if group not in parsed.memberships and len(parsed.memberships) >= MAX_GROUPS:
            _note(parsed.problems, f"{path}: more than {MAX_GROUPS} groups; the rest are ignored")
            break
        member_names = parsed.memberships.setdefault(group, set())
        for member in members:
            try:
                member_names.add(_check_name("host", member))
            except _EntryError as exc:
                _note(parsed.problems, f"{path}: group {group!r}: {exc}")
    return parsed


# Ansible inventories --------------------------------------------------------------------------------------------


@dataclass
class _AnsibleGroup:
    hosts: set[str] = field(default_factory=set)  # direct members
    children: set[str] = field(default_factory=set)
    variables: dict[str, object] = field(default_factory=dict)


@dataclass
class _AnsibleTree:
    """An Ansible inventory as written, before membership and variables are resolved."""

    path: Path
    groups: dict[str, _AnsibleGroup] = field(default_factory=dict)
    host_vars: dict[str, dict[str, object]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _new_ansible_tree(path: Path) -> _AnsibleTree:
    tree = _AnsibleTree(path)
    # Every Ansible inventory has these two groups, even when the file never names them.
    tree.groups["all"] = _AnsibleGroup()
    tree.groups["ungrouped"] = _AnsibleGroup()
    return tree


def _ansible_group(tree: _AnsibleTree, name: str) -> _AnsibleGroup | None:
    group = tree.groups.get(name)
    if group is None:
        if len(tree.groups) >= MAX_GROUPS:
            _note(tree.problems, f"{tree.path}: more than {MAX_GROUPS} groups; the rest are ignored")
            return None
        group = tree.groups[name] = _AnsibleGroup()
    return group


def _ansible_add_host(tree: _AnsibleTree, group: _AnsibleGroup, name: str, variables: dict[str, object]) -> None:
    host_vars = tree.host_vars.get(name)
    if host_vars is None:
        if len(tree.host_vars) >= MAX_HOSTS:
            _note(tree.problems, f"{tree.path}: more than {MAX_HOSTS} hosts; the rest are ignored")
            return
        host_vars = tree.host_vars[name] = {}
    host_vars.update(variables)  # a host listed twice keeps the later value, as in Ansible
    group.hosts.add(name)


def _outside_bracket_colons(text: str) -> list[int]:
    positions: list[int] = []
    depth = 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        elif char == ":" and depth == 0:
            positions.append(index)
    return positions


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _range_values(spec: str, limit: int) -> list[str]:
    """The values of one Ansible host range: `01:03` -> 01 02 03, `a:c` -> a b c, `0:8:4` -> 0 4 8."""
    bounds = spec.split(":")
    if len(bounds) not in (2, 3):
        raise _EntryError(f"range [{spec}] must be [begin:end] or [begin:end:step]")
    begin, end = bounds[0] or "0", bounds[1]
    step_text = bounds[2] if len(bounds) == 3 else "1"
    if not re.fullmatch(r"[0-9]{1,6}", step_text) or int(step_text) < 1:
        raise _EntryError(f"range [{spec}]: step must be a positive integer")
    step = int(step_text)
    if len(begin) == 1 and len(end) == 1 and begin in string.ascii_letters and end in string.ascii_letters:
        first, last = string.ascii_letters.index(begin), string.ascii_letters.index(end)
        if first > last:
            raise _EntryError(f"range [{spec}]: begin comes after end")
        return list(string.ascii_letters[first : last + 1 : step])
    if not (re.fullmatch(r"[0-9]{1,9}", begin) and re.fullmatch(r"[0-9]{1,9}", end)):
        raise _EntryError(f"range [{spec}] must be numbers (01:20) or single letters (a:f)")
    numbers = range(int(begin), int(end) + 1, step)
    if not numbers:
        raise _EntryError(f"range [{spec}]: begin comes after end")
    if len(numbers) > limit:
        raise _EntryError(f"range [{spec}] makes {len(numbers)} hosts; at most {limit} are allowed")
    # A leading zero asks for fixed-width names (web01..web10), as in Ansible.
    width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
    if width and len(end) != width:
        raise _EntryError(f"range [{spec}]: zero-padded begin and end must have the same number of digits")
    return [str(number).zfill(width) for number in numbers]


_HOST_RANGE = re.compile(r"\[([^\[\]]*:[^\[\]]*)\]")


def _expand_host_pattern(pattern: str) -> tuple[list[str], int | None]:
    """An Ansible host pattern -> (host names, port): `web[01:03].example.com:2222`, `db-[a:c]`, `[::1]:22`."""
    if pattern.startswith("["):
        inner, _, rest = pattern[1:].partition("]")
        if _is_ipv6(inner) and re.fullmatch(r"(:[0-9]{1,5})?", rest):
            return [inner], _check_port("port", rest[1:]) if rest else None
    colons = _outside_bracket_colons(pattern)
    if len(colons) > 1:  # a bare IPv6 address: no port, no ranges
        return [pattern], None
    port = None
    if colons:
        pattern, port_text = pattern[: colons[0]], pattern[colons[0] + 1 :]
        port = _check_port("port", port_text)
    names = [""]
    rest = pattern
    while (found := _HOST_RANGE.search(rest)) is not None:
        values = _range_values(found.group(1), MAX_HOSTS)
        if len(names) * len(values) > MAX_HOSTS:
            raise _EntryError(f"host pattern {pattern!r} makes more than {MAX_HOSTS} hosts")
        names = [name + rest[: found.start()] + value for name in names for value in values]
        rest = rest[found.end() :]
    return [name + rest for name in names], port


def _add_pattern_hosts(
    tree: _AnsibleTree, group_name: str, pattern: str, variables: dict[str, object], where: str
) -> None:
    group = tree.groups[group_name]
    try:
        names, port = _expand_host_pattern(pattern)
        checked = [_check_name("host", name) for name in names]
    except _EntryError as exc:
        _note(tree.problems, f"{where}: host {pattern!r}: {exc}")
        return
    # The port in `host:port` is a host variable; an explicit ansible_port on the same line wins over it.
    host_vars: dict[str, object] = {} if port is None else {"ansible_port": port}
    host_vars.update(variables)
    for name in checked:
        _ansible_add_host(tree, group, name, host_vars)


def _ansible_tree_from_data(data: dict[Any, Any], path: Path) -> _AnsibleTree:
    """Ansible's YAML (or JSON) inventory: top-level groups, each with hosts / vars / children."""
    tree = _new_ansible_tree(path)
    visited: set[tuple[str, int]] = set()
    for raw_name, group_data in data.items():
        _read_yaml_group(tree, raw_name, group_data, visited)
    return tree


def _read_yaml_group(
    tree: _AnsibleTree, raw_name: object, group_data: object, visited: set[tuple[str, int]]
) -> str | None:
    path = tree.path
    try:
        name = _check_name("group", raw_name)
    except _EntryError as exc:
        _note(tree.problems, f"{path}: {exc}")
        return None
    group = _ansible_group(tree, name)
    if group is None or group_data is None:
        return None if group is None else name
    if not isinstance(group_data, dict):
        _note(tree.problems, f"{path}: group {name!r}: must be a mapping with hosts, vars or children")
        return name
    # YAML anchors can make one mapping appear many times (even inside itself); read each one once per group.
    if (name, id(group_data)) in visited:
        return name
    visited.add((name, id(group_data)))

    for key in group_data:
        if key not in ANSIBLE_GROUP_KEYS:
            _note(tree.problems, f"{path}: group {name!r}: unexpected key {key!r}; allowed: hosts, vars, children")
    variables = group_data.get("vars")
    if isinstance(variables, dict):
        group.variables.update({str(key): value for key, value in variables.items()})
    elif variables is not None:
        _note(tree.problems, f"{path}: group {name!r}: vars must be a mapping")

    hosts = group_data.get("hosts")
    if isinstance(hosts, dict):
        for pattern, host_vars in hosts.items():
            if isinstance(pattern, int) and not isinstance(pattern, bool):
                pattern = str(pattern)
            if not isinstance(pattern, str) or not (host_vars is None or isinstance(host_vars, dict)):
                _note(tree.problems, f"{path}: group {name!r}: host {pattern!r}: vars must be a mapping or empty")
                continue
            variables_of_host = {str(key): value for key, value in (host_vars or {}).items()}
            _add_pattern_hosts(tree, name, pattern, variables_of_host, f"{path}: group {name!r}")
    elif hosts is not None:
        _note(tree.problems, f"{path}: group {name!r}: hosts must be a mapping of host name to variables")

    children = group_data.get("children")
    if isinstance(children, dict):
        for child_name, child_data in children.items():
            child = _read_yaml_group(tree, child_name, child_data, visited)
            if child is not None:
                group.children.add(child)
    elif children is not None:
        _note(tree.problems, f"{path}: group {name!r}: children must be a mapping of group name to group")
    return name


# `[name]`, `[name:vars]`, `[name:children]`, optionally followed by a comment (Ansible's own pattern).
_INI_SECTION = re.compile(r"\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[#;].*)?")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _ansible_tree_from_ini(text: str, path: Path) -> _AnsibleTree:
    tree = _new_ansible_tree(path)
    group_name, section_kind = "ungrouped", "hosts"  # host lines before any section are ungrouped
    for line_number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line[0] in "#;":
            continue
        where = f"{path} line {line_number}"
        section = _INI_SECTION.fullmatch(line)
        if section is not None:
            group_name, section_kind = section.group(1), section.group(2) or "hosts"
            if section_kind not in ("hosts", "vars", "children"):
                _note(
                    tree.problems,
                    f"{where}: section [{group_name}:{section_kind}] has an unknown type; "
                    "allowed: [group], [group:vars], [group:children]",
                )
                section_kind = "skip"
            elif _ansible_group(tree, group_name) is None:
                section_kind = "skip"
            continue
        if line.startswith("[") and line.endswith("]"):
            _note(
                tree.problems,
                f"{where}: invalid section header {line!r}; allowed: [group], [group:vars], "
                "[group:children] with no spaces",
            )
            section_kind = "skip"
            continue
        if section_kind == "skip":
            continue
        try:
            if section_kind == "hosts":
                _read_ini_host_line(tree, group_name, line, where)
            elif section_kind == "vars":
                key, separator, value = line.partition("=")
                key = key.strip()
                if not separator or not key or any(char.isspace() for char in key):
                    raise _EntryError(f"expected key=value, got {line!r}")
                tree.groups[group_name].variables[key] = _unquote(value.strip())
            else:
                child_name = _check_name("group", shlex.split(line, comments=True)[0])
                if child_name != group_name and _ansible_group(tree, child_name) is not None:
                    tree.groups[group_name].children.add(child_name)
        except (_EntryError, ValueError, IndexError) as exc:  # ValueError: shlex's unclosed quote
            _note(tree.problems, f"{where}: {exc}")
    return tree


def _read_ini_host_line(tree: _AnsibleTree, group_name: str, line: str, where: str) -> None:
    # Ansible splits a host line shell-style: the host pattern, then key=value variables (quotes allowed).
    tokens = shlex.split(line, comments=True)
    if not tokens:
        return
    variables: dict[str, object] = {}
    for token in tokens[1:]:
        key, separator, value = token.partition("=")
        if not separator or not key:
            raise _EntryError(f"expected key=value host variables after the host, got {token!r}")
        variables[key] = value
    _add_pattern_hosts(tree, group_name, tokens[0], variables, where)


def _topological_order(parents: dict[str, set[str]]) -> list[str]:
    """Groups ordered parents-first (Kahn's algorithm); groups caught in a cycle are missing from the result."""
    children_of: dict[str, list[str]] = {name: [] for name in parents}
    waiting = {name: len(group_parents) for name, group_parents in parents.items()}
    for name, group_parents in parents.items():
        for parent in group_parents:
            children_of[parent].append(name)
    ready = deque(sorted(name for name, count in waiting.items() if count == 0))
    order: list[str] = []
    while ready:
        name = ready.popleft()
        order.append(name)
        for child in children_of[name]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    return order


def _jump_from_ssh_args(label: str, args: object) -> str | None:
    """`-J hop` / `-Jhop` / `-o ProxyJump=hop` / `-o 'ProxyJump hop'` in ansible_ssh_*_args."""
    if not isinstance(args, str):
        raise _EntryError(f"{label} must be a string, got {args!r}")
    try:
        tokens = shlex.split(args)
    except ValueError as exc:
        raise _EntryError(f"{label}: {exc}") from None
    for index, token in enumerate(tokens):
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if token == "-J" and following is not None:
            return _check_jump(label, following)
        if token.startswith("-J") and len(token) > 2:
            return _check_jump(label, token[2:])
        option = following if token == "-o" else token[2:] if token.startswith("-o") else None
        if option is None:
            continue
        key, separator, value = option.partition("=")
        if not separator:
            key, _, value = option.strip().partition(" ")
        if key.strip().lower() == "proxyjump" and value.strip():
            return _check_jump(label, value.strip())
    return None


def _host_from_ansible_vars(name: str, variables: dict[str, object], source: str) -> InventoryHost:
    def first(*names: str) -> tuple[str, object]:
        for var in names:
            if variables.get(var) is not None:
                return var, variables[var]
        return names[0], None

    host_label, hostname = first("ansible_host", "ansible_ssh_host")
    port_label, port = first("ansible_port", "ansible_ssh_port")
    user_label, user = first("ansible_user", "ansible_ssh_user")
    key_label, key_path = first("ansible_ssh_private_key_file", "ansible_private_key_file")
    jump = None
    for label in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if variables.get(label) is not None and jump is None:
            jump = _jump_from_ssh_args(label, variables[label])
    return InventoryHost(
        name=name,
        hostname=None if hostname is None else _check_word(host_label, hostname),
        port=None if port is None else _check_port(port_label, port),
        user=None if user is None else _check_word(user_label, user),
        key_path=None if key_path is None else _check_key_path(key_label, key_path),
        jump=jump,
        known_hosts=None,
        groups=(),
        source=source,
    )


def _resolve_ansible(tree: _AnsibleTree) -> _ParsedInventory:
    """Membership (direct + through children) and variables (all < parent < child < host), as Ansible does."""
    path, groups = tree.path, tree.groups
    parsed = _ParsedInventory(path, problems=tree.problems)
    parents: dict[str, set[str]] = {name: set() for name in groups}
    for name, group in groups.items():
        for child in group.children:
            if child == "all":
                _note(parsed.problems, f"{path}: group 'all' cannot be a child of {name!r}; ignored")
            elif child == name:
                _note(parsed.problems, f"{path}: group {name!r} cannot be its own child; ignored")
            else:
                parents[child].add(name)
    for name, group_parents in parents.items():
        if name != "all" and not group_parents:
            group_parents.add("all")  # top-level groups hang under `all`

    order = _topological_order(parents)
    if len(order) < len(parents):
        stuck = sorted(set(parents) - set(order))
        shown = ", ".join(stuck[:10]) + (", ..." if len(stuck) > 10 else "")
        _note(parsed.problems, f"{path}: groups {shown} form a loop through children; the looping links are ignored")
        for name in stuck:
            parents[name] -= set(stuck)
            if not parents[name]:
                parents[name].add("all")
        order = _topological_order(parents)

    # A group's depth is its longest path from `all`; deeper (more specific) groups' variables win.
    depth = dict.fromkeys(parents, 0)
    for name in order:
        for parent in parents[name]:
            depth[name] = max(depth[name], depth[parent] + 1)

    direct_groups: dict[str, set[str]] = {host: set() for host in tree.host_vars}
    for name, group in groups.items():
        for host in group.hosts:
            direct_groups[host].add(name)
    for names in direct_groups.values():
        if not names - {"all", "ungrouped"}:
            names.add("ungrouped")  # hosts in no group of their own belong to `ungrouped`

    for host, names in direct_groups.items():
        member_of: set[str] = set()
        pending = list(names)
        while pending:
            name = pending.pop()
            if name not in member_of:
                member_of.add(name)
                pending.extend(parents[name])
        variables: dict[str, object] = {}
        for name in sorted(member_of, key=lambda group_name: (depth[group_name], group_name)):
            variables.update(groups[name].variables)
        variables.update(tree.host_vars[host])
        try:
            parsed.hosts[host] = _host_from_ansible_vars(host, variables, str(path))
        except _EntryError as exc:
            _note(parsed.problems, f"{path}: host {host!r}: {exc}")
            parsed.rejected.add(host)
            continue
        for name in member_of - {"all"}:
            parsed.memberships.setdefault(name, set()).add(host)
    for name in groups:
        if name != "all":
            parsed.memberships.setdefault(name, set())  # an empty group still exists
    return parsed


# --------------------------------------------------------------------------------------------------------------
# Merging and reloading


@dataclass(frozen=True)
class _Snapshot:
    hosts: dict[str, InventoryHost]
    groups: dict[str, tuple[str, ...]]
    problems: list[str]
    files: list[Path]
    signatures: _SignatureMap  # every file (and Include directory) whose change means a reload
    # ssh_options answers for this load: a parse costs far more than an SSH exec on a warm connection
    options: dict[tuple[str, str | None, int | None], SshConfigOptions] = field(default_factory=dict)


def _file_signature(path: Path) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_ino, status.st_mtime_ns, status.st_size)


def _merge(
    ssh_hosts: dict[str, InventoryHost], parsed: _ParsedInventory | None, problems: list[str]
) -> tuple[dict[str, InventoryHost], dict[str, tuple[str, ...]]]:
    hosts = dict(ssh_hosts)
    memberships: dict[str, set[str]] = {}
    if parsed is not None:
        hosts.update(parsed.hosts)  # an inventory entry replaces the ssh_config entry of the same name
        for group, members in parsed.memberships.items():
            memberships[group] = members - parsed.rejected
        for members in memberships.values():
            for member in members:
                if member not in hosts:
                    # Listed in a group but defined nowhere: reachable under its own name, like in Ansible.
                    hosts[member] = InventoryHost(member, None, None, None, None, None, None, (), str(parsed.path))
    if len(hosts) > MAX_HOSTS:
        _note(problems, f"{len(hosts)} hosts in ssh_config and the inventory; only the first {MAX_HOSTS} are used")
        hosts = {name: hosts[name] for name in sorted(hosts)[:MAX_HOSTS]}
        memberships = {group: {name for name in members if name in hosts} for group, members in memberships.items()}

    groups_of: dict[str, list[str]] = {}
    for group in sorted(memberships):
        for member in memberships[group]:
            groups_of.setdefault(member, []).append(group)
    merged_hosts = {name: replace(hosts[name], groups=tuple(groups_of.get(name, ()))) for name in sorted(hosts)}
    groups = {group: tuple(sorted(memberships[group])) for group in sorted(memberships)}
    groups["all"] = tuple(merged_hosts)
    return merged_hosts, dict(sorted(groups.items()))


def _load_snapshot(ssh_config_path: Path | None, inventory_path: Path | None) -> _Snapshot:
    signatures: _SignatureMap = {}
    problems: list[str] = []
    files: list[Path] = []
    ssh_hosts: dict[str, InventoryHost] = {}
    if ssh_config_path is not None:
        # Taken before reading, so a change during the read shows up as a change next time.
        signatures[ssh_config_path] = _file_signature(ssh_config_path)
        if signatures[ssh_config_path] is not None:
            loaded = _load_ssh_config_hosts(ssh_config_path)
            ssh_hosts = loaded.hosts
            problems += loaded.problems
            for path in loaded.parsed_files + loaded.watched_dirs:
                signatures.setdefault(path, _file_signature(path))
            files += [path for path in loaded.parsed_files if path not in files]

    parsed = None
    if inventory_path is not None:
        signatures[inventory_path] = _file_signature(inventory_path)
        parsed = _parse_inventory_file(inventory_path)
        problems += parsed.problems
        if signatures[inventory_path] is not None:
            files.append(inventory_path)

    hosts, groups = _merge(ssh_hosts, parsed, problems)
    return _Snapshot(hosts=hosts, groups=groups, problems=problems, files=files, signatures=signatures)


class Inventory:
    """The hosts known from ssh_config and the inventory file, re-read when one of their files changes.

    `hosts()` and `groups()` return the same dict objects until a reload (callers may cache on identity);
    treat them as read-only.
    """

    def __init__(self, ssh_config_path: Path | None, inventory_path: Path | None) -> None:
        self._ssh_config_path = ssh_config_path.expanduser() if ssh_config_path is not None else None
        self._inventory_path = inventory_path.expanduser() if inventory_path is not None else None
        # Tool calls may run in worker threads; one reload at a time, and readers always see a whole snapshot.
        self._lock = threading.Lock()
        self._checked_at = time.monotonic()
        self._snapshot = _load_snapshot(self._ssh_config_path, self._inventory_path)

    def _current(self) -> _Snapshot:
        with self._lock:
            now = time.monotonic()
            if now - self._checked_at >= RECHECK_INTERVAL_SECONDS:
                self._checked_at = now
                signatures = self._snapshot.signatures
                if any(_file_signature(path) != signature for path, signature in signatures.items()):
                    self._snapshot = _load_snapshot(self._ssh_config_path, self._inventory_path)
            return self._snapshot

    def hosts(self) -> dict[str, InventoryHost]:
        return self._current().hosts

    def groups(self) -> dict[str, tuple[str, ...]]:
        return self._current().groups

    def lookup(self, name: str) -> InventoryHost | None:
        return self._current().hosts.get(name)

    def group_members(self, group: str) -> list[str]:
        groups = self._current().groups
        members = groups.get(group)
        if members is None:
            known = sorted(groups)
            listed = ", ".join(known[:50]) + (f", ... ({len(known) - 50} more)" if len(known) > 50 else "")
            raise InventoryError(f"unknown group {group!r}; known groups: {listed}")
        return list(members)

    def problems(self) -> list[str]:
        return list(self._current().problems)

    def ssh_options(self, host: str, user: str | None = None, port: int | None = None) -> SshConfigOptions:
        snapshot = self._current()
        config_path = self._ssh_config_path
        if config_path is None or snapshot.signatures.get(config_path) is None:
            return EMPTY_SSH_OPTIONS
        cached = snapshot.options.get((host, user, port))
        if cached is not None:
            return cached
        try:
            options = read_ssh_options(config_path, host, user, port)
        # A broken ssh_config is reported by problems(); the connection then uses arguments, inventory and
        # defaults rather than failing here.
        except Exception:
            options = EMPTY_SSH_OPTIONS
        if len(snapshot.options) >= MAX_CACHED_OPTIONS:
            snapshot.options.clear()
        snapshot.options[(host, user, port)] = options
        return options

    def files(self) -> list[Path]:
        return list(self._current().files)
