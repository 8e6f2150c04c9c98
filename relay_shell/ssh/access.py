"""The SSH side of the server, built on first use: importing asyncssh costs about 250 ms, which a server that
never touches SSH (and every server's startup) should not pay."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable
from typing import TYPE_CHECKING

from relay_shell.settings.model import Settings
from relay_shell.ssh.forwards.registry import ForwardRegistry

if TYPE_CHECKING:
    from relay_shell.ssh.state import Ssh


class SshAccess:
    def __init__(
        self,
        settings: Settings,
        forwards: ForwardRegistry | None = None,
        on_helper: Callable[[int], None] | None = None,
        helper_argv: Callable[[list[str]], list[str]] = list,
    ) -> None:
        self.settings = settings
        self.on_helper = on_helper  # told each ProxyCommand's pid (Containment.helper_started)
        self.helper_argv = helper_argv  # each ProxyCommand's command line (Launcher.helper_argv: readonly confines)
        self.ssh: Ssh | None = None
        self.reaper: asyncio.Task[None] | None = None
        # Port forwards ride on pooled connections; the registry itself needs no asyncssh.
        self.forwards = forwards if forwards is not None else ForwardRegistry(settings.ssh.max_forwards)

    def get(self) -> Ssh:
        if self.ssh is None:
            from relay_shell.ssh.inventory.load import Inventory
            from relay_shell.ssh.pool import SshPool
            from relay_shell.ssh.state import Ssh

            settings = self.settings
            pool = SshPool(
                max_connections=settings.ssh.ssh_max_connections,
                max_channels=settings.ssh.ssh_max_channels,
                idle_timeout=settings.ssh.ssh_idle_timeout,
                connect_timeout=settings.ssh.ssh_connect_timeout,
                keepalive=settings.ssh.ssh_keepalive,
                on_helper=self.on_helper,
                helper_argv=self.helper_argv,
            )
            self.ssh = Ssh(settings, Inventory(settings.ssh.ssh_config, settings.ssh.inventory), pool)
            # Everything made so far (the server, asyncssh's modules, the inventory) lives as long as the
            # process: out of the collector's way, a full collection walks only what calls make. One of those
            # walks cost ~0.5 s in the middle of a 256-host fan-out otherwise (ADR 0029).
            gc.freeze()
            with contextlib.suppress(RuntimeError):  # no running loop: a resource read outside the server
                self.reaper = asyncio.get_running_loop().create_task(pool.reap_forever())
        return self.ssh

    def connections(self) -> int:
        return self.ssh.pool.count() if self.ssh is not None else 0

    async def close(self) -> None:
        """Shutdown: close every port forward, then every SSH connection (remote sessions hang up with them)."""
        await self.forwards.close_all("server stopped")
        if self.reaper is not None:
            self.reaper.cancel()
        if self.ssh is not None:
            await self.ssh.pool.close_all()
