"""Where SSH hosts are and how to reach them: the inventory, loaded and reloaded.

Two sources, merged: the OpenSSH client config (read only through asyncssh's own parser, so Include and Match
behave exactly as they will when asyncssh connects) and an optional inventory file — our own JSON/YAML format or
an Ansible inventory (YAML or INI). Both are re-read when any loaded file changes. Load problems never raise:
they are collected for `problems()` and the other source still loads. The sources are read in
`ssh_config.py`, `own_format.py` and `ansible.py`; this module picks the parser, merges and watches the files.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # no stubs installed (types-PyYAML)

from relay_shell.ssh.inventory.ansible import ansible_tree_from_data, ansible_tree_from_ini, resolve_ansible
from relay_shell.ssh.inventory.fields import MAX_HOSTS, InventoryError, InventoryHost, ParsedInventory, note_problem
from relay_shell.ssh.inventory.own_format import OWN_FORMAT_KEYS, parse_own_format
from relay_shell.ssh.inventory.ssh_config import (
    EMPTY_SSH_OPTIONS,
    SignatureMap,
    SshConfigOptions,
    load_ssh_config_hosts,
    read_ssh_options,
)

MAX_INVENTORY_BYTES = 8 * 1024 * 1024
# Callers look hosts up several times per tool call; one round of stats per interval is plenty.
RECHECK_INTERVAL_SECONDS = 0.5
MAX_CACHED_OPTIONS = 4096


# --------------------------------------------------------------------------------------------------------------
# ssh_config, through asyncssh's parser


# --------------------------------------------------------------------------------------------------------------
# Field validation shared by our format and Ansible's


# --------------------------------------------------------------------------------------------------------------
# Inventory files


def _read_inventory_text(path: Path, parsed: ParsedInventory) -> str | None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        note_problem(parsed.problems, f"inventory file {path} does not exist")
        return None
    except OSError as exc:
        note_problem(parsed.problems, f"inventory file {path} cannot be read: {exc.strerror}")
        return None
    if size > MAX_INVENTORY_BYTES:
        note_problem(parsed.problems, f"inventory file {path} is {size} bytes; at most {MAX_INVENTORY_BYTES} are read")
        return None
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_INVENTORY_BYTES + 1)  # bounded even if the file grew since the stat
    except OSError as exc:
        note_problem(parsed.problems, f"inventory file {path} cannot be read: {exc.strerror}")
        return None
    if len(raw) > MAX_INVENTORY_BYTES:
        note_problem(parsed.problems, f"inventory file {path} is over {MAX_INVENTORY_BYTES} bytes; not read")
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        note_problem(parsed.problems, f"inventory file {path} is not UTF-8 text (bad byte at offset {exc.start})")
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


def _parse_inventory_file(path: Path) -> ParsedInventory:
    parsed = ParsedInventory(path)
    text = _read_inventory_text(path, parsed)
    if text is None:
        return parsed
    kind = _inventory_kind(path, text)
    if kind == "ini":
        return resolve_ansible(ansible_tree_from_ini(text, path))

    data: object
    try:
        data = json.loads(text) if kind == "json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        note_problem(parsed.problems, f"{path} line {exc.lineno}: invalid JSON: {exc.msg}")
        return parsed
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path} line {mark.line + 1}" if mark is not None else str(path)
        note_problem(parsed.problems, f"{where}: invalid YAML: {getattr(exc, 'problem', None) or exc}")
        return parsed
    except RecursionError:
        note_problem(parsed.problems, f"{path}: nested too deeply to read")
        return parsed

    if data is None:  # an empty YAML file is an empty inventory
        return parsed
    if not isinstance(data, dict):
        note_problem(parsed.problems, f"{path}: the top level must be a mapping, got {type(data).__name__}")
        return parsed
    if set(data) <= OWN_FORMAT_KEYS:
        return parse_own_format(data, path)
    try:
        return resolve_ansible(ansible_tree_from_data(data, path))
    except RecursionError:  # children nested (or aliased) deeper than Python's stack
        note_problem(parsed.problems, f"{path}: groups nested too deeply to read")
        return parsed


# Our own format ------------------------------------------------------------------------------------------------


# Ansible inventories --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------------------
# Merging and reloading


@dataclass(frozen=True)
class _Snapshot:
    hosts: dict[str, InventoryHost]
    groups: dict[str, tuple[str, ...]]
    problems: list[str]
    files: list[Path]
    signatures: SignatureMap  # every file (and Include directory) whose change means a reload
    # ssh_options answers for this load: a parse costs far more than an SSH exec on a warm connection
    options: dict[tuple[str, str | None, int | None], SshConfigOptions] = field(default_factory=dict)


def _file_signature(path: Path) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_ino, status.st_mtime_ns, status.st_size)


def _merge(
    ssh_hosts: dict[str, InventoryHost], parsed: ParsedInventory | None, problems: list[str]
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
        note_problem(
            problems,
            f"{len(hosts)} hosts in ssh_config and the inventory; only the first {MAX_HOSTS} are used",
        )
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
    signatures: SignatureMap = {}
    problems: list[str] = []
    files: list[Path] = []
    ssh_hosts: dict[str, InventoryHost] = {}
    ssh_options_read: dict[str, SshConfigOptions] = {}
    if ssh_config_path is not None:
        # Taken before reading, so a change during the read shows up as a change next time.
        signatures[ssh_config_path] = _file_signature(ssh_config_path)
        if signatures[ssh_config_path] is not None:
            loaded = load_ssh_config_hosts(ssh_config_path)
            ssh_hosts = loaded.hosts
            ssh_options_read = loaded.options
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
    snapshot = _Snapshot(hosts=hosts, groups=groups, problems=problems, files=files, signatures=signatures)
    # Listing the hosts read each one's options already: a route (ssh_options) needs them again, and with a
    # parse per host costing a walk of the whole file, a fan-out over 256 hosts would read it 256 times more.
    snapshot.options.update({(name, None, None): options for name, options in ssh_options_read.items()})
    return snapshot


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
