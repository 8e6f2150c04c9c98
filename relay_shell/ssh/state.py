"""What the SSH tools share at run time: the settings, the inventory, the connection pool, and the routes resolved
for the current inventory load (`Ssh`). Resolving a host into a route goes through here, so it is cached."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from relay_shell.errors import ArgumentError
from relay_shell.settings.model import Settings
from relay_shell.ssh.connection_args import ConnectionArgs
from relay_shell.ssh.inventory.load import Inventory
from relay_shell.ssh.pool import SshPool
from relay_shell.ssh.target import Route, resolve_route

MAX_CACHED_ROUTES = 4096


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
        return self.routes_of([host], connection, argument)[host]

    def routes_of(self, hosts: list[str], connection: ConnectionArgs, argument: str = "hosts") -> dict[str, Route]:
        """Each host's route, in order. The inventory is looked at once and each key file once per call, not
        once per host: a 256-host fan-out spent ~1.5 ms of its start on the same checks (ADR 0029 Round 6)."""
        current = self.inventory.hosts()  # the same object until the inventory reloads
        if current is not self.routes_for:
            self.routes.clear()
            self.routes_for = current
        present: dict[str, bool] = {}  # key file -> whether it is there, in this call
        found: dict[str, Route] = {}
        for host in hosts:
            if len(self.routes) >= MAX_CACHED_ROUTES:
                self.routes.clear()
            key = (host, connection, argument)
            route = self.routes.get(key)
            hops = (*route.jumps, route.target) if route is not None else ()
            if route is None or not all(_key_present(hop.key_path, present) for hop in hops):
                route = self.routes[key] = self._resolve(host, connection, argument)  # a key gone: say so again
            found[host] = route
        return found

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


def _key_present(path: str | None, present: dict[str, bool]) -> bool:
    """No key file named, or the named one is a file (looked at once per call)."""
    if not path:
        return True
    if path not in present:
        present[path] = os.path.isfile(path)
    return present[path]
