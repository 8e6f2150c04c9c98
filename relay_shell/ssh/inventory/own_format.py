"""relay-shell's own inventory format (JSON or YAML): `hosts` with their fields and `groups` of host names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from relay_shell.ssh.inventory.fields import (
    MAX_GROUPS,
    MAX_HOSTS,
    EntryError,
    InventoryHost,
    ParsedInventory,
    check_jump,
    check_key_path,
    check_known_hosts,
    check_name,
    check_port,
    check_word,
    note_problem,
)

OWN_FORMAT_KEYS = frozenset({"hosts", "groups"})
OWN_HOST_FIELDS = ("hostname", "port", "user", "key_path", "jump", "known_hosts", "groups")


def _own_host(name: str, entry: dict[Any, Any], source: str) -> tuple[InventoryHost, list[str]]:
    unknown = [key for key in entry if key not in OWN_HOST_FIELDS]
    if unknown:
        raise EntryError(f"unknown field {unknown[0]!r}; allowed: {', '.join(OWN_HOST_FIELDS)}")
    groups_value = entry.get("groups")
    if groups_value is None:
        groups_value = []
    if not isinstance(groups_value, list):
        raise EntryError(f"groups must be a list of group names, got {groups_value!r}")
    groups = [check_name("group", group) for group in groups_value]
    if "all" in groups:
        raise EntryError("groups: 'all' is implicit and cannot be listed")

    def optional(check: Any, key: str) -> Any:
        value = entry.get(key)
        return None if value is None else check(key, value)

    host = InventoryHost(
        name=name,
        hostname=optional(check_word, "hostname"),
        port=optional(check_port, "port"),
        user=optional(check_word, "user"),
        key_path=optional(check_key_path, "key_path"),
        jump=optional(check_jump, "jump"),
        known_hosts=optional(check_known_hosts, "known_hosts"),
        groups=(),
        source=source,
    )
    return host, groups


def parse_own_format(data: dict[Any, Any], path: Path) -> ParsedInventory:
    parsed = ParsedInventory(path)
    hosts = data.get("hosts")
    if hosts is None:
        hosts = {}
    if not isinstance(hosts, dict):
        note_problem(parsed.problems, f"{path}: 'hosts' must be a mapping of host name to settings")
        hosts = {}
    for raw_name, entry in hosts.items():
        if len(parsed.hosts) >= MAX_HOSTS:
            note_problem(parsed.problems, f"{path}: more than {MAX_HOSTS} hosts; the rest are ignored")
            break
        try:
            name = check_name("host", raw_name)
        except EntryError as exc:
            note_problem(parsed.problems, f"{path}: {exc}")
            continue
        try:
            if entry is None:
                entry = {}
            if not isinstance(entry, dict):
                raise EntryError(f"must be a mapping of settings or null, got {type(entry).__name__}")
            host, groups = _own_host(name, entry, str(path))
        except EntryError as exc:
            note_problem(parsed.problems, f"{path}: host {name!r}: {exc}")
            parsed.rejected.add(name)
            continue
        parsed.hosts[name] = host
        for group in groups:
            parsed.memberships.setdefault(group, set()).add(name)

    groups_data = data.get("groups")
    if groups_data is None:
        groups_data = {}
    if not isinstance(groups_data, dict):
        note_problem(parsed.problems, f"{path}: 'groups' must be a mapping of group name to a list of hosts")
        groups_data = {}
    for raw_group, members in groups_data.items():
        try:
            group = check_name("group", raw_group)
            if group == "all":
                raise EntryError("group 'all' is implicit (every host) and cannot be defined")
            if members is None:
                members = []
            if not isinstance(members, list):
                raise EntryError(f"group {group!r} must be a list of host names")
        except EntryError as exc:
            note_problem(parsed.problems, f"{path}: {exc}")
            continue
        if group not in parsed.memberships and len(parsed.memberships) >= MAX_GROUPS:
            note_problem(parsed.problems, f"{path}: more than {MAX_GROUPS} groups; the rest are ignored")
            break
        member_names = parsed.memberships.setdefault(group, set())
        for member in members:
            try:
                member_names.add(check_name("host", member))
            except EntryError as exc:
                note_problem(parsed.problems, f"{path}: group {group!r}: {exc}")
    return parsed
