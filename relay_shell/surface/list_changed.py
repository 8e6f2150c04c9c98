"""Telling connected clients that the runbook prompts and resources changed.

A small watcher re-scans the runbook directory every WATCH_INTERVAL seconds, in a worker thread (a larger
directory less often; requests re-scan on their own when they read runbooks). When the catalog changed, it waits
until the directory is quiet (an editor's save, a `git pull` of many files) and then sends one
`notifications/prompts/list_changed` and one `notifications/resources/list_changed`:

- to 2025-11-25 clients on their connection (stdio; HTTP on the client's standalone GET stream), every connection
  that has made a request;
- to 2026-07-28 clients through the SDK's subscription bus: they receive it on the `subscriptions/listen` stream
  they opened (that era forbids unrequested change notifications on the shared channel).

Capabilities: `listChanged: true` for prompts and resources is declared in the 2025-11-25 handshake by
`declare_list_changed`; in the 2026-07-28 era the SDK derives it from serving `subscriptions/listen`.
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import anyio
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.subscriptions import PromptsListChanged, ResourcesListChanged, SubscriptionBus
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from relay_shell.surface.runbook_access import RunbookAccess

logger = logging.getLogger("relay_shell")

WATCH_INTERVAL = 1.0  # seconds between scans of the directory by the watcher
QUIET = 0.3  # seconds without a further change before clients are told (debounce)
MAX_DEBOUNCE = 3.0  # seconds a stream of changes may delay the notification at most
SEND_TIMEOUT = 2.0  # seconds one client's connection may take to accept a notification


def declare_list_changed(server: Server[Any]) -> None:
    """Make every handshake answer say `prompts.listChanged` and `resources.listChanged` true. MCPServer has no
    setting for it: its lowlevel server's `create_initialization_options` takes NotificationOptions, which the
    HTTP transport never passes (it calls it without arguments), so the defaults are bound here once."""
    original = server.create_initialization_options
    options = NotificationOptions(prompts_changed=True, resources_changed=True)
    bound = functools.partial(original, options)
    server.create_initialization_options = bound  # type: ignore[method-assign]


class ListChangedNotifier:
    """Server middleware that remembers the connections to notify, and the watcher task that notifies them."""

    def __init__(self, runbooks: RunbookAccess, bus: SubscriptionBus, on_change: Callable[[], None]) -> None:
        self.runbooks = runbooks
        self.bus = bus
        self.on_change = on_change  # re-register prompts, refresh the instructions: before clients re-list
        self.connections: weakref.WeakSet[Connection] = weakref.WeakSet()
        self.watching = False
        # What clients of this mode were last shown: a change to a runbook hidden in it is not announced.
        self.notified_view: Hashable = runbooks.view(runbooks.retrieval.catalog()) if runbooks.configured else None
        self.notifications_sent = 0

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            # SDK internals (the same access identity.py makes): the per-request ServerSession holds the client's
            # Connection, whose standalone channel carries handshake-era notifications.
            self.connections.add(ctx.session._connection)
        return await call_next(ctx)

    async def watch_forever(self) -> None:
        """One watcher per server (the lifespan may be entered once per connection)."""
        if self.watching or not self.runbooks.configured:  # no directory, nothing to watch
            return
        library = self.runbooks.retrieval.library
        assert library is not None
        self.watching = True
        try:
            while True:
                await anyio.sleep(max(WATCH_INTERVAL, library.poll_interval()))
                try:
                    await self.notify_if_changed()
                except Exception:  # a failed scan or send must not end the watcher
                    logger.exception("runbook watcher")
        finally:
            self.watching = False

    async def notify_if_changed(self) -> None:
        library = self.runbooks.retrieval.library
        assert library is not None
        view = self.runbooks.view(await anyio.to_thread.run_sync(library.refresh))
        if view == self.notified_view:
            return
        first_seen = time.monotonic()
        while time.monotonic() - first_seen < MAX_DEBOUNCE:
            await anyio.sleep(QUIET)
            settled = self.runbooks.view(await anyio.to_thread.run_sync(library.refresh))
            if settled == view:
                break
            view = settled
        self.on_change()
        self.notified_view = view
        await self.notify()

    async def notify(self) -> None:
        await self.bus.publish(PromptsListChanged())
        await self.bus.publish(ResourcesListChanged())
        for connection in list(self.connections):
            with anyio.move_on_after(SEND_TIMEOUT):
                await connection.send_prompt_list_changed()
                await connection.send_resource_list_changed()
        self.notifications_sent += 1
