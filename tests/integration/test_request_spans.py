"""The SDK's OpenTelemetry span per request: left out while no tracer provider is installed (every span would be a
no-op), kept, with its spans, when one is (adr/0030 Round 8). The provider is global to a process and set once, so
the second case runs in a child process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.request_state import RequestStateBoundary

from relay_shell.audit.log import AuditLog
from relay_shell.server import build_server
from relay_shell.settings.model import Settings
from relay_shell.surface.router import ToolCallRouter


def test_no_span_middleware_without_a_tracer_provider(tmp_path: Path) -> None:
    settings = Settings(audit={"audit_path": tmp_path / "audit.jsonl"})
    assembly = build_server(settings, AuditLog(settings.audit.audit_path))
    kinds = [type(layer) for layer in assembly.mcp.middleware]
    assert OpenTelemetryMiddleware not in kinds
    # Everything else is there, in the SDK's order: its request-state boundary outermost, then ours.
    assert kinds[0] is RequestStateBoundary and ToolCallRouter in kinds


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import anyio
    from mcp import Client
    from mcp.server._otel import OpenTelemetryMiddleware
    from opentelemetry import trace

    class Tracer(trace.Tracer):
        def __init__(self, names):
            self.names = names

        def start_span(self, name, context=None, *args, **kwargs):
            self.names.append(name)
            return trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)

        def start_as_current_span(self, name, context=None, *args, **kwargs):
            self.names.append(name)
            return trace.use_span(trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT), end_on_exit=True)

    class Provider(trace.TracerProvider):
        def __init__(self):
            self.names = []

        def get_tracer(self, *args, **kwargs):
            return Tracer(self.names)

    provider = Provider()
    trace.set_tracer_provider(provider)

    from relay_shell.audit.log import AuditLog
    from relay_shell.server import build_server
    from relay_shell.settings.model import Settings

    async def main():
        path = Path(sys.argv[1]) / "audit.jsonl"
        log = AuditLog(path)
        log.open()
        assembly = build_server(Settings(audit={"audit_path": path}), log)
        assert any(isinstance(layer, OpenTelemetryMiddleware) for layer in assembly.mcp.middleware)
        try:
            async with Client(assembly.mcp, mode="legacy") as client:
                result = await client.call_tool("shell_exec", {"command": "true"})
                assert not result.is_error, result
        finally:
            await assembly.shutdown()
            log.close()
        print("spans:", provider.names)

    anyio.run(main)
    """
)


def test_the_spans_are_made_when_a_tracer_provider_is_installed(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert "'tools/call shell_exec'" in child.stdout, child.stdout
