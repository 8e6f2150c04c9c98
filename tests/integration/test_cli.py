"""The command line as a process: startup refuses bad configuration with one line and exit code 2,
`--check-config`, and `relay-shell audit verify|tail` on a real log (the in-process halves are in
tests/unit/test_config.py and tests/unit/test_audit_verify.py)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

from relay_shell.audit.log import AuditLog
from tests.conftest import rewrite

# -- configuration at startup ------------------------------------------------------------------------------


def run_server(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    return subprocess.run(
        [sys.executable, "-m", "relay_shell", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )


def test_startup_with_bad_value_exits_2_with_one_line(tmp_path: Path) -> None:
    result = run_server({"RELAY_SHELL_MAX_TIMEOUT": "forever", "XDG_STATE_HOME": str(tmp_path)})
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "RELAY_SHELL_MAX_TIMEOUT='forever'" in result.stderr


def test_check_config_ok_and_unwritable_audit(tmp_path: Path) -> None:
    ok = run_server({"RELAY_SHELL_AUDIT_PATH": str(tmp_path / "a" / "audit.jsonl")}, "--check-config")
    assert ok.returncode == 0 and "configuration OK" in ok.stdout
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad = run_server({"RELAY_SHELL_AUDIT_PATH": str(blocker / "audit.jsonl")}, "--check-config")
    assert bad.returncode == 2 and "RELAY_SHELL_AUDIT_PATH" in bad.stderr


def test_serving_with_unwritable_audit_refuses_to_start(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run_server({"RELAY_SHELL_AUDIT_PATH": str(blocker / "audit.jsonl")})
    assert result.returncode == 2 and "cannot open audit log" in result.stderr


def test_unknown_variable_is_warned(tmp_path: Path) -> None:
    result = run_server(
        {"RELAY_SHELL_POLICY_MOD": "readonly", "RELAY_SHELL_AUDIT_PATH": str(tmp_path / "a.jsonl")}, "--check-config"
    )
    assert result.returncode == 0
    assert "RELAY_SHELL_POLICY_MOD is not a relay-shell setting" in result.stderr


# -- relay-shell audit ---------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "relay_shell", "audit", *args], capture_output=True, text=True)


def test_cli_exit_codes(log_path: Path, tmp_path: Path) -> None:
    ok = run_cli("verify", str(log_path))
    assert ok.returncode == 0 and "OK: 6 records" in ok.stdout
    lines = log_path.read_bytes().splitlines(keepends=True)
    rewrite(log_path, lines[:2] + lines[3:])
    bad = run_cli("verify", str(log_path))
    assert bad.returncode == 1
    assert f"{log_path}:3:" in bad.stderr
    missing = run_cli("verify", str(tmp_path / "missing.jsonl"))
    assert missing.returncode == 1 and "no such file" in missing.stderr


def test_cli_tail_filters(log_path: Path) -> None:
    out = run_cli("tail", "-n", "2", "--path", str(log_path))
    assert out.returncode == 0
    records = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert [record["index"] for record in records] == [4, 5]
    none = run_cli("tail", "--denied", "--path", str(log_path))
    assert none.returncode == 0 and none.stdout == ""
    by_tool = run_cli("tail", "--tool", "shell_exec", "-n", "100", "--path", str(log_path))
    assert len(by_tool.stdout.splitlines()) == 6


def test_cli_tail_prints_no_character_that_would_not_show_as_itself(tmp_path: Path) -> None:
    """Review A2: a command holding a right-to-left override, a zero-width space, ESC and CSI (C1) is printed
    escaped, so the auditor's terminal neither reorders, hides nor rewrites it; the line is still the record's
    JSON, and plain non-ASCII text (é, 日本) stays as it is."""
    path = tmp_path / "audit.jsonl"
    command = "touch /tmp/M # \u202e\u200bgnirts \x1b[2J\x9b1;1H é 日本 \U000e0041"
    log = AuditLog(path)
    log.open()
    log.write({"v": 1, "tool": "shell_exec", "outcome": "ok", "args": {"command": command}})
    log.close()
    shown = run_cli("tail", "-n", "1", "--path", str(path))
    assert shown.returncode == 0, shown.stderr
    line = shown.stdout.rstrip("\n")
    assert all(char.isprintable() for char in line), ascii(line)
    assert "\\u202e" in line and "\\u200b" in line and "\\u001b" in line and "\\u009b" in line
    assert "é 日本" in line
    assert orjson.loads(line)["args"]["command"] == command


def test_cli_tail_follow_sees_new_records_across_rotation(log_path: Path) -> None:
    follower = subprocess.Popen(
        [sys.executable, "-m", "relay_shell", "audit", "tail", "-n", "1", "--follow", "--path", str(log_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout is not None
        assert orjson.loads(follower.stdout.readline())["index"] == 5
        time.sleep(0.5)  # let the follower reach the end of the file before appending
        log = AuditLog(log_path)
        log.open()
        log.write({"v": 1, "tool": "shell_exec", "index": 6})
        assert orjson.loads(follower.stdout.readline())["index"] == 6
        os.rename(log_path, log_path.with_name("audit.jsonl.1"))
        log.write({"v": 1, "tool": "shell_exec", "index": 7})
        following = [orjson.loads(follower.stdout.readline()) for _ in range(2)]
        assert [record.get("tool") for record in following] == ["audit:continue", "shell_exec"]
        assert following[1]["index"] == 7
    finally:
        follower.kill()
        follower.wait()
