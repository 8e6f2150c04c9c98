"""The renovation (issue 25) is a re-cut, not a rewrite: the MCP surface (tools, schemas, annotations, prompts,
resources) and the audit log of a fixed scenario are the same as before it, apart from timestamps, ids and the
digests that depend on them (`surface_snapshot.py` says what is masked and how the expected file was made)."""

from __future__ import annotations

import difflib
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO_ROOT
from tests.e2e.local.surface_snapshot import scenario

pytestmark = pytest.mark.anyio

EXPECTED = REPO_ROOT / "tests" / "data" / "surface_snapshot.json"


def _lines(value: object) -> list[str]:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines()


async def test_surface_and_scenario_log_are_unchanged(tmp_path: Path) -> None:
    expected = orjson.loads(EXPECTED.read_bytes())
    got = await scenario(tmp_path)
    for part in ("surface", "readonly_surface", "results", "records"):
        if got[part] != expected[part]:
            diff = "\n".join(list(difflib.unified_diff(_lines(expected[part]), _lines(got[part]), lineterm=""))[:80])
            pytest.fail(f"{part} differs from {EXPECTED.name}:\n{diff}")
