"""How values appear in an audit record: redacted, and bounded by one rule for every field (adr/0016).

- a string longer than 1024 characters is kept as head + tail + length + SHA-256 (a payload cannot hide
  behind padding, and the record stays small); a name (an object key: an argument name, an env name) the
  same way, as one string;
- a list or object of more than 65 entries keeps its first 64, then one entry saying how many were left out
  and the SHA-256 of the whole (a 100,000-host list is 64 hosts and a digest);
- nesting deeper than 16 levels is kept as the digest of what is below;
- an integer beyond 64 bits is kept as its digits (the log's encoder, like most readers, stops at 64 bits);
  a lone UTF-16 surrogate as the text `\\udXXX`.

`bound_record` applies this to every field of a record (request ids, targets, reasons, arguments: whatever a
writer put there), and `fit_record` makes a record that is still over `MAX_RECORD_BYTES` fit by replacing
its largest fields with their length and digest. Digests are over the canonical JSON of the redacted value.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from relay_shell.capture import CapturedText

_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1
LONG_STRING = 1024  # characters; longer strings (values and names) are summarised
KEEP_CHARS = 256  # characters of head and of tail kept from a long string
MAX_ENTRIES = 64  # entries of one list or object kept; the rest is one digest
MAX_DEPTH = 16  # levels of nesting kept below a record field; deeper is one digest
MAX_RECORD_BYTES = 64 * 1024  # one encoded record, chain fields and newline included
# Fields that identify and chain a record: never replaced to make it fit (they are small by construction).
_KEPT_FIELDS = frozenset({"v", "ts", "tool", "tier", "denied", "outcome", "seq", "prev", "chain", "phase", "call_id"})
_SURROGATE = re.compile("[\ud800-\udfff]")
# What this module writes in place of a value: bounding it again leaves it as it is.
_SUMMARIES = ({"head", "tail", "len", "sha256"}, {"kept", "len", "sha256"}, {"omitted", "sha256_of_all"})


class BoundedArguments(dict[str, Any]):
    """Arguments as `audit_arguments` made them (redacted and bounded): a record's `args` field that
    `bound_record` need not walk again, for both records of a call. JSON writes it as the dict it is."""


def audit_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    # Imported at the first record, not at startup: compiling the redaction patterns takes ~9 ms, which a
    # client waiting for `initialize` should not wait for.
    from relay_shell.redaction.redact import redact_value

    redacted = redact_value(arguments)
    assert isinstance(redacted, dict)
    bounded = _bound(redacted, 1)  # depth 1: the arguments are one field of the record
    assert isinstance(bounded, dict)
    return BoundedArguments(bounded)


def redact_text(text: str) -> str:
    from relay_shell.redaction.redact import redact

    return redact(text)


def bound_record(record: dict[str, Any]) -> dict[str, Any]:
    """Every field of a record within the shared bound (already bounded values pass unchanged)."""
    bounded = {}
    for name, value in record.items():
        # Nearly every field is a short ASCII name with a short ASCII string, a 64-bit integer, a boolean, null, or
        # arguments `audit_arguments` bounded when it made them, checked inline (no call per field): this runs for
        # both records of every call.
        if not (len(name) <= LONG_STRING and name.isascii()):
            name = _bound_name(name)
        kind = type(value)
        if kind is str:
            plain = len(value) <= LONG_STRING and value.isascii()
        elif kind is int:
            plain = _INT64_MIN <= value <= _UINT64_MAX
        else:
            plain = kind is bool or value is None or kind is BoundedArguments
        bounded[name] = value if plain else _bound(value, 1)
    return bounded


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


def fit_record(record: dict[str, Any], encoded_size: int) -> dict[str, Any]:
    """A record whose encoding (`encoded_size` bytes) is over MAX_RECORD_BYTES, made to fit: its largest
    fields are replaced, largest first, by their length and digest, and `bounded` names them."""
    sizes = sorted(
        ((len(canonical_json(value)), name) for name, value in record.items() if name not in _KEPT_FIELDS),
        reverse=True,
    )
    fitted = dict(record)
    replaced: list[str] = []
    for size, name in sizes:
        if encoded_size <= MAX_RECORD_BYTES - 512:  # room for the `bounded` list and the chain fields
            break
        fitted[name] = {"len": size, "sha256": hashlib.sha256(canonical_json(record[name])).hexdigest()}
        encoded_size -= size - 100
        replaced.append(name)
    fitted["bounded"] = replaced
    return fitted


def canonical_json(value: Any) -> bytes:
    """Sorted-key JSON of any value a record or a call may hold: integers of any length, lone surrogates
    (as escapes), keys that are not strings. For digests, never for the log line itself."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=repr).encode()


def _bound(value: Any, depth: int) -> Any:
    # Exact types first (a record's nested fields, e.g. an end record's `execs`, are plain dicts, lists, short
    # strings and numbers: ~20 values per call); subclasses and other types take the general path below.
    kind = type(value)
    if kind is str:
        return value if len(value) <= LONG_STRING and value.isascii() else _bound_string(value)
    if kind is bool or kind is float or value is None:
        return value
    if kind is int:
        return value if _INT64_MIN <= value <= _UINT64_MAX else str(value)
    if kind is dict:
        return _bound_dict(value, depth)
    if kind is list:
        return _bound_list(value, depth)
    return _bound_other(value, depth)


def _bound_dict(value: dict[Any, Any], depth: int) -> Any:
    if depth >= MAX_DEPTH and value and value.keys() not in _SUMMARIES:
        return _digest_of(value, "nested deeper than the record keeps")
    if len(value) > MAX_ENTRIES + 1:  # 65 entries stay: a bounded value bounds to itself
        bounded = {_bound_name(str(name)): _bound(item, depth + 1) for name, item in list(value.items())[:MAX_ENTRIES]}
        bounded["…"] = _omitted(value, len(value) - MAX_ENTRIES)
        return bounded
    return {
        (name if type(name) is str and len(name) <= LONG_STRING and name.isascii() else _bound_name(str(name))): (
            _bound(item, depth + 1)
        )
        for name, item in value.items()
    }


def _bound_list(value: list[Any] | tuple[Any, ...], depth: int) -> Any:
    if depth >= MAX_DEPTH and value:
        return _digest_of(value, "nested deeper than the record keeps")
    cut = len(value) > MAX_ENTRIES + 1
    bounded_items = [_bound(item, depth + 1) for item in (value[:MAX_ENTRIES] if cut else value)]
    if cut:
        bounded_items.append(_omitted(value, len(value) - MAX_ENTRIES))
    return bounded_items


def _bound_other(value: Any, depth: int) -> Any:
    """Subclasses of the JSON types (a str or int enum, BoundedArguments, a tuple) and everything else (as its
    repr)."""
    if isinstance(value, str):
        return value if len(value) <= LONG_STRING and value.isascii() else _bound_string(value)
    if isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return value if _INT64_MIN <= value <= _UINT64_MAX else str(value)
    if isinstance(value, dict):
        return _bound_dict(value, depth)
    if isinstance(value, list | tuple):
        return _bound_list(value, depth)
    return _bound_string(repr(value))


def _bound_string(value: str) -> Any:
    if len(value) <= LONG_STRING and value.isascii():  # nearly every field: nothing to do
        return value
    if _SURROGATE.search(value):
        value = _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", value)
    if len(value) <= LONG_STRING:
        return value
    # The digest is over the redacted text: it proves what ran without becoming a guessing oracle for a
    # secret inside it (an auditor holding the script redacts it the same way and compares).
    return {
        "head": value[:KEEP_CHARS],
        "tail": value[-KEEP_CHARS:],
        "len": len(value),
        "sha256": hashlib.sha256(value.encode("utf-8")).hexdigest(),
    }


def _bound_name(name: str) -> str:
    if len(name) <= LONG_STRING and name.isascii():
        return name
    bounded = _bound_string(name)
    if isinstance(bounded, str):
        return bounded
    return f"{bounded['head']}…{bounded['tail']} ({bounded['len']} characters, sha256 {bounded['sha256']})"


def _omitted(value: Any, count: int) -> dict[str, Any]:
    return {"omitted": count, "sha256_of_all": hashlib.sha256(canonical_json(value)).hexdigest()}


def _digest_of(value: Any, why: str) -> dict[str, Any]:
    encoded = canonical_json(value)
    return {"kept": why, "len": len(encoded), "sha256": hashlib.sha256(encoded).hexdigest()}
