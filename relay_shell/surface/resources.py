"""Resources. Each read goes through the runner's tier-0 helper (cap, digest record, counter); listing them
does not audit. The prompts, `operating_guide` included, are in surface/prompts.py.

The resource functions are async so that they run on the event loop, like every other audited path: the SDK
runs a plain function in a worker thread, where its audit record would race the loop's records for the
chain's next link."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any

import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from relay_shell.errors import ToolError
from relay_shell.runner.context import ContextPulls
from relay_shell.settings.model import Settings
from relay_shell.ssh.access import SshAccess

RECENT_RECORDS = 50

# Static resources get no Context from the SDK; the server middleware puts the request here so the audit
# record still names the request and the client.
current_request: ContextVar[ServerRequestContext[Any, Any] | None] = ContextVar("current_request", default=None)


def recent_json(audit_path: Path, call_id: str | None = None) -> str:
    """The last RECENT_RECORDS records (of one call, with `call_id`) as JSON. audit/tail.py is imported by the
    first read: an idle server reads no log (adr/0030, Round 5)."""
    from relay_shell.audit.tail import TailFilter, recent_records

    records = recent_records(audit_path, RECENT_RECORDS, TailFilter(call_id=call_id) if call_id is not None else None)
    return orjson.dumps(records, option=orjson.OPT_INDENT_2).decode()


def register_context(mcp: MCPServer, pulls: ContextPulls, settings: Settings, ssh: SshAccess) -> None:
    audit_path = pulls.recorder.audit_log.path

    @mcp.resource(
        "relay-shell://audit/recent",
        name="audit_recent",
        title="Recent audit records",
        description=f"The last {RECENT_RECORDS} audit records as JSON (redacted arguments and digests only).",
        mime_type="application/json",
    )
    async def audit_recent() -> str:
        return pulls.pull(current_request.get(), "resource:audit_recent", recent_json(audit_path))

    @mcp.resource(
        "relay-shell://audit/recent{?call_id}",
        name="audit_recent_call",
        title="The audit records of one call",
        description="The records of one call (its start and end), by the `call_id` every call record carries, "
        "as JSON: relay-shell://audit/recent?call_id=3f9a1b2c4d5e-17",
        mime_type="application/json",
    )
    async def audit_recent_call(call_id: str = "") -> str:
        from relay_shell.diagnostics import check_call_id

        try:
            check_call_id(call_id)
        except ToolError as exc:  # a typo is an error naming the argument, audited like a refused prompt
            pulls.refuse(current_request.get(), "resource:audit_recent", "error", str(exc))
            raise ResourceError(str(exc)) from None
        return pulls.pull(current_request.get(), "resource:audit_recent", recent_json(audit_path, call_id))

    @mcp.resource(
        "relay-shell://inventory",
        name="inventory",
        title="SSH inventory",
        description="Every SSH host (address, port, user, jump, groups, source), the groups, and load problems.",
        mime_type="application/json",
    )
    async def inventory() -> str:
        from relay_shell.ssh.hosts_plan import inventory_view

        text = orjson.dumps(inventory_view(ssh.get()), option=orjson.OPT_INDENT_2).decode()
        return pulls.pull(current_request.get(), "resource:inventory", text)

    @mcp.resource(
        "relay-shell://inventory/{host}",
        name="inventory_host",
        title="One SSH host, resolved",
        description="How a call to this host connects: address, port, user, key, jump chain, host-key mode, "
        "whether its key is known.",
        mime_type="application/json",
    )
    async def inventory_host(host: str) -> str:
        from relay_shell.ssh.hosts_plan import host_view

        return pulls.pull(current_request.get(), "resource:inventory_host", host_view(ssh.get(), host))

    @mcp.resource(
        "relay-shell://ssh-config",
        name="ssh_config",
        title="OpenSSH client config",
        description="The ssh_config files relay-shell reads (the main file and its Includes), as text.",
        mime_type="text/plain",
    )
    async def ssh_config() -> str:
        parts = []
        inventory_file = settings.ssh.inventory
        # The files the inventory loaded, less the inventory file itself: ssh_config and what it includes.
        for path in ssh.get().inventory.files():
            if inventory_file is not None and path == inventory_file:
                continue
            try:
                parts.append(f"# file: {path}\n{path.read_text(errors='replace')}")
            except OSError as exc:
                parts.append(f"# file: {path}: unreadable ({exc.strerror})")
        text = "\n".join(parts) if parts else f"# no ssh_config file ({settings.ssh.ssh_config})\n"
        return pulls.pull(current_request.get(), "resource:ssh_config", text)
