"""The adversarial corpus end to end (tests/data/adversarial/, its format in README.md there): every command case
sent through a real stdio server and the SDK client in its mode — readonly, guarded, and open with tier-3
confirmation by token — gets its decision, and what it would have done did not happen: its marker file does not
exist, its doomed directory is still there, its process is still alive. The classifier alone holds these (no kernel
confinement is asked for), and the admitted cases really run."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.adversarial import Case, load_cases, tool_call
from tests.conftest import connect, text_of

pytestmark = pytest.mark.anyio

CASES = load_cases()
_SETTINGS = {
    "readonly": {"policy_mode": "readonly"},
    "guarded": {"policy_mode": "guarded"},
    "open": {"policy_mode": "open", "confirm_tier3": "token"},
}


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared fixtures: a text file, a tar archive of it, a git repository with a modified file."""
    root = tmp_path_factory.mktemp("adversarial")
    text = root / "text.txt"
    text.write_text("hello\nworld\nx\n")
    subprocess.run(["tar", "-cf", str(root / "archive.tar"), "-C", str(root), "text.txt"], check=True)
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "hello.txt").write_text("hello world\n")
    subprocess.run([*git, "add", "hello.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    (repo / "hello.txt").write_text("hello again\n")
    return root


@pytest.fixture(scope="module")
async def servers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Client]]:
    audit = tmp_path_factory.mktemp("adversarial-audit")
    async with (
        connect(audit / "readonly.jsonl", **_SETTINGS["readonly"]) as readonly,
        connect(audit / "guarded.jsonl", **_SETTINGS["guarded"]) as guarded,
        connect(audit / "open.jsonl", **_SETTINGS["open"]) as open_mode,
    ):
        yield {"readonly": readonly, "guarded": guarded, "open": open_mode}


@pytest.fixture
def victim(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[bytes] | None]:
    """A process outside every call, for the cases that name {pid}."""
    case: Case = request.node.callspec.params["case"]
    if not case.uses("{pid}"):
        yield None
        return
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def _prepare(case: Case, stage: Path, pid: int | None) -> tuple[dict[str, Any], Path, Path]:
    directory = stage / "cases" / case.id
    directory.mkdir(parents=True)
    doomed = directory / "doomed"
    (doomed / "sub").mkdir(parents=True)
    (doomed / "a.txt").write_text("precious\n")
    (doomed / "sub" / "b.txt").write_text("precious\n")
    values = {
        "{marker}": str(directory / "marker"),
        "{case}": str(directory),
        "{doomed}": str(doomed),
        "{pid}": str(pid or 0),
        "{repo}": str(stage / "repo"),
        "{tar}": str(stage / "archive.tar"),
        "{text}": str(stage / "text.txt"),
    }
    fields = case.filled(values)
    for name, content in (fields.get("files") or {}).items():
        path = directory / name
        path.write_text(content)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return fields, directory / "marker", doomed


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_each_case_is_decided_and_nothing_happens(
    case: Case, stage: Path, servers: dict[str, Client], victim: subprocess.Popen[bytes] | None
) -> None:
    fields, marker, doomed = _prepare(case, stage, victim.pid if victim else None)
    tool, arguments = tool_call(fields)
    arguments["cwd"] = str(marker.parent)
    arguments["timeout"] = 20
    result = await servers[case.mode].call_tool(tool, arguments)
    text = text_of(result)
    shown = f"{case.id} ({case.mode}): {text[:300]!r}"
    if case.expect == "refused":
        assert text.startswith("[DENIED"), shown
    elif case.expect == "confirm":
        assert text.startswith("[CONFIRM REQUIRED tier 3"), shown
    else:
        assert not text.startswith(("[DENIED", "[CONFIRM", "[ERROR")), shown
    assert not marker.exists(), f"{shown}: the marker appeared"
    assert (doomed / "sub" / "b.txt").exists(), f"{shown}: the doomed tree is gone"
    if victim is not None:
        assert victim.poll() is None, f"{shown}: the process outside the call was ended"
        os.kill(victim.pid, 0)
