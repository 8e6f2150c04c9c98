"""Ansible inventories, YAML and INI: groups, children, vars, host ranges, and the `ansible_*` connection
variables turned into inventory hosts.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import string
from collections import deque
from dataclasses import dataclass, field
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
    check_name,
    check_port,
    check_word,
    note_problem,
)

ANSIBLE_GROUP_KEYS = ("hosts", "vars", "children")


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
            note_problem(tree.problems, f"{tree.path}: more than {MAX_GROUPS} groups; the rest are ignored")
            return None
        group = tree.groups[name] = _AnsibleGroup()
    return group


def _ansible_add_host(tree: _AnsibleTree, group: _AnsibleGroup, name: str, variables: dict[str, object]) -> None:
    host_vars = tree.host_vars.get(name)
    if host_vars is None:
        if len(tree.host_vars) >= MAX_HOSTS:
            note_problem(tree.problems, f"{tree.path}: more than {MAX_HOSTS} hosts; the rest are ignored")
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
        raise EntryError(f"range [{spec}] must be [begin:end] or [begin:end:step]")
    begin, end = bounds[0] or "0", bounds[1]
    step_text = bounds[2] if len(bounds) == 3 else "1"
    if not re.fullmatch(r"[0-9]{1,6}", step_text) or int(step_text) < 1:
        raise EntryError(f"range [{spec}]: step must be a positive integer")
    step = int(step_text)
    if len(begin) == 1 and len(end) == 1 and begin in string.ascii_letters and end in string.ascii_letters:
        first, last = string.ascii_letters.index(begin), string.ascii_letters.index(end)
        if first > last:
            raise EntryError(f"range [{spec}]: begin comes after end")
        return list(string.ascii_letters[first : last + 1 : step])
    if not (re.fullmatch(r"[0-9]{1,9}", begin) and re.fullmatch(r"[0-9]{1,9}", end)):
        raise EntryError(f"range [{spec}] must be numbers (01:20) or single letters (a:f)")
    numbers = range(int(begin), int(end) + 1, step)
    if not numbers:
        raise EntryError(f"range [{spec}]: begin comes after end")
    if len(numbers) > limit:
        raise EntryError(f"range [{spec}] makes {len(numbers)} hosts; at most {limit} are allowed")
    # A leading zero asks for fixed-width names (web01..web10), as in Ansible.
    width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
    if width and len(end) != width:
        raise EntryError(f"range [{spec}]: zero-padded begin and end must have the same number of digits")
    return [str(number).zfill(width) for number in numbers]


_HOST_RANGE = re.compile(r"\[([^\[\]]*:[^\[\]]*)\]")


def _expand_host_pattern(pattern: str) -> tuple[list[str], int | None]:
    """An Ansible host pattern -> (host names, port): `web[01:03].example.com:2222`, `db-[a:c]`, `[::1]:22`."""
    if pattern.startswith("["):
        inner, _, rest = pattern[1:].partition("]")
        if _is_ipv6(inner) and re.fullmatch(r"(:[0-9]{1,5})?", rest):
            return [inner], check_port("port", rest[1:]) if rest else None
    colons = _outside_bracket_colons(pattern)
    if len(colons) > 1:  # a bare IPv6 address: no port, no ranges
        return [pattern], None
    port = None
    if colons:
        pattern, port_text = pattern[: colons[0]], pattern[colons[0] + 1 :]
        port = check_port("port", port_text)
    names = [""]
    rest = pattern
    while (found := _HOST_RANGE.search(rest)) is not None:
        values = _range_values(found.group(1), MAX_HOSTS)
        if len(names) * len(values) > MAX_HOSTS:
            raise EntryError(f"host pattern {pattern!r} makes more than {MAX_HOSTS} hosts")
        names = [name + rest[: found.start()] + value for name in names for value in values]
        rest = rest[found.end() :]
    return [name + rest for name in names], port


def _add_pattern_hosts(
    tree: _AnsibleTree, group_name: str, pattern: str, variables: dict[str, object], where: str
) -> None:
    group = tree.groups[group_name]
    try:
        names, port = _expand_host_pattern(pattern)
        checked = [check_name("host", name) for name in names]
    except EntryError as exc:
        note_problem(tree.problems, f"{where}: host {pattern!r}: {exc}")
        return
    # The port in `host:port` is a host variable; an explicit ansible_port on the same line wins over it.
    host_vars: dict[str, object] = {} if port is None else {"ansible_port": port}
    host_vars.update(variables)
    for name in checked:
        _ansible_add_host(tree, group, name, host_vars)


def ansible_tree_from_data(data: dict[Any, Any], path: Path) -> _AnsibleTree:
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
        name = check_name("group", raw_name)
    except EntryError as exc:
        note_problem(tree.problems, f"{path}: {exc}")
        return None
    group = _ansible_group(tree, name)
    if group is None or group_data is None:
        return None if group is None else name
    if not isinstance(group_data, dict):
        note_problem(tree.problems, f"{path}: group {name!r}: must be a mapping with hosts, vars or children")
        return name
    # YAML anchors can make one mapping appear many times (even inside itself); read each one once per group.
    if (name, id(group_data)) in visited:
        return name
    visited.add((name, id(group_data)))

    for key in group_data:
        if key not in ANSIBLE_GROUP_KEYS:
            note_problem(
                tree.problems,
                f"{path}: group {name!r}: unexpected key {key!r}; allowed: hosts, vars, children",
            )
    variables = group_data.get("vars")
    if isinstance(variables, dict):
        group.variables.update({str(key): value for key, value in variables.items()})
    elif variables is not None:
        note_problem(tree.problems, f"{path}: group {name!r}: vars must be a mapping")

    hosts = group_data.get("hosts")
    if isinstance(hosts, dict):
        for pattern, host_vars in hosts.items():
            if isinstance(pattern, int) and not isinstance(pattern, bool):
                pattern = str(pattern)
            if not isinstance(pattern, str) or not (host_vars is None or isinstance(host_vars, dict)):
                note_problem(
                    tree.problems,
                    f"{path}: group {name!r}: host {pattern!r}: vars must be a mapping or empty",
                )
                continue
            variables_of_host = {str(key): value for key, value in (host_vars or {}).items()}
            _add_pattern_hosts(tree, name, pattern, variables_of_host, f"{path}: group {name!r}")
    elif hosts is not None:
        note_problem(tree.problems, f"{path}: group {name!r}: hosts must be a mapping of host name to variables")

    children = group_data.get("children")
    if isinstance(children, dict):
        for child_name, child_data in children.items():
            child = _read_yaml_group(tree, child_name, child_data, visited)
            if child is not None:
                group.children.add(child)
    elif children is not None:
        note_problem(tree.problems, f"{path}: group {name!r}: children must be a mapping of group name to group")
    return name


# `[name]`, `[name:vars]`, `[name:children]`, optionally followed by a comment (Ansible's own pattern).
_INI_SECTION = re.compile(r"\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[#;].*)?")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def ansible_tree_from_ini(text: str, path: Path) -> _AnsibleTree:
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
                note_problem(
                    tree.problems,
                    f"{where}: section [{group_name}:{section_kind}] has an unknown type; "
                    "allowed: [group], [group:vars], [group:children]",
                )
                section_kind = "skip"
            elif _ansible_group(tree, group_name) is None:
                section_kind = "skip"
            continue
        if line.startswith("[") and line.endswith("]"):
            note_problem(
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
                    raise EntryError(f"expected key=value, got {line!r}")
                tree.groups[group_name].variables[key] = _unquote(value.strip())
            else:
                child_name = check_name("group", shlex.split(line, comments=True)[0])
                if child_name != group_name and _ansible_group(tree, child_name) is not None:
                    tree.groups[group_name].children.add(child_name)
        except (EntryError, ValueError, IndexError) as exc:  # ValueError: shlex's unclosed quote
            note_problem(tree.problems, f"{where}: {exc}")
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
            raise EntryError(f"expected key=value host variables after the host, got {token!r}")
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
        raise EntryError(f"{label} must be a string, got {args!r}")
    try:
        tokens = shlex.split(args)
    except ValueError as exc:
        raise EntryError(f"{label}: {exc}") from None
    for index, token in enumerate(tokens):
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if token == "-J" and following is not None:
            return check_jump(label, following)
        if token.startswith("-J") and len(token) > 2:
            return check_jump(label, token[2:])
        option = following if token == "-o" else token[2:] if token.startswith("-o") else None
        if option is None:
            continue
        key, separator, value = option.partition("=")
        if not separator:
            key, _, value = option.strip().partition(" ")
        if key.strip().lower() == "proxyjump" and value.strip():
            return check_jump(label, value.strip())
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
        hostname=None if hostname is None else check_word(host_label, hostname),
        port=None if port is None else check_port(port_label, port),
        user=None if user is None else check_word(user_label, user),
        key_path=None if key_path is None else check_key_path(key_label, key_path),
        jump=jump,
        known_hosts=None,
        groups=(),
        source=source,
    )


def resolve_ansible(tree: _AnsibleTree) -> ParsedInventory:
    """Membership (direct + through children) and variables (all < parent < child < host), as Ansible does."""
    path, groups = tree.path, tree.groups
    parsed = ParsedInventory(path, problems=tree.problems)
    parents: dict[str, set[str]] = {name: set() for name in groups}
    for name, group in groups.items():
        for child in group.children:
            if child == "all":
                note_problem(parsed.problems, f"{path}: group 'all' cannot be a child of {name!r}; ignored")
            elif child == name:
                note_problem(parsed.problems, f"{path}: group {name!r} cannot be its own child; ignored")
            else:
                parents[child].add(name)
    for name, group_parents in parents.items():
        if name != "all" and not group_parents:
            group_parents.add("all")  # top-level groups hang under `all`

    order = _topological_order(parents)
    if len(order) < len(parents):
        stuck = sorted(set(parents) - set(order))
        shown = ", ".join(stuck[:10]) + (", ..." if len(stuck) > 10 else "")
        note_problem(
            parsed.problems,
            f"{path}: groups {shown} form a loop through children; the looping links are ignored",
        )
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
        except EntryError as exc:
            note_problem(parsed.problems, f"{path}: host {host!r}: {exc}")
            parsed.rejected.add(host)
            continue
        for name in member_of - {"all"}:
            parsed.memberships.setdefault(name, set()).add(host)
    for name in groups:
        if name != "all":
            parsed.memberships.setdefault(name, set())  # an empty group still exists
    return parsed
