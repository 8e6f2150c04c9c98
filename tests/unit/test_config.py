"""Configuration: defaults, ranges, one-line errors (exit code 2 and --check-config, as a process:
tests/integration/test_cli.py)."""

import os
from pathlib import Path

import pytest

from relay_shell.arguments import clamp
from relay_shell.errors import ConfigError
from relay_shell.settings.load import load_settings
from relay_shell.settings.metrics import metrics_host_port
from relay_shell.settings.patterns import parse_patterns


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    # monkeypatch.setenv/delenv only shape the real environment that load_settings reads.
    for key in list(os.environ):
        if key.startswith("RELAY_SHELL_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path


def test_defaults(clean_env: Path) -> None:
    settings = load_settings()
    assert settings.http.transport == "stdio"
    assert settings.policy.policy_mode == "open"
    assert settings.audit.audit_chain is True
    assert settings.audit.audit_on_failure == "refuse"
    assert settings.limits.max_output == 65536
    assert settings.audit.audit_path == clean_env / "state" / "relay-shell" / "audit.jsonl"


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("RELAY_SHELL_MAX_TIMEOUT", "abc", "allowed: seconds, 1 to 86400"),
        ("RELAY_SHELL_MAX_TIMEOUT", "0", "allowed: seconds, 1 to 86400"),
        ("RELAY_SHELL_MAX_OUTPUT", "10", "allowed: bytes"),
        ("RELAY_SHELL_POLICY_MODE", "paranoid", "allowed: open, guarded or readonly"),
        ("RELAY_SHELL_AUDIT_ON_FAILURE", "ignore", "allowed: refuse or continue"),
        ("RELAY_SHELL_AUDIT_FSYNC", "sometimes", "allowed: off or always"),
        ("RELAY_SHELL_AUDIT_CHAIN", "perhaps", "allowed: true or false"),
        ("RELAY_SHELL_TRANSPORT", "carrier-pigeon", "allowed: stdio"),
        ("RELAY_SHELL_POLICY_DENY", "rm (-rf", "is not a valid regex"),
        ("RELAY_SHELL_METRICS_ADDR", "0.0.0.0:9464", "must be loopback"),
        ("RELAY_SHELL_METRICS_ADDR", "localhost", "HOST:PORT"),
    ],
)
def test_invalid_value_names_variable_value_and_allowed(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert name in message and repr(value) in message and fragment in message
    assert "\n" not in message


def test_output_above_hard_cap_is_rejected(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_SHELL_MAX_OUTPUT", "200000")
    monkeypatch.setenv("RELAY_SHELL_MAX_OUTPUT_HARD", "100000")
    with pytest.raises(ConfigError, match="MAX_OUTPUT_HARD"):
        load_settings()


def test_patterns_json_or_lines() -> None:
    assert parse_patterns('["rm -rf", "^reboot$"]') == ["rm -rf", "^reboot$"]
    assert parse_patterns("rm -rf\n\n^reboot$\n") == ["rm -rf", "^reboot$"]
    assert parse_patterns("  ") == []


def test_metrics_address() -> None:
    assert metrics_host_port("127.0.0.1:0") == ("127.0.0.1", 0)
    assert metrics_host_port("[::1]:9464") == ("::1", 9464)
    with pytest.raises(ValueError):
        metrics_host_port("10.0.0.1:9464")


def test_clamp_says_what_happened() -> None:
    assert clamp("timeout", 5, 0.1, 10) == (5, None)
    value, note = clamp("timeout", 99999, 0.1, 3600)
    assert value == 3600 and note == "timeout 99999 lowered to 3600 (allowed 0.1 to 3600)"
    value, note = clamp("timeout", -1, 0.1, 3600)
    assert value == 0.1 and note is not None and "raised to 0.1" in note
