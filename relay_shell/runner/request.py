"""One request as the runner and the tool functions see it, read from the SDK's request context once: who is
calling (the audit record's client), who owns what the call opens (sessions, forwards; jobs and kept outputs), and
the arguments as the client sent them and, for a tool call, as the tool received them (defaults filled in)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from mcp.server.context import ServerRequestContext

from relay_shell.identity import Identity, identify, job_owner_of, owner_of

RequestContext = ServerRequestContext[Any, Any] | None


@dataclass
class CallRequest:
    context: RequestContext  # None outside any request (the server's own work, tests)
    transport: str  # "stdio" or "http": the first half of the record's client_id
    tool: str = ""  # the tool a tools/call names, as sent ("" for prompts and resources)
    arguments: dict[str, Any] = field(default_factory=dict)  # as sent
    # As the tool received them, defaults filled in (the call router validated them): a tier-3 confirmation and the
    # briefing gate bind a call by these, so `timeout` omitted and `timeout=60` are the same call.
    validated: dict[str, Any] | None = None

    @classmethod
    def read(
        cls, context: RequestContext, transport: str, tool: str = "", validated: dict[str, Any] | None = None
    ) -> CallRequest:
        return cls(context, transport, tool, sent_arguments(context), validated)

    @functools.cached_property
    def identity(self) -> Identity:
        return identify(self.context, self.transport)

    @functools.cached_property
    def owner(self) -> str:
        return owner_of(self.context)

    @functools.cached_property
    def job_owner(self) -> str:
        """Who owns the jobs and kept outputs this call opens or reads (over HTTP, the principal: adr/0028)."""
        return job_owner_of(self.context)

    def call_arguments(self) -> dict[str, Any]:
        """The arguments a call is bound by: as the tool received them, else (never validated) as sent, which only
        binds more strictly."""
        return self.validated if self.validated is not None else self.arguments

    async def report_progress(self, progress: float, total: float | None, message: str) -> None:
        """A progress notification; the SDK sends it only when the client asked for progress (a progress token)."""
        if self.context is not None:
            await self.context.session.report_progress(progress, total, message)


def sent_arguments(context: RequestContext) -> dict[str, Any]:
    """A request's arguments as sent: a tools/call's or prompts/get's `arguments`, a resources/read's `uri`."""
    if context is None or context.params is None:
        return {}
    params = context.params
    arguments = params.get("arguments")
    if isinstance(arguments, dict):
        return dict(arguments)
    # prompts/get has arguments, resources/read has a uri
    return {key: value for key, value in params.items() if key in ("uri", "name") and isinstance(value, str)}
