"""Workflow prompts and argument completion.

The prompts are data (`PROMPTS` in `workflows.py`): name, title, description, string arguments, the tools each
workflow guides, the policy modes it is offered in, and its text. They are validated once when the server is built, so a
malformed definition stops startup with a message naming the prompt and the field.

`prompts/get` is checked strictly before the SDK sees it (`WorkflowPrompts.__call__`, a server middleware):
an unknown prompt, a prompt the policy mode hides, unknown or missing arguments and non-string values are an
MCP invalid-params error (-32602) naming the argument, and an audited refusal. A valid fetch renders text and
nothing else (no process, no connection) and goes through the runner's tier-0 helper (`prompt:<name>`).

Argument values are user data: they are concatenated into a labeled section with every line quoted by
`| `, never formatted as a template. The section's structure lines are the only lines there that do not start
with `| `, so a value cannot close the section, open another, or pass for the workflow text.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts import Prompt
from mcp.server.mcpserver.prompts.base import PromptArgument
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    Completion,
    CompletionArgument,
    CompletionContext,
    PromptReference,
    ResourceTemplateReference,
)

from relay_shell.surface.workflows import (
    ALL_MODES,
    CLOSING,
    COMPLETION_SOURCES,
    INTERACTIVE_PROGRAMS,
    PROMPTS,
    USER_DATA_RULES,
    CompletionSource,
    PromptSpec,
)

if TYPE_CHECKING:
    from relay_shell.runner.context import ContextPulls
    from relay_shell.ssh.access import SshAccess

logger = logging.getLogger("relay_shell")


NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*\Z")
MAX_VALUE_CHARS = 4096  # per argument value: a prompt is bounded by the output cap; a value should not crowd it
MAX_COMPLETIONS = 100  # the MCP limit on completion values per answer
QUOTE = "| "
# The resource template whose `{host}` completes from the inventory like a prompt's `host` argument.
INVENTORY_HOST_TEMPLATE = "relay-shell://inventory/{host}"
CONTEXT_KWARG = "relay_context"  # where the SDK passes the request Context to a prompt; not a valid argument name


class PromptDefinitionError(ValueError):
    """A prompt definition is malformed: the server does not start."""


# -- validation of the definitions (once, at startup) ----------------------------------------------------------


def validate_definitions(definitions: tuple[PromptSpec, ...], tool_names: set[str]) -> dict[str, PromptSpec]:
    """The definitions by name, or PromptDefinitionError naming the prompt and what is wrong with it."""
    catalog: dict[str, PromptSpec] = {}
    for spec in definitions:
        where = f"prompt {spec.name!r}"
        if not isinstance(spec.name, str) or not NAME_PATTERN.match(spec.name):
            raise PromptDefinitionError(f"{where}: name must be lowercase a-z0-9_ starting with a letter")
        if spec.name in catalog:
            raise PromptDefinitionError(f"{where}: defined twice")
        for field_name in ("title", "description", "workflow"):
            value = getattr(spec, field_name)
            if not isinstance(value, str) or not value.strip():
                raise PromptDefinitionError(f"{where}: {field_name} must be a non-empty string")
        if spec.arguments and not spec.purpose.strip():
            raise PromptDefinitionError(f"{where}: a prompt with arguments needs a purpose (the text before them)")
        if not spec.modes or any(mode not in ALL_MODES for mode in spec.modes):
            raise PromptDefinitionError(f"{where}: modes must be a non-empty subset of {', '.join(ALL_MODES)}")
        for tool in spec.tools:
            if tool not in tool_names:
                raise PromptDefinitionError(f"{where}: guides {tool!r}, which is not a registered tool")
            if not re.search(rf"\b{re.escape(tool)}\b", spec.purpose + spec.workflow):
                raise PromptDefinitionError(f"{where}: declares tool {tool!r} but its text never mentions it")
        seen: set[str] = set()
        for argument in spec.arguments:
            what = f"{where}: argument {argument.name!r}"
            if not isinstance(argument.name, str) or not NAME_PATTERN.match(argument.name):
                raise PromptDefinitionError(f"{what}: name must be lowercase a-z0-9_ starting with a letter")
            if argument.name in seen:
                raise PromptDefinitionError(f"{what}: defined twice")
            seen.add(argument.name)
            if not isinstance(argument.description, str) or not argument.description.strip():
                raise PromptDefinitionError(f"{what}: description must be a non-empty string")
            if not isinstance(argument.required, bool):
                raise PromptDefinitionError(f"{what}: required must be true or false")
            if argument.complete is not None and argument.complete not in COMPLETION_SOURCES:
                raise PromptDefinitionError(f"{what}: complete must be one of {', '.join(COMPLETION_SOURCES)}")
        catalog[spec.name] = spec
    return catalog


# -- arguments and rendering -------------------------------------------------------------------------------------


def argument_problems(spec: PromptSpec, arguments: Any) -> list[str]:
    """What is wrong with the arguments of a prompts/get, one message per argument (empty: they are valid)."""
    allowed = ", ".join(argument.name for argument in spec.arguments) or "none"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return [f"arguments: must be an object of string values (got {_json_type(arguments)}); allowed: {allowed}"]
    known = {argument.name: argument for argument in spec.arguments}
    problems = []
    for name in list(arguments)[:10]:
        if name not in known:
            problems.append(f"arguments.{str(name)[:64]}: unknown argument of {spec.name}; allowed: {allowed}")
    for argument in spec.arguments:
        where = f"arguments.{argument.name}"
        if argument.name not in arguments:
            if argument.required:
                problems.append(f"{where}: is required; allowed: {argument.description}")
            continue
        value = arguments[argument.name]
        if not isinstance(value, str):
            problems.append(f"{where}: must be a string (got {_json_type(value)}); allowed: {argument.description}")
        elif argument.required and not value.strip():
            problems.append(f"{where}: is empty; allowed: a non-empty string ({argument.description})")
        elif len(value) > MAX_VALUE_CHARS:
            problems.append(f"{where}: {len(value)} characters is too long; allowed: at most {MAX_VALUE_CHARS}")
        elif not _encodable(value):
            problems.append(f"{where}: contains an unpaired UTF-16 surrogate; allowed: valid Unicode text")
    return problems


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, as the caller wrote it."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def quote_value(value: str) -> str:
    """Every line of the value prefixed with `| `, its own line breaks kept. Splitting on every line break
    Python knows (\\r, \\v, \\f, \\x1c-\\x1e, \\x85, \\u2028, \\u2029 as well as \\n) means no character a reader
    might take for a new line can start one that is not quoted."""
    lines = value.splitlines(keepends=True)
    quoted = "".join(QUOTE + line for line in lines)
    last = lines[-1]
    return quoted if last != last.splitlines()[0] else quoted + "\n"


def render(spec: PromptSpec, arguments: dict[str, str]) -> str:
    """The prompt text. Argument values are only ever concatenated, quoted, inside the user-data section."""
    if not spec.arguments:
        return spec.workflow
    parts = [f"# {spec.title}\n\n", spec.purpose, "\n\n", USER_DATA_RULES, "\n"]
    for argument in spec.arguments:
        parts.append(f"\n{argument.name} ({'required' if argument.required else 'optional'}):\n")
        value = arguments.get(argument.name) or ""
        parts.append(quote_value(value) if value else "(not given)\n")
    parts.append("\n[end of user data]\n\n")
    parts.append(spec.workflow)
    parts.append(CLOSING)
    return "".join(parts)


# -- completion ----------------------------------------------------------------------------------------------------


def complete_value(source: CompletionSource, value: str, hosts: list[str], groups: list[str]) -> Completion:
    """Prefix completion of one argument value, at most MAX_COMPLETIONS values, with the total that matched.

    `host`: an inventory host, keeping a `user@` the value starts with. `hosts`: the last item of a comma
    list, a host or an `@group`, keeping the items before it. `program`: a common interactive program."""
    lead, partial = "", value
    if source == "host" and value.find("@") > 0:  # user@host: complete the host, keep the user
        user, _, partial = value.rpartition("@")
        lead = user + "@"
        candidates = hosts
    elif source == "hosts":
        head, comma, tail = value.rpartition(",")
        partial = tail.lstrip()
        lead = head + comma + tail[: len(tail) - len(partial)]
        group_names = ["@" + group for group in groups]
        candidates = group_names if partial.startswith("@") else hosts + group_names
    elif source == "host":
        candidates = hosts
    else:
        candidates = list(INTERACTIVE_PROGRAMS)
    folded = partial.casefold()
    matches = sorted({candidate for candidate in candidates if candidate.casefold().startswith(folded)})
    values = [lead + match for match in matches[:MAX_COMPLETIONS]]
    return Completion(values=values, total=len(matches), has_more=len(matches) > MAX_COMPLETIONS)


# -- the MCP surface ---------------------------------------------------------------------------------------------


class WorkflowPrompts:
    """The prompts offered in this server's policy mode: listed through the SDK, checked strictly on
    prompts/get (as server middleware), rendered through the runner's tier-0 helper, and completed."""

    def __init__(
        self,
        pulls: ContextPulls,
        ssh: SshAccess,
        mode: str,
        tool_names: set[str],
        other_sources: Callable[[str, str], CompletionSource | None] | None = None,
        guide_note: str = "",
    ) -> None:
        self.pulls = pulls
        self.guide_note = guide_note  # what this server's operating_guide adds (how readonly is enforced here)
        self.ssh = ssh
        self.mode = mode
        self.catalog = validate_definitions(PROMPTS, tool_names)
        self.visible = {name: spec for name, spec in self.catalog.items() if self.mode in spec.modes}
        self.mcp: MCPServer | None = None
        # Prompts registered elsewhere (the runbooks) name the completion source of an argument here.
        self.other_sources = other_sources

    def register(self, mcp: MCPServer) -> None:
        """Only the prompts this mode admits are listed; completion/complete answers for their arguments."""
        self.mcp = mcp
        for spec in self.visible.values():
            mcp.add_prompt(
                Prompt(
                    name=spec.name,
                    title=spec.title,
                    description=spec.description,
                    arguments=[
                        PromptArgument(name=argument.name, description=argument.description, required=argument.required)
                        for argument in spec.arguments
                    ],
                    fn=self._renderer(spec),
                    context_kwarg=CONTEXT_KWARG,
                )
            )
        mcp.completion()(self.complete)

    def _renderer(self, spec: PromptSpec) -> Any:
        async def render_prompt(**arguments: Any) -> str:
            context: Context = arguments.pop(CONTEXT_KWARG)
            text = render(spec, arguments)
            if spec.name == "operating_guide":
                text += self.guide_note
            try:
                return self.pulls.pull(context.request_context, f"prompt:{spec.name}", text)
            except RuntimeError as exc:  # the audit log failed: fail closed, say why
                raise MCPError(INTERNAL_ERROR, f"prompt {spec.name}: {exc}") from None

        return render_prompt

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "prompts/get" and ctx.request_id is not None and isinstance(ctx.params, dict):
            await self.check(ctx, ctx.params)
        return await call_next(ctx)

    async def check(self, ctx: ServerRequestContext[Any, Any], params: dict[str, Any]) -> None:
        """Refuse (audited, invalid params) a prompts/get that names no visible prompt or has bad arguments."""
        name = params.get("name")
        allowed = ", ".join(self.visible)
        if not isinstance(name, str):
            self._refuse(ctx, "prompt:unknown", "error", f"name: must be a string naming a prompt; allowed: {allowed}")
        spec = self.catalog.get(name)
        if spec is None:
            if self.mcp is not None and name in {prompt.name for prompt in await self.mcp.list_prompts()}:
                return  # registered elsewhere: the SDK serves it
            self._refuse(ctx, "prompt:unknown", "error", f"name: unknown prompt {name[:64]!r}; allowed: {allowed}")
        if spec.name not in self.visible:
            self._refuse(
                ctx,
                f"prompt:{spec.name}",
                "denied",
                f"name: prompt {spec.name!r} is not available in policy mode {self.mode} (it guides "
                f"{', '.join(spec.tools)}; offered in {', '.join(spec.modes)}); allowed: {allowed}",
            )
        problems = argument_problems(spec, params.get("arguments"))
        if problems:
            self._refuse(ctx, f"prompt:{spec.name}", "error", "; ".join(problems))

    def _refuse(
        self, ctx: ServerRequestContext[Any, Any], label: str, outcome: Literal["denied", "error"], message: str
    ) -> NoReturn:
        self.pulls.refuse(ctx, label, outcome, message)
        raise MCPError(INVALID_PARAMS, message)

    async def complete(
        self,
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion | None:
        """Completion is listing-like and reads only the inventory: it is not audited (like prompts/list)."""
        source: CompletionSource | None = None
        if isinstance(ref, PromptReference):
            spec = self.visible.get(ref.name)  # a hidden prompt completes nothing
            found = [item for item in spec.arguments if item.name == argument.name] if spec else []
            source = found[0].complete if found else None
            if spec is None and self.other_sources is not None:
                source = self.other_sources(ref.name, argument.name)
        elif ref.uri == INVENTORY_HOST_TEMPLATE and argument.name == "host":
            source = "host"
        if source is None:
            return None
        hosts: list[str] = []
        groups: list[str] = []
        if source != "program":
            try:
                inventory = self.ssh.get().inventory
                hosts, groups = list(inventory.hosts()), list(inventory.groups())
            except Exception:  # an unreadable inventory completes nothing; ssh_hosts reports why
                logger.warning("inventory unavailable for completion", exc_info=True)
        return complete_value(source, argument.value, hosts, groups)
