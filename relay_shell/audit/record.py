"""How call arguments appear in an audit record: redacted, and long strings kept as head + tail + length +
SHA-256 so a payload cannot hide behind padding and the record stays small."""

from __future__ import annotations

import hashlib
from typing import Any

from relay_shell.capture import CapturedText

_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1
LONG_STRING = 1024  # characters; longer argument strings are summarised
KEEP_CHARS = 256  # characters of head and of tail kept from a long string


def audit_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    # Imported at the first record, not at startup: compiling the redaction patterns takes ~9 ms, which a
    # client waiting for `initialize` should not wait for.
    from relay_shell.audit.redact import redact_value

    redacted = redact_value(arguments)
    assert isinstance(redacted, dict)
    return {name: _summarise(value) for name, value in redacted.items()}


def redact_text(text: str) -> str:
    from relay_shell.audit.redact import redact

    return redact(text)


def _summarise(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and not _INT64_MIN <= value <= _UINT64_MAX:
        return str(value)  # JSON allows any integer; the log's encoder, like most readers, stops at 64 bits
    if isinstance(value, str) and len(value) > LONG_STRING:
        # The digest is over the redacted text: it proves what ran without becoming a guessing oracle for
        # a secret inside it (an auditor holding the script redacts it the same way and compares).
        return {
            "head": value[:KEEP_CHARS],
            "tail": value[-KEEP_CHARS:],
            "len": len(value),
            "sha256": hashlib.sha256(value.encode("utf-8", errors="surrogatepass")).hexdigest(),
        }
    if isinstance(value, dict):
        return {key: _summarise(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_summarise(item) for item in value]
    return value


def output_digests(returned_text: str, captured: CapturedText) -> dict[str, Any]:
    """What a record keeps of a call's output: digests and lengths of the text returned and of every byte
    produced, never the output itself."""
    returned = returned_text.encode("utf-8", errors="surrogatepass")
    return {
        "output_sha256": hashlib.sha256(returned).hexdigest(),
        "output_len": len(returned),
        "raw_sha256": captured.sha256,
        "raw_len": captured.produced_bytes,
    }
