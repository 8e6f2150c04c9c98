"""The log's bytes for the same events: pinned. A change to how records are built, bounded, serialised or chained
that changes one byte fails here (and `audit verify` of logs already written would not change, but every reader
that compares records or digests across versions would): such a change is a decision, written in an ADR."""

import enum
import hashlib
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from relay_shell.audit import log as audit_log
from relay_shell.audit.log import AuditLog
from relay_shell.audit.record import BoundedArguments, audit_arguments
from relay_shell.audit.verify import verify_files
from relay_shell.capture import BoundedCapture
from relay_shell.identity import Identity
from relay_shell.plan import Execution
from relay_shell.runner import records
from relay_shell.runner.records import CallAudit, end_record, start_record

TS = "2026-11-29T21:00:00.123456Z"


class Kind(enum.StrEnum):
    LOCAL = "local"


def _plan() -> SimpleNamespace:
    """The fields of a Plan the records read (a real Plan needs an executor)."""
    return SimpleNamespace(
        denied_hosts={"db-2": "refused"},
        target="local",
        session_id=None,
        confirmation=None,
        recorded_arguments=None,
        record_fields={"exec_trace": {"execs": [{"path": "/bin/true", "argv": ["true"], "pid": 12}], "complete": True}},
    )


def _events() -> list[dict[str, object]]:
    """Records of every kind of value a writer puts in one, top level and nested: the bound's every branch."""
    identity = Identity(request_id="7", client_id="stdio:bench")
    call = CallAudit("shell_exec", identity, 0.0, "0123456789ab-1", {"command": "true", "env": {"LANG": "C"}})
    captured = BoundedCapture(1 << 20)
    captured.feed(b"hello\n")
    execution = Execution(status="ok", output=captured.result(), exit_code=0, stderr=BoundedCapture(64).result())
    return [
        start_record(call, 1, "admitted", _plan()),  # type: ignore[arg-type]
        end_record("shell_exec", call, 1, execution, "exit 0\nhello\n", _plan(), "end", False, 3),  # type: ignore[arg-type]
        {
            "v": 1,
            "ts": TS,
            "tool": "session:end",
            "ascii": "plain",
            "accented": "café ☕",
            "surrogate": "a\ud800b",
            "long": "x" * 1500,
            "long_accented": "é" * 1100,
            "big": 10**30,
            "negative": -(2**63),
            "unsigned": 2**64 - 1,
            "float": 1.5,
            "flag": True,
            "nothing": None,
            "kind": Kind.LOCAL,
            "pair": ("a", 1),
            "nested": {"b": [1, {"c": "d" * 2000}], "a": {str(index): index for index in range(70)}},
            "many": list(range(100)),
            "args": BoundedArguments(audit_arguments({"password": "hunter2", "command": "echo hi"})),
            "n" * 1100: "a long name",
            "object": Path("/tmp/x"),
        },
    ]


# sha256 of the log those events make (chain on), as written by the code before this test existed (e79b1e4).
PINNED = "936a3b3150fadf39b52941e1ed25e7f60c785e3cd5745a4d614fc97fa9cd8c38"


@pytest.fixture
def fixed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one thing replaced: the clock. The records carry their time and the chain hashes it, so bytes pinned
    across runs need a fixed one; the records are built, bounded, serialised, chained and written for real."""
    monkeypatch.setattr(records, "utc_timestamp", lambda: TS)
    monkeypatch.setattr(audit_log, "utc_timestamp", lambda: TS)


def test_the_same_events_make_the_same_bytes(tmp_path: Path, fixed_time: None) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    for record in _events():
        log.write(record)
    data = path.read_bytes()
    assert verify_files([path]).ok
    lines = [orjson.loads(line) for line in data.splitlines()]
    assert [line["phase"] for line in lines[:2]] == ["start", "end"] and lines[2]["tool"] == "session:end"
    assert hashlib.sha256(data).hexdigest() == PINNED
