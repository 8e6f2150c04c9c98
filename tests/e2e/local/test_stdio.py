"""End to end: relay-shell as a subprocess, driven over stdio by the SDK client (both protocol eras)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay_shell.audit.verify import verify_files
from tests.conftest import connect, read_records, text_of

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e") / "audit.jsonl"


@pytest.fixture(scope="module", params=["legacy", "auto"])
async def client(request: pytest.FixtureRequest, audit_path: Path) -> AsyncIterator[Client]:
    async with connect(audit_path, mode=request.param) as connected:
        yield connected


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


async def test_tools_are_listed_with_annotations_and_schemas(client: Client) -> None:
    listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert {"shell_exec", "shell_script", "server_info", "audit_tail"} <= set(tools)
    shell_exec = tools["shell_exec"]
    assert shell_exec.annotations is not None
    assert shell_exec.annotations.destructive_hint is True
    assert shell_exec.annotations.read_only_hint is False
    assert tools["server_info"].annotations is not None and tools["server_info"].annotations.read_only_hint
    assert shell_exec.output_schema is not None and "exit_code" in shell_exec.output_schema["properties"]
    assert set(shell_exec.input_schema["properties"]) == {
        "command",
        "timeout",
        "max_output",
        "cwd",
        "stdin",
        "env",
        "merge_stderr",
        "use_shell",
        "yield_after",  # issue 28: long-running work
        "stdin_open",
    }
    assert "operating_guide" in (client.instructions or "")


async def test_exec_reports_exit_and_output(client: Client) -> None:
    result = await client.call_tool("shell_exec", {"command": "echo hello; echo err >&2"})
    assert not result.is_error
    assert text_of(result) == "[exit 0]\nhello\nerr\n"
    assert result.structured_content is not None
    assert result.structured_content["exit_code"] == 0
    assert result.structured_content["status"] == "ok"
    assert result.structured_content["output_bytes"] == 10


async def test_nonzero_exit_is_not_an_error(client: Client) -> None:
    result = await client.call_tool("shell_exec", {"command": "echo out; exit 3"})
    assert not result.is_error
    assert text_of(result).startswith("[exit 3]\nout")
    assert result.structured_content and result.structured_content["status"] == "exit_nonzero"


async def test_killed_by_signal(client: Client) -> None:
    result = await client.call_tool("shell_exec", {"command": "kill -TERM $$"})
    assert text_of(result).startswith("[signal SIGTERM]")


async def test_timeout_keeps_partial_output_and_kills_the_group(client: Client, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    command = f"sleep 300 & echo $! > {pid_file}; echo partial; trap '' TERM; sleep 300"
    started = time.monotonic()
    result = await client.call_tool("shell_exec", {"command": command, "timeout": 1})
    elapsed = time.monotonic() - started
    assert result.is_error
    text = text_of(result)
    assert text.startswith("[TIMEOUT after 1s]\n")
    assert "partial" in text
    assert result.structured_content and result.structured_content["timed_out"] is True
    assert elapsed < 10
    background_pid = int(pid_file.read_text())
    assert not process_alive(background_pid)


async def test_background_child_holding_the_pipe_does_not_hang(client: Client, tmp_path: Path) -> None:
    pid_file = tmp_path / "bg.pid"
    started = time.monotonic()
    result = await client.call_tool("shell_exec", {"command": f"sleep 600 & echo $! > {pid_file}; echo started"})
    elapsed = time.monotonic() - started
    try:
        assert text_of(result) == "[exit 0]\nstarted\n"
        assert elapsed < 3
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


async def test_stdin_is_fed_then_closed_and_defaults_to_devnull(client: Client) -> None:
    fed = await client.call_tool("shell_exec", {"command": "cat; echo; echo done", "stdin": "line1\nline2"})
    assert text_of(fed) == "[exit 0]\nline1\nline2\ndone\n"
    empty = await client.call_tool("shell_exec", {"command": "cat; echo eof", "timeout": 5})
    assert text_of(empty) == "[exit 0]\neof\n"


async def test_env_overlay_sets_unsets_and_noninteractive_defaults(client: Client) -> None:
    result = await client.call_tool(
        "shell_exec",
        {
            "command": 'echo "$GREETING|${HOME:-unset}|$PAGER|$GIT_TERMINAL_PROMPT|$DEBIAN_FRONTEND"',
            "env": {"GREETING": "hi there", "HOME": None},
        },
    )
    assert text_of(result) == "[exit 0]\nhi there|unset|cat|0|noninteractive\n"
    plain = await client.call_tool("shell_exec", {"command": "echo $PAGER $GIT_PAGER $DEBIAN_FRONTEND"})
    assert text_of(plain) == "[exit 0]\ncat cat noninteractive\n"
    override = await client.call_tool("shell_exec", {"command": "echo $PAGER", "env": {"PAGER": "less"}})
    assert text_of(override) == "[exit 0]\nless\n"


async def test_cwd(client: Client, tmp_path: Path) -> None:
    result = await client.call_tool("shell_exec", {"command": "pwd", "cwd": str(tmp_path)})
    assert text_of(result) == f"[exit 0]\n{tmp_path}\n"


async def test_separate_stderr(client: Client) -> None:
    result = await client.call_tool("shell_exec", {"command": "echo out; echo err >&2", "merge_stderr": False})
    assert result.structured_content is not None
    assert result.structured_content["output"] == "out\n"
    assert result.structured_content["stderr"] == "err\n"
    assert text_of(result) == "[exit 0]\nout\n[stderr]\nerr\n"


async def test_argv_without_shell(client: Client) -> None:
    listed = await client.call_tool("shell_exec", {"command": ["printf", "%s|", "a b", "$HOME"], "use_shell": False})
    assert text_of(listed) == "[exit 0]\na b|$HOME|"
    split = await client.call_tool("shell_exec", {"command": "printf '%s|' 'a b' c", "use_shell": False})
    assert text_of(split) == "[exit 0]\na b|c|"


async def test_truncation_keeps_head_and_tail(client: Client) -> None:
    result = await client.call_tool("shell_exec", {"command": "seq 1 100000", "max_output": 1024})
    text = text_of(result)
    lines = text.splitlines()
    assert lines[0] == "[exit 0]"
    # issue 28: the cut output is kept in full, and a note says where (tests/e2e/jobs/test_outputs.py reads it)
    output_id = result.structured_content and result.structured_content["output_id"]
    assert output_id and lines[1].startswith(f"[NOTE: output cut: all 588895 bytes are kept as {output_id} "), lines[1]
    assert lines[2] == "1"
    assert "100000" in lines[-2]
    assert lines[-1].startswith("[TRUNCATED: 588895 bytes produced, ")
    assert "head 512 + tail" in lines[-1]
    assert result.structured_content and result.structured_content["truncated"] is True
    assert result.structured_content["output_bytes"] == 588895


async def test_invalid_utf8_and_nul_in_output(client: Client) -> None:
    result = await client.call_tool("shell_exec", {"command": r"printf 'a\377b\000c'"})
    assert text_of(result) == "[exit 0]\na\ufffdb\u2400c"
    assert result.structured_content and result.structured_content["output_bytes"] == 5


async def test_script_strict_mode_stops_at_first_failure(client: Client) -> None:
    result = await client.call_tool("shell_script", {"script": "echo one\nfalse\necho not reached\n"})
    assert text_of(result) == "[exit 1]\none\n"
    relaxed = await client.call_tool("shell_script", {"script": "false\necho reached\n", "strict": False})
    assert text_of(relaxed) == "[exit 0]\nreached\n"


async def test_script_python_and_sh(client: Client) -> None:
    python = await client.call_tool(
        "shell_script", {"script": "import sys\nprint(sum(range(10)))\n", "interpreter": "python"}
    )
    assert text_of(python) == "[exit 0]\n45\n"
    sh = await client.call_tool("shell_script", {"script": "for i in 1 2 3; do printf $i; done\n", "interpreter": "sh"})
    assert text_of(sh) == "[exit 0]\n123"


async def test_megabyte_arguments(client: Client) -> None:
    megabyte = "x" * (1024 * 1024)
    counted = await client.call_tool("shell_exec", {"command": "wc -c", "stdin": megabyte})
    assert text_of(counted).split("\n")[1].strip() == str(1024 * 1024)
    script = await client.call_tool("shell_script", {"script": f"# {megabyte}\necho ran\n"})
    assert text_of(script) == "[exit 0]\nran\n"
    too_long = await client.call_tool("shell_exec", {"command": f"echo {megabyte}"})
    assert too_long.is_error
    assert text_of(too_long).startswith("[ERROR: OSError: Argument list too long")


async def test_progress_is_reported_for_long_calls(client: Client) -> None:
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    result = await client.call_tool(
        "shell_exec",
        {"command": "for i in 1 2 3 4 5; do echo tick $i; sleep 0.5; done"},
        progress_callback=on_progress,
    )
    assert text_of(result).startswith("[exit 0]")
    assert len(updates) >= 1
    assert updates == sorted(updates) and updates[0] > 0


async def test_cancellation_kills_the_process_group(client: Client, tmp_path: Path, audit_path: Path) -> None:
    pid_file = tmp_path / "cancel.pid"
    command = f"sleep 300 & echo $! > {pid_file}; sleep 300"
    with anyio.move_on_after(1.5):
        await client.call_tool("shell_exec", {"command": command, "timeout": 600})
    background_pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while process_alive(background_pid) and time.monotonic() < deadline:
        await anyio.sleep(0.1)
    assert not process_alive(background_pid)

    def cancelled() -> list[dict[str, Any]]:
        return [
            r for r in read_records(audit_path) if r.get("outcome") == "cancelled" and str(pid_file) in str(r["args"])
        ]

    # The end record is written once the tree is gone, a moment after its last process dies (under load, later
    # than this loop sees the death): wait for it, as an auditor tailing the log would.
    while not cancelled() and time.monotonic() < deadline:
        await anyio.sleep(0.1)
    assert cancelled(), "the cancelled call must have its audit record"


async def test_server_info(client: Client, audit_path: Path) -> None:
    result = await client.call_tool("server_info", {})
    assert not result.is_error
    assert result.structured_content is not None
    info = result.structured_content["info"]
    assert info["policy"]["mode"] == "open"
    assert info["audit"]["path"] == str(audit_path)
    assert info["audit"]["healthy"] is True
    assert info["limits"]["max_output_hard"] == 1024 * 1024


async def test_audit_tail_tool(client: Client) -> None:
    await client.call_tool("shell_exec", {"command": "echo for-the-tail"})
    result = await client.call_tool("audit_tail", {"tool": "shell_exec", "lines": 1})
    assert result.structured_content is not None
    records = result.structured_content["records"]
    assert len(records) == 1 and records[0]["args"]["command"] == "echo for-the-tail"
    assert "for-the-tail\n" not in str(records[0].get("output_sha256"))


async def test_prompt_and_resource_pulls_are_audited(client: Client, audit_path: Path) -> None:
    before = len(read_records(audit_path))
    prompts = await client.list_prompts()
    resources = await client.list_resources()
    assert len(read_records(audit_path)) == before  # listing does not audit
    assert "operating_guide" in [prompt.name for prompt in prompts.prompts]
    assert "relay-shell://audit/recent" in [str(resource.uri) for resource in resources.resources]
    guide = await client.get_prompt("operating_guide")
    assert "shell_script" in str(guide.messages[0].content)
    recent = await client.read_resource("relay-shell://audit/recent")
    assert recent.contents
    labels = [record["tool"] for record in read_records(audit_path)[before:]]
    assert labels == ["prompt:operating_guide", "resource:audit_recent"]
    pulled = read_records(audit_path)[-1]
    assert pulled["tier"] == 0 and len(pulled["output_sha256"]) == 64


async def test_audit_holds_digests_not_output_and_chain_verifies(client: Client, audit_path: Path) -> None:
    result = await client.call_tool("shell_exec", {"command": "echo $((6*7))-computed-marker"})
    assert "42-computed-marker" in text_of(result)
    raw = audit_path.read_text()
    assert "42-computed-marker" not in raw
    record = read_records(audit_path)[-1]
    assert record["tool"] == "shell_exec" and record["outcome"] == "ok" and record["exit_code"] == 0
    for field in (
        "v",
        "ts",
        "tier",
        "denied",
        "args",
        "output_sha256",
        "output_len",
        "raw_sha256",
        "raw_len",
        "duration_ms",
        "request_id",
        "client_id",
        "seq",
        "prev",
        "chain",
    ):
        assert field in record, field
    assert record["raw_len"] == len("42-computed-marker\n")
    assert verify_files([audit_path]).ok


async def test_secrets_in_arguments_are_redacted_in_the_log(client: Client, audit_path: Path) -> None:
    await client.call_tool("shell_exec", {"command": "echo ok", "env": {"DB_PASSWORD": "hunter2-very-secret"}})
    await client.call_tool(
        "shell_exec", {"command": "curl -s -H 'Authorization: Bearer abcdef0123456789xyz' http://127.0.0.1:9 || true"}
    )
    raw = audit_path.read_text()
    assert "hunter2-very-secret" not in raw
    assert "abcdef0123456789xyz" not in raw
    assert "DB_PASSWORD" in raw


async def test_long_arguments_are_summarised_with_digest(client: Client, audit_path: Path) -> None:
    padding = " " * 500_000
    await client.call_tool("shell_exec", {"command": f"echo start{padding}; echo hidden-payload-at-the-end"})
    record = read_records(audit_path)[-1]
    command = record["args"]["command"]
    assert command["len"] == len(f"echo start{padding}; echo hidden-payload-at-the-end")
    assert command["head"].startswith("echo start")
    assert command["tail"].endswith("hidden-payload-at-the-end")
    assert len(command["sha256"]) == 64


async def test_concurrent_calls_one_record_each(client: Client, audit_path: Path) -> None:
    before = len(read_records(audit_path))
    results: list[str] = []

    async def call(index: int) -> None:
        result = await client.call_tool("shell_exec", {"command": f"echo call-{index}"})
        results.append(text_of(result))

    async with anyio.create_task_group() as group:
        for index in range(200):
            group.start_soon(call, index)
    assert sorted(results) == sorted(f"[exit 0]\ncall-{index}\n" for index in range(200))
    new_records = read_records(audit_path)[before:]
    # Each call: a start record (before it ran) and an end record, paired by call_id.
    for phase in ("start", "end"):
        commands = sorted(record["args"]["command"] for record in new_records if record["phase"] == phase)
        assert commands == sorted(f"echo call-{index}" for index in range(200))
    assert len({record["call_id"] for record in new_records}) == 200
    assert len({record["request_id"] for record in new_records}) == 200
    assert verify_files([audit_path]).ok
