"""What every SSH tool shares: the connection arguments, the `Ssh` state (settings, inventory, pool, resolved
routes), a target resolved into its full identity and its audit record, the `hosts` argument expanded
(lists, comma strings, `@group`s), and the policy subject of a host in all its spellings (`Route`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from relay_shell.arguments import check_no_nul
from relay_shell.errors import ArgumentError
from relay_shell.plan import Subject
from relay_shell.settings.model import Settings
from relay_shell.ssh.inventory.fields import InventoryError
from relay_shell.ssh.inventory.load import Inventory
from relay_shell.ssh.pool import SshPool
from relay_shell.ssh.target import Route, key_fingerprint, resolve_route

MAX_CACHED_ROUTES = 4096


@dataclass(frozen=True)
class ConnectionArgs:
    user: str | None = None
    port: int | None = None
    key_path: str | None = None
    known_hosts: str | None = None
    jump: str | None = None


@dataclass
class Ssh:
    """What the SSH tools share: settings, the inventory and the connection pool."""

    settings: Settings
    inventory: Inventory
    pool: SshPool
    # Resolved routes for the current inventory load: resolving costs more than a warm exec.
    routes: dict[tuple[str, ConnectionArgs, str], Route] = field(default_factory=dict)
    routes_for: object = None

    def route(self, host: str, connection: ConnectionArgs, argument: str = "host") -> Route:
        hosts = self.inventory.hosts()  # the same object until the inventory reloads
        if hosts is not self.routes_for or len(self.routes) >= MAX_CACHED_ROUTES:
            self.routes.clear()
            self.routes_for = hosts
        key = (host, connection, argument)
        route = self.routes.get(key)
        hops = (*route.jumps, route.target) if route is not None else ()
        if route is None or any(hop.key_path and not os.path.isfile(hop.key_path) for hop in hops):
            route = self.routes[key] = self._resolve(host, connection, argument)  # a key gone: say so again
        return route

    def _resolve(self, host: str, connection: ConnectionArgs, argument: str) -> Route:
        if argument == "host" and host.strip().startswith("@"):
            raise ArgumentError(
                f"host: {host!r} is a group and this tool takes one host; allowed: one host, or ssh_fanout / "
                "ssh_check for a group"
            )
        if connection.user is not None and not connection.user.strip():
            raise ArgumentError("user: is empty; allowed: a user name, or omit it")
        route = resolve_route(
            self.inventory,
            host,
            user=connection.user,
            port=connection.port,
            key_path=connection.key_path,
            known_hosts=connection.known_hosts,
            jump=connection.jump,
            default_mode=self.settings.ssh.ssh_known_hosts,
            argument=argument,
        )
        if self.settings.policy.policy_mode == "readonly":
            # Trusting a new host key writes known_hosts: a change readonly mode does not make.
            hops = tuple(
                replace(hop, known_hosts_mode="strict") if hop.known_hosts_mode == "accept-new" else hop
                for hop in (*route.jumps, route.target)
            )
            route = replace(route, jumps=hops[:-1], target=hops[-1])
        return route


def target_record(route: Route) -> dict[str, Any]:
    """The SSH identity for the audit record: where, as whom, with which key, through which hops, how trusted."""
    target = route.target
    record: dict[str, Any] = {
        "host": target.name,
        "address": target.address,
        "port": target.port,
        "user": target.user,
        "key": key_fingerprint(target.key_path) if target.key_path else "default (agent and ~/.ssh keys)",
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


def command_text(command: str) -> str:
    if not command.strip():
        raise ArgumentError("command: is empty; allowed: a non-empty command")
    check_no_nul("command", command)
    return command


# -- ssh_exec ----------------------------------------------------------------------------------------------


# -- ssh_spawn ---------------------------------------------------------------------------------------------


# -- ssh_check and ssh_fanout ------------------------------------------------------------------------------


# -- ssh_keyscan -------------------------------------------------------------------------------------------


# -- ssh_hosts and the inventory resources -----------------------------------------------------------------


def expand_hosts(ssh: Ssh, hosts: str | list[str] | None, *, empty_means_all: bool) -> list[str]:
    """Host arguments in order, without repeats: names, user@host:port, and @group (the inventory's groups;
    @all is every host)."""
    if hosts is None:
        items: list[str] = []
    elif isinstance(hosts, str):
        items = [item.strip() for item in hosts.split(",")]
    else:
        items = [item.strip() for item in hosts]
    items = [item for item in items if item]
    if not items:
        if not empty_means_all:
            raise ArgumentError(
                "hosts: is empty; allowed: host names, user@host:port or @group, as a list or comma string"
            )
        items = ["@all"]
    expanded: list[str] = []
    for item in items:
        if item.startswith("@"):
            try:
                expanded += ssh.inventory.group_members(item[1:])
            except InventoryError as exc:
                raise ArgumentError(f"hosts: {exc}") from None
        else:
            expanded.append(item)
    expanded = list(dict.fromkeys(expanded))
    if not expanded:
        raise ArgumentError(
            "hosts: the inventory has no hosts; allowed: name hosts explicitly, or configure "
            "RELAY_SHELL_INVENTORY / ~/.ssh/config"
        )
    limit = ssh.settings.ssh.fanout_max_hosts
    if len(expanded) > limit:
        raise ArgumentError(
            f"hosts: {len(expanded)} hosts; allowed: at most {limit} per call (RELAY_SHELL_FANOUT_MAX_HOSTS); "
            "split the work into batches"
        )
    return expanded
