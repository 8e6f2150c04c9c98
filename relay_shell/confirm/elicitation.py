"""Asking the human through MCP elicitation (RELAY_SHELL_CONFIRM_TIER3=elicit): an `elicitation/create`
request during the call (2025-11-25), or an `input_required` answer with the question that the client
repeats with the human's answer (2026-07-28, SEP-2322). Only an accept with `confirm: true` is a yes.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import anyio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from relay_shell.errors import InputRequired
from relay_shell.plan import Outcome

logger = logging.getLogger("relay_shell")
Answer = Literal["accept", "decline", "unconfirmed", "cancel", "timeout", "stale", "failed"]
ANSWER_KEY = "confirm"  # the key of our question in input_requests / input_responses

# An elicited tier-3 confirmation: the outcome of its record, and why the call did not run, by the answer.
ANSWER_OUTCOMES: dict[Answer, Outcome] = {
    "accept": "ok",
    "decline": "denied",
    "unconfirmed": "denied",
    "cancel": "cancelled",
    "timeout": "cancelled",
    "stale": "denied",
    "failed": "error",
}
REFUSED_BECAUSE: dict[Answer, str] = {
    "decline": "the human declined this call when asked; nothing ran. Do not retry it or a variant: ask the human",
    "unconfirmed": "the human answered without confirm=true; nothing ran",
    "cancel": "the human dismissed the confirmation without answering; nothing ran",
    "timeout": "no answer from the human in time (RELAY_SHELL_CONFIRM_TTL); nothing ran",
    "stale": "this answer belongs to no open question (already used, expired, or about another call); nothing "
    "ran: repeat the call to be asked again",
}


def can_elicit(request_context: ServerRequestContext[Any, Any]) -> bool:
    """True when the client declared form-mode elicitation (an empty `elicitation: {}` means form)."""
    capabilities = request_context.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    return elicitation.form is not None or elicitation.url is None


APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confirm": {
            "type": "boolean",
            "title": "Run this irreversible call",
            "description": "true runs the call once, as shown; anything else runs nothing",
            "default": False,
        }
    },
    "required": ["confirm"],
}


def _question(summary: str) -> str:
    return (
        "An AI client asks relay-shell to run an irreversible (tier 3) call. Run it?\n\n"
        f"{summary}\n\nThis is everything it sends; it runs once, exactly as shown. Decline if you are not sure."
    )


def _answer(result: ElicitResult) -> Answer:
    """Only an accept with `confirm: true` is a yes."""
    if result.action == "accept":
        return "accept" if (result.content or {}).get("confirm") is True else "unconfirmed"
    return result.action


async def ask_human(request_context: ServerRequestContext[Any, Any], summary: str, timeout: float) -> Answer:
    """Ask the human through the client during the call (2025-11-25 era), for at most `timeout` seconds."""
    try:
        with anyio.fail_after(timeout):
            result = await request_context.session.elicit_form(
                _question(summary), APPROVAL_SCHEMA, related_request_id=request_context.request_id
            )
    except TimeoutError:
        return "timeout"
    except MCPError:  # the client refused the request or has no back channel: it cannot ask its human
        return "failed"
    except Exception:  # a malformed answer or a closed stream: no answer is not a yes
        logger.warning("elicitation failed", exc_info=True)
        return "failed"
    return _answer(result)


def is_modern(request_context: ServerRequestContext[Any, Any]) -> bool:
    """A 2026-07-28 request: no server-to-client requests, questions go in an `input_required` result."""
    return request_context.protocol_version in MODERN_PROTOCOL_VERSIONS


def question_round(summary: str, state: str) -> InputRequired:
    form = ElicitRequestFormParams(message=_question(summary), requested_schema=APPROVAL_SCHEMA)
    question = ElicitRequest(params=form)
    return InputRequired(InputRequiredResult(input_requests={ANSWER_KEY: question}, request_state=state))


def round_state(request_context: ServerRequestContext[Any, Any] | None) -> str | None:
    """Our state id when this call repeats a question round (the SDK has verified and unsealed it)."""
    params = request_context.params if request_context is not None else None
    state = params.get("requestState") if params else None
    return state if isinstance(state, str) else None


def round_answer(request_context: ServerRequestContext[Any, Any]) -> Answer:
    """The human's answer carried by the repeated call; a missing or malformed one is no answer."""
    responses = (request_context.params or {}).get("inputResponses")
    response = responses.get(ANSWER_KEY) if isinstance(responses, dict) else None
    try:
        return _answer(ElicitResult.model_validate(response))
    except Exception:
        return "failed"
