"""The runbook settings: RUNBOOK_DIR, RUNBOOK_MAX_FILES, RUNBOOK_MAX_BYTES, GATE. A bad value stops startup with
exit code 2 and one line naming the variable, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay_shell.errors import ConfigError
from relay_shell.settings.load import load_settings
from tests.integration.test_cli import run_server
from tests.unit.test_config import clean_env  # noqa: F401  # clean_env is a fixture


def test_defaults_are_off(clean_env: Path) -> None:  # noqa: F811
    settings = load_settings()
    assert settings.runbooks.runbook_dir is None and settings.runbooks.gate == "off"
    assert settings.runbooks.runbook_max_files == 2000 and settings.runbooks.runbook_max_bytes == 262144


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("RELAY_SHELL_RUNBOOK_DIR", "/nonexistent/runbooks", "is not a directory; allowed: empty (off) or a directory"),
        ("RELAY_SHELL_RUNBOOK_MAX_FILES", "0", "allowed: runbook files loaded at most"),
        ("RELAY_SHELL_RUNBOOK_MAX_FILES", "100001", "1 to 10000"),
        ("RELAY_SHELL_RUNBOOK_MAX_BYTES", "100", "allowed: bytes one runbook file may have, 1024 to 16777216"),
        ("RELAY_SHELL_GATE", "strict", "allowed: off or briefing"),
    ],
)
def test_invalid_runbook_settings_name_variable_value_and_allowed(
    clean_env: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    value: str,
    fragment: str,
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert name in message and repr(value) in message and fragment in message
    assert "\n" not in message


def test_a_file_is_not_a_runbook_directory(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "runbooks.md"
    not_a_directory.write_text("x")
    done = run_server({"RELAY_SHELL_RUNBOOK_DIR": str(not_a_directory), "RELAY_SHELL_AUDIT_PATH": str(tmp_path / "a")})
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"relay-shell: configuration error: RELAY_SHELL_RUNBOOK_DIR='{not_a_directory}': is not a directory"
        )
    )


def test_the_directory_is_resolved(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    (clean_env / "real").mkdir()
    (clean_env / "link").symlink_to(clean_env / "real")
    monkeypatch.setenv("RELAY_SHELL_RUNBOOK_DIR", str(clean_env / "link"))
    assert load_settings().runbooks.runbook_dir == clean_env / "real"
