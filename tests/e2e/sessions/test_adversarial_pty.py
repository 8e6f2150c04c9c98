"""The PTY dialogues of the adversarial corpus end to end: a real relay-shell over stdio per mode (open with
RELAY_SHELL_CONFIRM_TIER3=token), real shells, pagers, editors and REPLs in real PTYs. Each step is sent with
session_send and must be decided as the case says; afterwards the case's marker file must not exist, its doomed
directory must still hold its files, its process must still be alive, and every step marked `recorded` must be in
the audit log as typed. What decides is the classifier and the terminal settings of sessions (adr/0026), not the
kernel (nothing here is confined)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import connect, read_records, text_of
from tests.e2e.sessions.helpers import call
from tests.procs import alive
from tests.pty_dialogues import dialogues, fill

pytestmark = pytest.mark.anyio

CASES = dialogues()
MODES = ("readonly", "guarded", "open")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The shared placeholders: a text file, a git repository with a commit and a change, a tar archive."""
    root = tmp_path_factory.mktemp("adversarial-shared")
    text = root / "text.txt"
    text.write_text("first line\nsecond line\nthird line\n")
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "tracked.txt").write_text("one\n")
    subprocess.run([*git, "add", "tracked.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    (repo / "tracked.txt").write_text("two\n")
    (root / "file.txt").write_text("in the archive\n")
    subprocess.run(["tar", "-C", str(root), "-cf", str(root / "archive.tar"), "file.txt"], check=True)
    return {"text": str(text), "repo": str(repo), "tar": str(root / "archive.tar")}


@pytest.fixture(scope="module")
def audit_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {mode: tmp_path_factory.mktemp(f"adversarial-{mode}") / "audit.jsonl" for mode in MODES}


@pytest.fixture(scope="module")
async def servers(audit_paths: dict[str, Path]) -> AsyncIterator[dict[str, Client]]:
    async with (
        connect(audit_paths["readonly"], policy_mode="readonly") as readonly,
        connect(audit_paths["guarded"], policy_mode="guarded") as guarded,
        connect(audit_paths["open"], policy_mode="open", confirm_tier3="token") as open_,
    ):
        yield {"readonly": readonly, "guarded": guarded, "open": open_}


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A process outside every call, for `{pid}`: it must still be alive after the case."""
    process = subprocess.Popen(["sleep", "300"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def decision_of(text: str) -> str:
    if text.startswith("[DENIED"):
        return "refused"
    return "confirm" if text.startswith("[CONFIRM REQUIRED") else "admitted"


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
async def test_dialogue(
    case: dict[str, Any],
    servers: dict[str, Client],
    audit_paths: dict[str, Path],
    shared: dict[str, str],
    sleeper: int,
    tmp_path: Path,
) -> None:
    doomed = tmp_path / "doomed"
    (doomed / "sub").mkdir(parents=True)
    (doomed / "a.txt").write_text("a")
    (doomed / "sub" / "b.txt").write_text("b")
    places = {"marker": str(tmp_path / "marker"), "case": str(tmp_path), "doomed": str(doomed), "pid": str(sleeper)}
    case = fill(case, {**shared, **places})
    for name, content in case.get("files", {}).items():
        (tmp_path / name).write_text(content)
    client = servers[case["mode"]]
    spawned = await call(
        client,
        "shell_spawn",
        cwd=str(tmp_path),
        timeout=case["spawn"].get("timeout", 10),
        **{key: value for key, value in case["spawn"].items() if key != "timeout"},
    )
    decided = [decision_of(text_of(spawned))]
    assert decided[0] == case.get("spawn_expect", "admitted"), text_of(spawned)
    session_id = (spawned.structured_content or {}).get("session_id")
    assert session_id or decided[0] != "admitted", text_of(spawned)
    try:
        for step in case["steps"]:
            arguments = {"data": step["send"], "enter": step.get("enter", True), "keys": step.get("keys", [])}
            # `until` waits for a prompt (10 s at most); a step's own timeout bounds the wait (`(?!)` waits it out).
            waiting = {"until": step.get("until"), "timeout": step.get("timeout", 10 if "until" in step else 1)}
            sent = await call(client, "session_send", session_id=session_id, **arguments, **waiting)
            decided.append(decision_of(text_of(sent)))
            assert decided[-1] == step["expect"], (step["send"], text_of(sent))
        await asyncio.sleep(0.5)  # whatever a step started has had its time
    finally:
        if session_id:
            await call(client, "session_kill", session_id=session_id)
    assert decided[-1] == case["expect"]
    assert not Path(places["marker"]).exists(), case["why"]
    assert (doomed / "a.txt").exists() and (doomed / "sub" / "b.txt").exists(), case["why"]
    assert alive(sleeper), case["why"]
    recorded = [
        record["args"].get("data")
        for record in read_records(audit_paths[case["mode"]])
        if record["tool"] == "session_send" and record.get("session_id") == session_id
    ]
    for step in case["steps"]:
        if step.get("recorded"):
            assert step["send"] in recorded, (step["send"], recorded)
