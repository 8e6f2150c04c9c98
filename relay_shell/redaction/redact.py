"""Secret redaction for audit records.

Every string argument of every tool call passes through `redact` before it is written to the audit log, so
two properties matter more than cleverness:

* Names survive, values do not: `DB_PASSWORD=[REDACTED]`, `--token [REDACTED]`, `Authorization: Bearer
  [REDACTED]`, `https://user:[REDACTED]@host/`. An auditor sees *which* secret was passed, never the secret.
* Time is linear in the input, whatever the input. Arguments can be megabyte scripts written by an adversary,
  and Python's `re` backtracks. Every pattern below is built so that a match attempt can only start at the
  beginning of a run (a negative lookbehind on the run's own characters), runs are consumed with possessive
  quantifiers (`++`, `*+`) so a failed attempt never retries shorter prefixes, and every loop resumes
  *after* what it has examined. The comment on each pattern says why it is linear; the tests time each one
  on adversarial megabytes.

Redaction is a series of passes over the text, most specific first: private key blocks, URL credentials,
provider token formats, Authorization headers, named values (KEY=value, "key": value, --flag value), and
options that are passwords only for particular tools (mysql -p). Each pass replaces secrets with text that
no pass matches again in a different way, so `redact(redact(x)) == redact(x)`.
"""

from __future__ import annotations

from relay_shell.redaction.code import mark_code, names_run_as_code, restore_code
from relay_shell.redaction.named_values import (
    redact_config_set,
    redact_named_values,
    redact_netrc,
    redact_xml_elements,
)
from relay_shell.redaction.private_keys import redact_private_keys
from relay_shell.redaction.secret_names import SECRET_HEADER_NAMES, is_secret_name
from relay_shell.redaction.tokens import redact_authorization_headers, redact_provider_tokens
from relay_shell.redaction.tool_options import (
    NO_ATTACHED_VALUES,
    TOOL_SECRET_OPTIONS,
    WHOLE,
    WRAPPERS,
    redact_tool_options,
)
from relay_shell.redaction.urls import redact_path_credentials, redact_url_credentials, redact_webhooks
from relay_shell.redaction.values import REDACTED, mask_user_password, redact_secret_code_data
from relay_shell.redaction.windows import redact_windows

# Short texts that redaction left as they were (argument names, session ids, `until` patterns: the same few on
# every call): redacting them again gives them again, so the dozen passes are skipped. Only texts the log
# writes in clear anyway are kept here, never one a pass changed, nor an argv item masked for its position
# (`_redact_argv` takes those out again): a secret is not kept in memory for this.
_UNCHANGED: dict[str, None] = {}
_UNCHANGED_MAX_TEXT = 256  # characters
_UNCHANGED_MAX_ENTRIES = 4096  # then it starts over: bounded memory, whatever the calls


def redact(text: str) -> str:
    """Return text with secrets replaced by [REDACTED], keeping the key/flag names so an auditor
    sees which secret was passed (e.g. 'DB_PASSWORD=[REDACTED]', '--token [REDACTED]',
    'Authorization: Bearer [REDACTED]', 'https://user:[REDACTED]@host/', '[REDACTED PRIVATE KEY]')."""
    if text in _UNCHANGED:
        return text
    redacted = _redact_all(text)
    if redacted == text and len(text) <= _UNCHANGED_MAX_TEXT:
        if len(_UNCHANGED) >= _UNCHANGED_MAX_ENTRIES:
            _UNCHANGED.clear()
        _UNCHANGED[text] = None
    return redacted


def _redact_all(text: str) -> str:
    # Code the shell runs is bracketed first, so no pass masks it as a secret (code.py).
    marked = mark_code(text)
    if marked is None:
        return _passes(text)
    text, originals = marked
    text = redact_secret_code_data(_passes(text))
    return restore_code(text, originals)


def _passes(text: str) -> str:
    text = redact_private_keys(text)
    text = redact_url_credentials(text)
    text = redact_path_credentials(text)
    text = redact_webhooks(text)
    text = redact_provider_tokens(text)
    text = redact_authorization_headers(text)
    text = redact_windows(text)
    text = redact_named_values(text)
    text = redact_config_set(text)
    text = redact_xml_elements(text)
    text = redact_netrc(text)
    # Last: which tool an option belongs to depends on the tool names still in the text, and the passes
    # above may redact one (inside a value). Running last keeps redact(redact(x)) == redact(x).
    return redact_tool_options(text)


def redact_value(value: object) -> object:
    """Recursively redact every str in a JSON-like value (dict/list/str/other scalars unchanged).
    For dict entries whose KEY itself names a secret (password, token, secret, api_key, ...) the
    whole value is replaced by REDACTED (e.g. an env overlay {"DB_PASSWORD": "x"})."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        redacted = {_redact_key(key, value): _redact_entry(key, item) for key, item in value.items()}
        overlay, masked = value.get("env"), redacted.get("env")
        if isinstance(overlay, dict) and isinstance(masked, dict):
            # An overlay variable the call's text runs as code (`eval "$SECRET_KEY"`) is code, not a secret.
            texts = [text for text in (value.get("command"), value.get("script")) if isinstance(text, str)]
            run: frozenset[str] = frozenset().union(*map(names_run_as_code, texts)) if texts else frozenset()
            for key in run.intersection(overlay):
                if isinstance(overlay[key], str):
                    masked[_redact_key(key, overlay)] = redact(overlay[key])
        return redacted
    if isinstance(value, list):
        return _redact_argv(value)
    if isinstance(value, tuple):
        return tuple(_redact_argv(list(value)))
    return value


def _redact_key(key: object, mapping: dict[object, object]) -> object:
    """A key that is itself a secret (a provider token used as an env overlay's *name*) is redacted too; a
    number keeps redacted keys apart, so no entry is lost."""
    if not isinstance(key, str):
        return key
    redacted = redact(key)
    if redacted == key:
        return key
    position = list(mapping).index(key)
    return redacted if position == 0 else f"{redacted} #{position}"


def _redact_entry(key: object, item: object) -> object:
    # None and booleans carry no secret ({"PASSWORD": null} unsets a variable; {"use_token": true}).
    carries_secret = item is not None and not isinstance(item, bool)
    if carries_secret and isinstance(key, str) and (is_secret_name(key) or key.lower() in SECRET_HEADER_NAMES):
        return REDACTED
    return redact_value(item)


def _redact_argv(items: list[object]) -> list[object]:
    """Redact each item, and the item after a secret flag: in an argv, `--password` and its value are
    separate strings (["mysql", "-u", "root", "-p", "x"], ["curl", "-u", "me:pw", url])."""
    redacted = [redact_value(item) for item in items]
    tool: str | None = None
    secret_options: dict[str, str] = {}
    for index, item in enumerate(items):
        if not isinstance(item, str):
            continue
        if (named_tool := _argv_tool(items, index)) is not None:
            tool, secret_options = named_tool, TOOL_SECRET_OPTIONS[named_tool]
            continue
        attached = item[:2] in secret_options and item[1:2] != "-" and tool not in NO_ATTACHED_VALUES
        if item not in secret_options and len(item) > 2 and attached:
            # The value is attached: "-psecret".
            kind = secret_options[item[:2]]
            target, prefix, word = index, item[:2], item[2:]
        elif item in secret_options or (item.startswith("-") and "=" not in item and is_secret_name(item)):
            # The value is the next item: ["-p", "x"], ["--password", "x"].
            kind = secret_options.get(item, WHOLE)
            following = items[index + 1] if index + 1 < len(items) else None
            if not isinstance(following, str) or not following or following.startswith("-"):
                continue
            target, prefix, word = index + 1, "", following
        else:
            continue
        masked = REDACTED if kind == WHOLE else mask_user_password(word)
        if masked is not None:
            redacted[target] = prefix + masked
            # redact() saw the bare value as plain text and remembered it: a secret is not kept in memory.
            _UNCHANGED.pop(prefix + word, None)
        if tool in WRAPPERS:
            secret_options = {}  # sshpass's -p is done; a -p in the wrapped command is its own (ssh: a port)
    return redacted


def _argv_tool(items: list[object], index: int) -> str | None:
    """The tool whose name ends at items[index]: "mysql", "/usr/bin/mysql", or "docker", "login"."""
    for length in (1, 2, 3):
        start = index - length + 1
        words = items[start : index + 1] if start >= 0 else []
        if not words or not all(isinstance(word, str) for word in words):
            return None
        names = [str(word) for word in words]
        candidate = " ".join([names[0].rsplit("/", 1)[-1], *names[1:]])
        if candidate in TOOL_SECRET_OPTIONS:
            return candidate
    return None
