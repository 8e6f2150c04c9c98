"""The runner on its own, in this process: a real audit log in tmp_path, the real policy and metrics, plans built
here. What it promises every tool: write-ahead (the start record on disk before anything runs), one record for a
refused call and for a pure read, every failure an audited `[ERROR: …]`, fail-closed when the log cannot be
written, an end record on cancellation, client-chosen names recorded as `unknown`, and the tier-3 token path."""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent

from relay_shell import results
from relay_shell.audit.log import AuditLog
from relay_shell.capture import BoundedCapture
from relay_shell.errors import ArgumentError
from relay_shell.metrics import Metrics
from relay_shell.plan import Execution, Plan, ProgressFn, Subject
from relay_shell.policy.admission import Policy
from relay_shell.results import schema_defaults
from relay_shell.runner.pipeline import Runner
from relay_shell.runner.recorder import Recorder
from relay_shell.runner.request import CallRequest
from relay_shell.runner.tools import ToolEntry
from relay_shell.settings.model import Settings
from tests.conftest import read_records

pytestmark = pytest.mark.anyio


async def acts() -> Annotated[CallToolResult, results.ExecResult]:
    """A tool that runs something (a start record first)."""
    raise AssertionError("the runner never calls a tool function")


async def looks() -> Annotated[CallToolResult, results.ExecResult]:
    """A tool that only reads the server's own state (one record)."""
    raise AssertionError("the runner never calls a tool function")


def entry(function: Callable[..., Any], pure_read: bool = False, record_filter: Any = None) -> ToolEntry:
    tool = Tool.from_function(function, structured_output=True)
    return ToolEntry(tool, schema_defaults(tool.output_schema), pure_read, record_filter)


def withhold_data(arguments: dict[str, Any], owner: str | None) -> dict[str, Any]:
    """Like session_send's filter: what was typed stays out of the record."""
    return {name: ("[withheld]" if name == "data" else value) for name, value in arguments.items()}


def log_path(tmp_path: Path) -> Path:
    return tmp_path / "logs" / "audit.jsonl"


class Server:
    """A runner as the server makes one, with its log open."""

    def __init__(self, tmp_path: Path, settings: Settings | None = None) -> None:
        self.audit_path = log_path(tmp_path)
        self.directory = self.audit_path.parent
        self.settings = settings or Settings(audit={"audit_path": self.audit_path})
        self.audit_log = AuditLog(self.audit_path)
        self.audit_log.open()
        self.metrics = Metrics(enabled=True)
        recorder = Recorder(self.settings, self.audit_log, self.metrics)
        policy = Policy(
            self.settings.policy.policy_mode, self.settings.policy.policy_deny, self.settings.policy.policy_allow
        )
        tools = {"acts": entry(acts, record_filter=withhold_data), "looks": entry(looks, pure_read=True)}
        self.runner = Runner(self.settings, recorder, policy, tools)

    def request(self, tool: str, **arguments: Any) -> CallRequest:
        return CallRequest(context=None, transport="stdio", tool=tool, arguments=arguments, validated=arguments)

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.audit_path)

    def metric(self, text: str) -> bool:
        return text in self.metrics.exposition().decode()


def plan_of(execute: Callable[[ProgressFn], Awaitable[Execution]], subject: Subject | None = None) -> Plan:
    return Plan(subject=subject or Subject(command="echo hi"), execute=execute)


def said(text: str) -> Execution:
    capture = BoundedCapture(1024)
    capture.feed(text.encode())
    return Execution(status="ok", output=capture.result(), exit_code=0)


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_the_start_record_is_on_disk_before_the_plan_runs(tmp_path: Path) -> None:
    server = Server(tmp_path)
    seen_while_running: list[dict[str, Any]] = []

    async def execute(progress: ProgressFn) -> Execution:
        seen_while_running.extend(server.records())
        return said("hi\n")

    result = await server.runner.run(server.request("acts", command="echo hi"), lambda: plan_of(execute))
    assert text_of(result) == "[exit 0]\nhi\n" and not result.is_error
    assert [(record["tool"], record["phase"]) for record in seen_while_running] == [("acts", "start")]
    start, end = server.records()
    assert start["decision"] == "admitted" and start["args"] == {"command": "echo hi"}
    assert end["phase"] == "end" and end["outcome"] == "ok" and end["call_id"] == start["call_id"]
    assert end["exit_code"] == 0 and end["duration_ms"] == (result.structured_content or {})["duration_ms"]


async def test_a_refused_call_gets_one_end_record_and_nothing_runs(tmp_path: Path) -> None:
    server = Server(tmp_path, Settings(audit={"audit_path": log_path(tmp_path)}, policy={"policy_mode": "readonly"}))
    ran: list[bool] = []

    async def execute(progress: ProgressFn) -> Execution:
        ran.append(True)
        return said("")

    subject = Subject(command="touch /tmp/never")
    result = await server.runner.run(server.request("acts", command="touch"), lambda: plan_of(execute, subject))
    assert result.is_error and text_of(result).startswith("[DENIED tier 1 (reversible): mode readonly admits tier 0")
    assert ran == []
    (record,) = server.records()
    assert record["phase"] == "end" and record["outcome"] == "denied" and record["denied"] is True
    assert record["reason"].startswith("mode readonly admits tier 0 only")
    assert server.metric('relay_shell_tool_calls_total{outcome="denied",tier="1",tool="acts"} 1.0')


async def test_a_pure_read_gets_its_end_record_alone(tmp_path: Path) -> None:
    server = Server(tmp_path)

    async def execute(progress: ProgressFn) -> Execution:
        return said("state\n")

    await server.runner.run(server.request("looks"), lambda: plan_of(execute, Subject(fixed_tier=0)))
    await server.runner.run(server.request("acts"), lambda: plan_of(execute, Subject(fixed_tier=0)))
    phases = [(record["tool"], record["phase"]) for record in server.records()]
    assert phases == [("looks", "end"), ("acts", "start"), ("acts", "end")]


async def test_a_failure_in_prepare_or_execute_is_an_audited_error(tmp_path: Path) -> None:
    server = Server(tmp_path)

    def invalid() -> Plan:
        raise ArgumentError("timeout: -1 is out of range; allowed: 0.1 to 600")

    def broken() -> Plan:
        raise KeyError("a bug")

    async def crashes(progress: ProgressFn) -> Execution:
        raise RuntimeError("the executor broke")

    async def missing(progress: ProgressFn) -> Execution:
        raise FileNotFoundError(2, "No such file or directory", "/nowhere")

    first = await server.runner.run(server.request("acts"), invalid)
    second = await server.runner.run(server.request("acts"), broken)
    third = await server.runner.run(server.request("acts"), lambda: plan_of(crashes))
    fourth = await server.runner.run(server.request("acts"), lambda: plan_of(missing))
    assert text_of(first) == "[ERROR: InvalidArgument: timeout: -1 is out of range; allowed: 0.1 to 600]"
    assert text_of(second) == "[ERROR: Internal: KeyError]"
    assert text_of(third) == "[ERROR: Internal: RuntimeError: the executor broke]"
    assert text_of(fourth) == "[ERROR: OSError: No such file or directory: '/nowhere']"
    assert all(result.is_error for result in (first, second, third, fourth))
    ends = [record for record in server.records() if record["phase"] == "end"]
    assert [record["outcome"] for record in ends] == ["error"] * 4
    assert ends[0]["reason"].startswith("InvalidArgument: timeout") and ends[2]["reason"].startswith("Internal")
    # Prepare failed before admission: one record; execute failed after its start record: two.
    assert [record["phase"] for record in server.records()] == ["end", "end", "start", "end", "start", "end"]


async def test_a_log_that_cannot_be_written_refuses_the_call_before_it_runs(tmp_path: Path) -> None:
    server = Server(tmp_path)
    ran: list[bool] = []

    async def execute(progress: ProgressFn) -> Execution:
        ran.append(True)
        return said("")

    # A real filesystem fault: the log's directory replaced by a file, so the log cannot be reopened.
    shutil.rmtree(server.directory)
    server.directory.write_text("not a directory")
    result = await server.runner.run(server.request("acts"), lambda: plan_of(execute))
    assert result.is_error and ran == []
    assert text_of(result).startswith("[ERROR: AuditUnavailable: ")
    assert "(RELAY_SHELL_AUDIT_ON_FAILURE=refuse)" in text_of(result)
    assert server.runner.recorder.audit_counts()["refused_calls"] == 1
    assert server.metric("relay_shell_audit_degraded 1.0")


async def test_a_call_whose_end_record_is_lost_returns_no_output(tmp_path: Path) -> None:
    server = Server(tmp_path)

    async def execute(progress: ProgressFn) -> Execution:
        shutil.rmtree(server.directory)  # the log goes away while the call runs
        server.directory.write_text("not a directory")
        return said("secret output\n")

    result = await server.runner.run(server.request("acts"), lambda: plan_of(execute))
    assert result.is_error and "secret output" not in text_of(result)
    assert text_of(result).startswith("[ERROR: AuditWriteFailed: the call ran ([exit 0]) but its audit record")
    assert (result.structured_content or {})["status"] == "error"


async def test_a_cancelled_call_still_writes_its_end_record(tmp_path: Path) -> None:
    server = Server(tmp_path)
    started = anyio.Event()

    async def execute(progress: ProgressFn) -> Execution:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with anyio.create_task_group() as group:
        group.start_soon(server.runner.run, server.request("acts"), lambda: plan_of(execute))
        await started.wait()
        group.cancel_scope.cancel()
    start, end = server.records()
    assert (start["phase"], end["phase"], end["outcome"]) == ("start", "end", "cancelled")
    assert end["call_id"] == start["call_id"]


async def test_a_name_that_is_not_a_tool_is_recorded_as_unknown(tmp_path: Path) -> None:
    server = Server(tmp_path)
    message = "UnknownTool: 'oauth:grant' is not a tool; allowed: acts, looks"
    result = await server.runner.reject(server.request("oauth:grant"), {"x": 1}, message)
    assert result.is_error and text_of(result) == f"[ERROR: {message}]"
    # The shared fields of every result, for a call that names no tool of ours.
    assert {"status", "tier", "output", "confirm_token"} <= set(result.structured_content or {})
    invalid = await server.runner.reject(server.request("acts"), {"data": "hunter2"}, "InvalidArgument: 'hunter2'")
    assert text_of(invalid) == "[ERROR: InvalidArgument: 'hunter2']"
    unknown, known = server.records()
    assert unknown["tool"] == "unknown" and unknown["args"] == {"x": 1} and unknown["reason"].startswith("UnknownTool")
    # The record filter keeps the typed text out of the record, and the reason that quotes it too.
    assert known["tool"] == "acts" and known["args"] == {"data": "[withheld]"}
    assert known["reason"].startswith("withheld:")
    assert server.metric('relay_shell_tool_calls_total{outcome="error",tier="0",tool="unknown"} 1.0')
    assert "oauth:grant" not in server.metrics.exposition().decode()


async def test_a_tier3_call_runs_once_a_token_for_exactly_it_was_confirmed(tmp_path: Path) -> None:
    server = Server(tmp_path, Settings(audit={"audit_path": log_path(tmp_path)}, policy={"confirm_tier3": "token"}))
    runs: list[bool] = []
    wipe = Subject(command="dd if=/dev/zero of=/dev/sda")

    async def execute(progress: ProgressFn) -> Execution:
        runs.append(True)
        return said("wiped\n")

    request = server.request("acts", command="dd if=/dev/zero of=/dev/sda")
    asked = await server.runner.run(request, lambda: plan_of(execute, wipe))
    assert text_of(asked).startswith("[CONFIRM REQUIRED tier 3: ") and runs == []
    token = (asked.structured_content or {})["confirm_token"]
    confirmation = server.runner.confirmation
    other = server.request("acts", command="dd if=/dev/zero of=/dev/sdb")  # a token binds one call only
    confirmation.tokens.arm(server.records()[-1]["confirmation"], request.owner)
    refused = await server.runner.run(other, lambda: plan_of(execute, Subject(command="dd if=/dev/zero of=/dev/sdb")))
    assert text_of(refused).startswith("[CONFIRM REQUIRED tier 3: ") and runs == []
    done = await server.runner.run(request, lambda: plan_of(execute, wipe))
    assert text_of(done) == "[exit 0]\nwiped\n" and runs == [True]
    again = await server.runner.run(request, lambda: plan_of(execute, wipe))  # used up
    assert text_of(again).startswith("[CONFIRM REQUIRED tier 3: ") and runs == [True]
    records = server.records()
    start = next(record for record in records if record["phase"] == "start")
    assert start["decision"] == "confirmed" and start["tier"] == 3
    assert isinstance(token, str) and token not in str(records)  # the records keep its digest only
    assert start["confirmation"] == records[0]["confirmation"]  # linked to the record that asked


class YieldedCommand:
    """A plan's job, as sessions/jobs.py makes one: the test ends it by calling `end` (the runner's part alone)."""

    job_id = "j-0123456789ab"

    def __init__(self) -> None:
        self.on_end: Callable[[Execution], Any] | None = None
        self.final: Any = None
        self.abandoned: list[str] = []

    def attach(self, on_end: Callable[[Execution], Any]) -> None:
        self.on_end = on_end

    async def abandon(self, reason: str) -> None:
        self.abandoned.append(reason)
        self.end(said("ended\n"))

    def end(self, execution: Execution) -> None:
        assert self.on_end is not None, "the runner attached itself when the call yielded"
        self.final = self.on_end(execution)


def running(job: YieldedCommand) -> Execution:
    capture = BoundedCapture(1024)
    capture.feed(b"so far\n")
    return Execution(status="running", output=capture.result(), headline=f"[RUNNING: job {job.job_id}]", job=job)


async def test_a_call_that_yields_gets_its_end_record_when_its_job_ends(tmp_path: Path) -> None:
    server = Server(tmp_path)
    job = YieldedCommand()

    async def execute(progress: ProgressFn) -> Execution:
        return running(job)

    result = await server.runner.run(server.request("acts", command="sleep 9"), lambda: plan_of(execute))
    assert text_of(result) == f"[RUNNING: job {job.job_id}]\nso far\n" and not result.is_error
    assert (result.structured_content or {})["status"] == "running"
    start, note = server.records()
    assert (start["phase"], note["phase"]) == ("start", "job") and note["call_id"] == start["call_id"]
    assert note["job_id"] == job.job_id and note["raw_len"] == 7 and note["tier"] == start["tier"]
    job.end(said("so far\nand the rest\n"))
    *_, end = server.records()
    assert end["phase"] == "end" and end["call_id"] == start["call_id"] and end["outcome"] == "ok"
    assert end["raw_len"] == len("so far\nand the rest\n") and end["args"] == start["args"]
    assert text_of(job.final) == "[exit 0]\nso far\nand the rest\n", "the result the one-shot would have had"
    counted = server.metric('relay_shell_tool_calls_total{outcome="ok",tier="0",tool="acts"} 1.0')
    assert counted and not server.metric('outcome="running"'), "counted once, at its end"


async def test_a_job_the_log_cannot_note_is_ended_and_its_output_withheld(tmp_path: Path) -> None:
    server = Server(tmp_path)
    job = YieldedCommand()

    async def execute(progress: ProgressFn) -> Execution:
        shutil.rmtree(server.directory)  # the log goes away while the command runs
        server.directory.write_text("not a directory")
        return running(job)

    result = await server.runner.run(server.request("acts"), lambda: plan_of(execute))
    assert result.is_error and "so far" not in text_of(result)
    assert text_of(result).startswith(f"[ERROR: AuditWriteFailed: the command ran as job {job.job_id} but the log")
    assert job.abandoned == ["the audit log could not be written when the call yielded"]
    assert text_of(job.final).startswith("[ERROR: AuditWriteFailed: the call ran ([exit 0])"), "its end withheld too"
