"""What an inventory entry is (`InventoryHost`), the checks every source applies to its fields, and how load
problems are collected: each distinct message once, and a bounded number of them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

KNOWN_HOSTS_MODES = ("strict", "accept-new", "ignore")
MAX_HOSTS = 10_000
MAX_GROUPS = 10_000
MAX_PROBLEMS = 100


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


class InventoryError(Exception):
    """A lookup that cannot be answered, e.g. an unknown group; the message says what exists instead."""


class EntryError(ValueError):
    """One bad entry (host, group, field or line); the caller adds file and position and keeps loading."""


def note_problem(problems: list[str], message: str) -> None:
    """Record a load problem: each distinct message once, and a bounded number of them."""
    if message in problems or len(problems) > MAX_PROBLEMS:
        return
    if len(problems) == MAX_PROBLEMS:
        problems.append(f"more problems were found; only the first {MAX_PROBLEMS} are shown")
        return
    problems.append(message)


def check_name(kind: str, value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # YAML reads a key like `101:` as a number
    if not isinstance(value, str) or not value or any(char.isspace() for char in value):
        raise EntryError(f"{kind} name {value!r} must be a non-empty string without whitespace")
    return value


def check_text(label: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise EntryError(f"{label} must be a non-empty string, got {value!r}")
    if "{{" in value:
        raise EntryError(f"{label} {value!r} is a template; templated values are not supported")
    return value


def check_word(label: str, value: object) -> str:
    text = check_text(label, value)
    if any(char.isspace() for char in text):
        raise EntryError(f"{label} {text!r} must not contain whitespace")
    return text


def check_port(label: str, value: object) -> int:
    number = value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}", value.strip()):
        number = int(value)  # INI values are text
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 65535:
        raise EntryError(f"{label} must be an integer 1..65535, got {value!r}")
    return number


def check_known_hosts(label: str, value: object) -> str:
    if value not in KNOWN_HOSTS_MODES:
        raise EntryError(f"{label} must be one of {', '.join(KNOWN_HOSTS_MODES)}, got {value!r}")
    return str(value)


def check_jump(label: str, value: object) -> str | None:
    jump = check_word(label, value)
    return None if jump.lower() == "none" else jump


def check_key_path(label: str, value: object) -> str:
    return os.path.expanduser(check_text(label, value))


@dataclass
class ParsedInventory:
    path: Path
    hosts: dict[str, InventoryHost] = field(default_factory=dict)  # entries the file defines
    memberships: dict[str, set[str]] = field(default_factory=dict)  # group -> host names, without "all"
    rejected: set[str] = field(default_factory=set)  # host names whose entry was bad: kept out of groups too
    problems: list[str] = field(default_factory=list)
