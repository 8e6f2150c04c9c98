"""The OpenSSH client config, read only through asyncssh's own parser so that Include and Match behave exactly
as they will when asyncssh connects; plus the host listing (`Host` lines) and the files to watch for reload.
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
class SshConfigLoad:
    hosts: dict[str, InventoryHost] = field(default_factory=dict)
    parsed_files: list[Path] = field(default_factory=list)
    watched_dirs: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def load_ssh_config_hosts(config_path: Path) -> SshConfigLoad:
    loaded = SshConfigLoad()
    listing = _HostListingConfig(None, False, False, False, _local_user(), (), "", ())
    try:
        listing.parse(config_path)
    # asyncssh raises several types for a broken file (ConfigParseError, OSError, UnicodeDecodeError, ...);
    # each is a problem with the file, never a crash of the server.
    except Exception as exc:
        note_problem(loaded.problems, f"ssh_config: {exc}")
    # Kept even after a failure, so fixing the broken file (or an included one) triggers a reload.
    loaded.parsed_files = list(dict.fromkeys(listing.parsed_files))
    loaded.watched_dirs = list(dict.fromkeys(listing.watched_dirs))
    if loaded.problems:
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
