"""What the fuzzer sends: tool calls generated from the tools' inputSchemas, prompt/resource/completion
requests, and malformed JSON-RPC messages, each a `Probe` that says what the answer must be.

What JSON-RPC 2.0 and MCP say an answer must be (adr/0016):
- a request (it has an `id` that is a string or an integer) gets exactly one answer with that id, an error
  when the server cannot serve it (a message nested too deep or a number too long for it, a wrong shape);
- an id that is a number but no integer (`1.5`, `1e3`) gets an error with that id; a message that is not JSON
  at all (unless its id shows at its head or tail), or whose id is a boolean, an object, an array or null
  (MCP forbids null ids), gets one error with `id: null`;
- notifications and responses get no answer;
- a tools/call that reaches the server (readable within the server's bounds) gets a result, never a
  JSON-RPC error; every tools/call that takes an answer, refused ones included, has exactly one audit
  record (checks.py `must_be_audited`: by its id, or by the digest of the message when it has no id a record
  can be found by), also one a JSON-RPC reader refuses for what frames it (a byte order mark, junk before or
  after it, UTF-16, a method spelled with escapes), and each call of a batch; prompts/get and resources/read
  are recorded when served.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

from relay_shell.wire import MAX_INTEGER_DIGITS, MAX_NESTING
from tests.fuzz.values import (
    SAFE_HOSTS,
    UNICODE_EDGES,
    Deep,
    Raw,
    encode,
    hosts_value,
    huge_integer,
    shape,
    string_for,
    text,
    unicode_text,
)

PROTOCOL = "2025-11-25"
MODERN = "2026-07-28"
ENVELOPE_KEYS = (
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/clientCapabilities",
)


@dataclass
class Probe:
    """One message and what its answer must be.

    expect: "result" (a result with this id, not an error), "answer" (a result or an error with this id),
    "error" (an error with this id), "null" (one error with id null), "null_or_id", "none" (no answer),
    "none_or_null" (over HTTP, a refused notification may get an error without an id).
    audited: "once" (exactly one audit record for this id), "once_if_result", "at_most_once".
    """

    line: bytes
    method: str
    expect: str
    key: tuple[str, str] | None = None  # the id as the client wrote it: ("int", digits) or ("str", text)
    audited: str = "at_most_once"  # tools/call probes that take an answer: always once (checks.must_be_audited)
    tool: str | None = None
    kind: str = ""  # how it was generated, for the report
    extra: dict[str, Any] = field(default_factory=dict)
    record_id: str | None = None  # the id as the record keeps it, when that is not the key's text (`1e3`)
    records: int = 1  # audit records the message must have when it is audited once (a batch: one per call)


def id_key(value: Any) -> tuple[str, str] | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return ("int", str(value))
    if isinstance(value, Raw):
        return ("int", value.text)
    return ("str", str(value))


def envelope(era: str, client_name: str) -> dict[str, Any]:
    """The 2026-07-28 per-request `_meta` (protocol version, client info, capabilities)."""
    if era != "modern":
        return {}
    return {
        "_meta": {
            ENVELOPE_KEYS[0]: MODERN,
            ENVELOPE_KEYS[1]: {"name": client_name, "version": "1"},
            ENVELOPE_KEYS[2]: {},
        }
    }


def request(request_id: Any, method: str, params: dict[str, Any] | None, era: str, client: str) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None or era == "modern":
        message["params"] = {**(params or {}), **envelope(era, client)}
    return encode(message).encode()


def within_bounds(value: Any, levels_above: int) -> bool:
    """Whether a server reads a message holding `value` inside `levels_above` containers (the message object
    around `params` is one): no value may sit inside more than MAX_NESTING containers (adr/0016)."""
    depth, digits = shape(value)
    return depth + levels_above <= MAX_NESTING and digits <= MAX_INTEGER_DIGITS


class CallFactory:
    """Tool calls from the tools' own inputSchemas: valid, boundary, wrong-type, odd names, nested, huge,
    unicode and OS-level edge cases, and broken envelopes."""

    MODES: ClassVar[list[tuple[str, int]]] = [
        ("valid", 30),
        ("boundary", 14),
        ("wrong_type", 12),
        ("names", 6),
        ("nested", 7),
        ("huge", 5),
        ("unicode", 14),
        ("os", 6),
        ("envelope", 6),
    ]

    def __init__(self, tools: list[dict[str, Any]], rng: random.Random, huge_bytes: int, era: str, client: str):
        self.tools = [tool for tool in tools if isinstance(tool.get("inputSchema"), dict)]
        self.rng = rng
        self.huge_bytes = huge_bytes
        self.era = era
        self.client = client
        self.modes = [mode for mode, weight in self.MODES for _ in range(weight)]

    def tool_call(self, request_id: Any) -> Probe:
        tool = self.rng.choice(self.tools)
        mode = self.rng.choice(self.modes)
        name: Any = tool["name"]
        schema = tool["inputSchema"]
        arguments: Any = self.arguments(schema, mode)
        if mode == "envelope":
            name, arguments = self.broken_envelope(name, arguments)
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if mode == "envelope" and self.rng.random() < 0.15:
            params = {}  # no name, no arguments
            name = None
        line = request(request_id, "tools/call", params, self.era, self.client)
        readable = within_bounds(params, levels_above=1)
        return Probe(
            line=line,
            method="tools/call",
            expect="result" if readable else "answer",  # either way: one audit record (refusals included)
            key=id_key(request_id),
            audited="once",
            tool=name if isinstance(name, str) and name == tool["name"] else None,  # another name: no schema
            kind=f"tool:{mode}",
        )

    # -- argument values by schema ------------------------------------------------------------------------

    def arguments(self, schema: dict[str, Any], mode: str) -> dict[str, Any]:
        properties: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        arguments: dict[str, Any] = {}
        for name, spec in properties.items():
            if name in required or self.rng.random() < 0.4:
                arguments[name] = self.value(name, spec, hostile=mode not in ("valid",))
        if not properties:
            return arguments
        names = list(properties)
        target = self.rng.choice(names)
        if mode == "boundary":
            arguments[target] = self.boundary(properties[target])
        elif mode == "wrong_type":
            arguments[target] = self.wrong_type(properties[target])
        elif mode == "names":
            arguments.update(self.odd_names())
            if required and self.rng.random() < 0.3:
                arguments.pop(self.rng.choice(sorted(required)), None)
        elif mode == "nested":
            arguments[target] = self.nested()
        elif mode == "huge":
            arguments[target] = self.huge(properties[target])
        elif mode == "unicode":
            arguments[target] = unicode_text(self.rng) if self.rng.random() < 0.8 else {unicode_text(self.rng): "x"}
            if self.rng.random() < 0.2:
                arguments[self.rng.choice(UNICODE_EDGES)] = "x"  # a name that is not text
        elif mode == "os":
            arguments[target] = self.rng.choice(
                ["/tmp/a\x00b", "\x00", "/" + "d" * 5000, "\ud800/x", "/proc/self/mem", "/dev/zero", "~root/\x00"]
            )
        return arguments

    def value(self, name: str, spec: dict[str, Any], hostile: bool) -> Any:
        kinds = _types(spec)
        kind = self.rng.choice(kinds) if kinds else "string"
        if name == "hosts" and kind in ("string", "array"):
            return hosts_value(self.rng, hostile and self.rng.random() < 0.3)
        if kind == "null":
            return None
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "integer":
            return self.rng.choice([1, 2, 10, 80, 256, 1024, 65536]) if name != "port" else 1
        if kind == "number":
            return self.rng.choice([0.1, 0.5, 1, 2.5])
        if kind == "array":
            item = spec.get("items") or next(
                (option.get("items") for option in spec.get("anyOf", []) if "items" in option), {}
            )
            return [self.value(name, item or {"type": "string"}, hostile) for _ in range(self.rng.randint(0, 3))]
        if kind == "object":
            return self.env(hostile)
        return string_for(name, self.rng, hostile and self.rng.random() < 0.5)

    def env(self, hostile: bool) -> dict[str, Any]:
        env: dict[str, Any] = {"LANG": "C"}
        if hostile:
            env[self.rng.choice(["", "A=B", "PATH", "LD_PRELOAD", "X\x00Y", "\ud800", "É"])] = self.rng.choice(
                ["x", None, "\x00", "\ud800", "/tmp/evil.so"]
            )
        return env

    def boundary(self, spec: dict[str, Any]) -> Any:
        kinds = _types(spec)
        if "integer" in kinds or "number" in kinds:
            return self.rng.choice(
                [
                    0,
                    -1,
                    1,
                    2**31,
                    2**63 - 1,
                    2**63,
                    2**64,
                    -(2**63) - 1,
                    2**70,
                    10**400,
                    -(10**400),
                    huge_integer(MAX_INTEGER_DIGITS),  # the longest integer the server reads
                    0.0,
                    -0.0,
                    1e-300,
                    1e308,
                    Raw("1e309"),
                    Raw("-1e309"),
                    Raw("1E400"),
                    Raw("0.1e-400"),
                    Raw("1" * 400 + ".5", digits=400),
                ]
            )
        if "string" in kinds:
            return self.rng.choice(["", " ", "\t", "x" * 1025, "-", "--", "0", "null", "true", "[]", "{}"])
        if "array" in kinds:
            return self.rng.choice([[], [""], [None], [[]], ["x"] * 300])
        if "boolean" in kinds:
            return self.rng.choice([0, 1, "true", "false", "yes"])
        return None

    def wrong_type(self, spec: dict[str, Any]) -> Any:
        kinds = set(_types(spec))
        options = [
            ("string", "12"),
            ("integer", self.rng.choice([12, 2**70, -(2**64)])),
            ("number", 1.5),
            ("boolean", True),
            ("array", ["a", 1]),
            ("object", {"a": 1}),
            ("null", None),
        ]
        wrong = [
            value for kind, value in options if kind not in kinds and not (kind == "integer" and "number" in kinds)
        ]
        return self.rng.choice(wrong or [{"a": []}])

    def odd_names(self) -> dict[str, Any]:
        return {
            self.rng.choice(
                [
                    "bogus",
                    "",
                    "__proto__",
                    "constructor",
                    "n" * self.rng.choice([300, 70_000]),
                    "\ud800",
                    "a\x00b",
                    "COMMAND",
                    "command ",
                ]
            ): self.rng.choice([1, "x", None, [], {}])
        }

    def nested(self) -> Any:
        levels = self.rng.choice([5, 50, 150, 190, 196, 197, 198, 199, 250, 1000, 5000, 100_000])
        if self.rng.random() < 0.3 and levels <= 250:  # nested objects (the writer recurses: deeper ones as arrays)
            value: Any = "leaf"
            for _ in range(levels):
                value = {"a": value}
            return value
        return Deep(levels, self.rng.choice([None, 1, "x", {}]))

    def huge(self, spec: dict[str, Any]) -> Any:
        kinds = _types(spec)
        choice = self.rng.randrange(6)
        if choice == 0 or ("string" in kinds and choice == 1):
            return "y" * self.huge_bytes
        if choice == 1:
            return ["z"] * 100_000
        if choice == 2:
            return {f"N{index}": "v" for index in range(10_000)}
        if choice == 3:
            return {"E" * self.huge_bytes: "v"}
        if choice == 4:
            return huge_integer(MAX_INTEGER_DIGITS + self.rng.choice([1, 700]))  # longer than the server reads
        return [SAFE_HOSTS[0]] * 50_000

    def broken_envelope(self, name: str, arguments: Any) -> tuple[Any, Any]:
        choice = self.rng.randrange(8)
        if choice == 0:
            return "no_such_tool", arguments
        if choice == 1:
            return self.rng.choice([5, None, ["shell_exec"], {"name": "shell_exec"}, True]), arguments
        if choice == 2:
            return name, self.rng.choice([[], "command=true", 5, None, True])
        if choice == 3:
            return "\ud800" + name, arguments
        if choice == 4:
            return "t" * self.huge_bytes, arguments
        if choice == 5:
            return name.upper(), arguments
        if choice == 6:
            return "oauth:approve", arguments  # a name that would pass for a server event
        return name + "\x00", arguments


def _types(spec: dict[str, Any]) -> list[str]:
    if "type" in spec:
        kind = spec["type"]
        return list(kind) if isinstance(kind, list) else [kind]
    return [str(option.get("type")) for option in spec.get("anyOf", []) if option.get("type")]


# -- prompts, resources, completion --------------------------------------------------------------------------

PROMPT_NAMES = ["operating_guide", "troubleshoot_host", "run_interactive", "fleet_change", "review_audit", "nope"]


def context_request(rng: random.Random, request_id: Any, era: str, client: str) -> Probe:
    choice = rng.randrange(8)
    hostile = rng.random() < 0.5
    if choice == 0:
        method, params = rng.choice(["prompts/list", "resources/list", "resources/templates/list"]), {}
    elif choice in (1, 2):
        arguments = {
            rng.choice(["host", "symptom", "context", "program", "goal", "hosts", "command", "question", "x"]): (
                unicode_text(rng) if hostile else text(rng)
            )
            for _ in range(rng.randint(0, 3))
        }
        name: Any = rng.choice(PROMPT_NAMES) if rng.random() < 0.9 else rng.choice([5, "\ud800", "p" * 5000])
        method, params = "prompts/get", {"name": name, "arguments": arguments}
    elif choice in (3, 4, 5):
        host = rng.choice(SAFE_HOSTS) if not hostile else unicode_text(rng)
        uri = rng.choice(
            [
                "relay-shell://audit/recent",
                "relay-shell://inventory",
                f"relay-shell://inventory/{host}",
                "relay-shell://ssh-config",
                "relay-shell://nope",
                "file:///etc/passwd",
                "",
                "relay-shell://inventory/" + "h" * 70_000,
            ]
        )
        method, params = "resources/read", {"uri": uri}
    else:
        reference = rng.choice(
            [
                {"type": "ref/prompt", "name": rng.choice(PROMPT_NAMES)},
                {"type": "ref/resource", "uri": "relay-shell://inventory/{host}"},
                {"type": "ref/nope"},
            ]
        )
        argument = {
            "name": rng.choice(["host", "hosts", "program", "x"]),
            "value": unicode_text(rng) if hostile else "a",
        }
        method, params = "completion/complete", {"ref": reference, "argument": argument}
    audited = "once_if_result" if method in ("prompts/get", "resources/read") else "at_most_once"
    return Probe(
        line=request(request_id, method, params, era, client),
        method=method,
        expect="answer",
        key=id_key(request_id),
        audited=audited,
        kind=f"context:{method}",
    )


# -- malformed JSON-RPC ----------------------------------------------------------------------------------------


def malformed(rng: random.Random, request_id: int, era: str, client: str, huge_bytes: int) -> Probe:
    """A message that is not a well-formed request, with what JSON-RPC says its answer must be."""
    key = id_key(request_id)
    ping = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "ping",
        **({"params": envelope(era, client)} if era == "modern" else {}),
    }
    call = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "server_info", "arguments": {}, **envelope(era, client)},
    }
    choice = rng.randrange(28)
    if choice == 0:
        return _probe(b"this is not json", "null", None, "garbage")
    if choice == 1:
        return _probe(encode(call)[:-7].encode(), "null_or_id", key, "truncated")
    if choice == 2:
        return _probe(b"[" * rng.choice([1000, 100_000]), "null", None, "unbalanced brackets")
    if choice == 3:
        return _probe(b'{"a":[' * rng.choice([1000, 50_000]), "null", None, "unbalanced objects")
    if choice == 4:
        # A number that is no integer is answered with that id (as written: `1001e3` too); other ids with null.
        bad_id = rng.choice(
            [request_id + 0.5, float(request_id), Raw(f"{request_id}e3"), True, False, {"a": request_id}, [1], None]
        )
        line = encode({**call, "id": bad_id}).encode()
        if isinstance(bad_id, float | Raw):
            number = float(bad_id.text) if isinstance(bad_id, Raw) else bad_id
            probe = _probe(line, "error", id_key(number), f"id {type(bad_id).__name__}")
            probe.record_id = bad_id.text if isinstance(bad_id, Raw) else str(bad_id)
            return probe
        return _probe(line, "null", None, f"id {type(bad_id).__name__}")
    if choice == 5:
        huge_id = huge_integer(MAX_INTEGER_DIGITS + rng.choice([1, 1000]))
        return _probe(encode({**call, "id": huge_id}).encode(), "error", id_key(huge_id), "integer id too long")
    if choice == 6:
        big_id = rng.choice([2**63, 2**64, 2**80, -(2**70)]) + request_id  # unique: one record per id
        if rng.random() < 0.2:
            big_id = Raw(str(request_id).rjust(MAX_INTEGER_DIGITS, "7"), digits=MAX_INTEGER_DIGITS)
        return _probe(
            encode({**call, "id": big_id}).encode(), "result", id_key(big_id), "integer id beyond 64 bits", "once"
        )
    if choice == 7:
        long_id = f"id-{request_id}-" + "i" * rng.choice([2000, huge_bytes])
        return _probe(encode({**call, "id": long_id}).encode(), "result", id_key(long_id), "long string id", "once")
    if choice == 8:
        odd_id = f"{request_id}-" + rng.choice(["\ud800", "\x00", "\u202e", "é", ""])
        return _probe(encode({**ping, "id": odd_id}).encode(), "answer", id_key(odd_id), "odd string id")
    if choice == 9:
        return _probe(encode({"jsonrpc": "2.0", "id": request_id}).encode(), "error", key, "no method")
    if choice == 10:
        return _probe(encode({"jsonrpc": "2.0", "id": request_id, "result": {}}).encode(), "none", None, "a response")
    if choice == 11:
        return _probe(b'{"jsonrpc":"2.0","method":"notifications/bogus"}', "none", None, "unknown notification")
    if choice == 12:
        return _probe(encode({**ping, "jsonrpc": "1.0"}).encode(), "error", key, "jsonrpc 1.0")
    if choice == 13:
        return _probe(
            encode({key_: value for key_, value in ping.items() if key_ != "jsonrpc"}).encode(),
            "error",
            key,
            "no jsonrpc",
        )
    if choice == 14:
        return _probe(encode({**call, "params": [1, 2]}).encode(), "error", key, "params not an object")
    if choice == 15:
        return _probe(encode({**ping, "method": 5}).encode(), "error", key, "method not a string")
    if choice == 16:
        return _probe(encode({**ping, "method": "no/such"}).encode(), "error", key, "unknown method")
    if choice == 17:
        return _probe(encode([ping]).encode(), "null", None, "batch")
    if choice == 18:
        line = encode(call).replace('"arguments":{}', '"arguments":{"timeout":NaN}').encode()
        return _probe(line, "null_or_id", key, "NaN literal")
    if choice == 19:
        return _probe("\ufeff".encode() + encode(ping).encode(), "null_or_id", key, "byte order mark")
    if choice == 20:
        return _probe(encode({**ping, "method": "ping\ud800"}).encode(), "error", key, "method with a lone surrogate")
    if choice == 21:
        return _probe(b"x" * huge_bytes, "null", None, "long garbage")
    if choice == 22:
        meta_call = {**call, "params": {**call["params"], "_meta": {"progressToken": "\ud800"}}}
        return _probe(encode(meta_call).encode(), "answer", key, "_meta with a lone surrogate")
    if choice == 23:
        notification = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"\\ud800"}}'
        return _probe(notification, "none", None, "notification with a lone surrogate")
    if choice == 24:
        deep = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"x":' + b"[" * 500 + b"]" * 500 + b"}}"
        return _probe(deep, "none", None, "notification nested too deep")
    if choice == 26:
        return framed_call(rng, call, key)
    if choice == 27:
        return batch_of_calls(rng, call, request_id)
    return _probe(b"   ", "none", None, "blank line")


def framed_call(rng: random.Random, call: dict[str, Any], key: tuple[str, str] | None) -> Probe:
    """A tools/call a JSON-RPC reader refuses for what frames it, whose bytes still show it: answered with its id,
    and recorded once, with its tool (issue 30 review S1)."""
    line = encode(call).encode()
    framings = {
        "byte order mark": b"\xef\xbb\xbf" + line,
        "NUL before": b"\x00" + line,
        "no-break space before": "\u00a0".encode() + line,
        "comment before": b"/*{}*/" + line,
        "form feed before": b"\x0c" + line,
        "UTF-16": encode(call).encode("utf-16-le"),
        "trailing garbage": line + b" xyz",
        "tools\\/call and garbage": line.replace(b'"tools/call"', b'"tools\\/call"') + b"garbage",
        "tools/\\u0063all and garbage": line.replace(b'"tools/call"', b'"tools/\\u0063all"') + b"}",
    }
    kind = rng.choice(list(framings))
    return _probe(framings[kind], "error", key, kind, method="tools/call")


def batch_of_calls(rng: random.Random, call: dict[str, Any], request_id: int) -> Probe:
    """A batch (maybe nested) of tools/calls: one error with id null, and one record per call."""
    count = rng.randint(1, 4)
    calls = [encode({**call, "id": f"batch-{request_id}-{index}"}) for index in range(count)]
    batch = "[" + ",".join(calls) + "]"
    nested = rng.random() < 0.3
    probe = _probe(
        ("[" + batch + "]" if nested else batch).encode(), "null", None, "batch of calls", method="tools/call"
    )
    probe.records = count
    return probe


def _probe(
    line: bytes,
    expect: str,
    key: tuple[str, str] | None,
    kind: str,
    audited: str = "at_most_once",
    method: str | None = None,
) -> Probe:
    if method is None:
        method = "tools/call" if b'"tools/call"' in line[:200] or b'"tools/call"' in line[-300:] else "other"
    return Probe(line=line, method=method, expect=expect, key=key, audited=audited, kind=f"malformed:{kind}")
