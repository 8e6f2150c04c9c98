"""The OpenSSH client config, read only through asyncssh's own parser so that Include and Match behave exactly
as they will when asyncssh connects; plus the host listing (`Host` lines) and the files to watch for reload.

`Match exec` is refused (adr/0007): its program would run whenever the config is read (at start, for the
inventory resources and completion, while a call is being admitted), outside any call's unit and before any
record. A Match line with an `exec` condition runs nothing, its block never applies, and the listing reports
it as a load problem naming the file and line (`ssh_hosts`, the inventory resource, server_info).
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import os
import shlex
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh.config as asyncssh_config
from asyncssh.config import ConfigParseError, SSHClientConfig, SSHConfig

from relay_shell.ssh.inventory.fields import MAX_HOSTS, InventoryHost, note_problem

# OpenSSH's own limit (READCONF_MAX_DEPTH); asyncssh has none, so an Include loop would recurse until it crashed.
MAX_INCLUDE_DEPTH = 16
# Match criteria that take no argument (OpenSSH's and asyncssh's); every other criterion takes one.
_BARE_CRITERIA = frozenset({"all", "canonical", "final"})
MATCH_EXEC_REFUSED = (
    "`Match exec` is refused: relay-shell runs no program to read its configuration (it would run outside any "
    "audited call); this Match block never applies"
)
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
SignatureMap = dict[Path, "tuple[int, int, int] | None"]


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


def runs_a_program(criteria: list[str]) -> bool:
    """Whether a Match line's criteria include `exec` (negated or not), read as asyncssh reads them."""
    index = 0
    while index < len(criteria):
        criterion = criteria[index].lower().lstrip("!")
        if criterion == "exec":
            return True
        index += 1 if criterion in _BARE_CRITERIA else 2
    return False


def _match_without_exec(config: SSHConfig, option: str, args: list[str]) -> None:
    """asyncssh's Match, except that a line with an `exec` condition runs nothing and its block never applies."""
    if runs_a_program(args):
        args.clear()
        config._matching = False
        return
    SSHConfig._match(config, option, args)


class _ClientConfig(SSHClientConfig):
    """asyncssh's client config parser, plus the StrictHostKeyChecking option asyncssh itself does not read, and
    without `Match exec` (see the module's docstring)."""

    # asyncssh's extension point is these plain class attributes (the base declares them without ClassVar).
    _handlers = {  # noqa: RUF012
        **SSHClientConfig._handlers,
        "match": ("Match", _match_without_exec),
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
    """One pass over every Host block and every Include, recording the concrete host names and the `Match exec`
    lines refused. It evaluates no condition: every block is entered (so Includes inside Host blocks are followed
    too)."""

    def __init__(self, *args: Any) -> None:  # the same arguments as _ClientConfig (asyncssh's load passes them)
        super().__init__(*args)
        self.host_names: list[str] = []
        self.watched_dirs: list[Path] = []
        self.exec_lines: list[str] = []  # "<file> line <n>" of each Match line with an exec condition

    def _list_host_names(self, option: str, args: list[str]) -> None:
        for arg in args:
            # asyncssh joins a Host line's words with commas before matching, so a comma separates names too.
            for name in arg.split(","):
                if name and not any(char in name for char in "*?!"):
                    self.host_names.append(name)
        args.clear()
        self._matching = True

    def _enter_match(self, option: str, args: list[str]) -> None:
        if runs_a_program(args):
            self.exec_lines.append(f"{self._path} line {self._line_no}")
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
class SshConfigLoad:
    hosts: dict[str, InventoryHost] = field(default_factory=dict)
    parsed_files: list[Path] = field(default_factory=list)
    watched_dirs: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    options: dict[str, SshConfigOptions] = field(default_factory=dict)  # each listed host's, as read for it


def load_ssh_config_hosts(config_path: Path) -> SshConfigLoad:
    loaded = SshConfigLoad()
    listing = _HostListingConfig(None, False, False, False, _local_user(), (), "", ())
    broken = False
    try:
        listing.parse(config_path)
    # asyncssh raises several types for a broken file (ConfigParseError, OSError, UnicodeDecodeError, ...);
    # each is a problem with the file, never a crash of the server.
    except Exception as exc:
        note_problem(loaded.problems, f"ssh_config: {exc}")
        broken = True
    # Kept even after a failure, so fixing the broken file (or an included one) triggers a reload.
    loaded.parsed_files = list(dict.fromkeys(listing.parsed_files))
    loaded.watched_dirs = list(dict.fromkeys(listing.watched_dirs))
    for where in dict.fromkeys(listing.exec_lines):
        note_problem(loaded.problems, f"ssh_config: {where}: {MATCH_EXEC_REFUSED}")
    if broken:
        return loaded

    names = list(dict.fromkeys(listing.host_names))
    if len(names) > MAX_HOSTS:
        note_problem(loaded.problems, f"ssh_config: {len(names)} hosts; only the first {MAX_HOSTS} are used")
        names = names[:MAX_HOSTS]
    for name in names:
        try:
            options = read_ssh_options(config_path, name, None, None)
        except Exception as exc:  # as above: a problem with the file
            note_problem(loaded.problems, f"ssh_config: host {name!r}: {exc}")
            continue
        loaded.options[name] = options
        known_hosts = STRICT_HOST_KEY_CHECKING_MODES.get(options.strict_host_key_checking or "")
        if options.strict_host_key_checking and known_hosts is None:
            note_problem(
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
