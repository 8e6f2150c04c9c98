"""Settings by area (relay_shell/settings/): every RELAY_SHELL_* name of the flat settings still read, each in one
area; the values held parsed, from the environment's text and the file's TOML values alike; where a key is written
in a file. The config file through the command line: tests/integration/test_config_file.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from relay_shell.errors import ConfigError
from relay_shell.settings.file import key_line
from relay_shell.settings.load import load_settings, unknown_variables
from relay_shell.settings.model import Settings, areas, by_area, setting_fields
from relay_shell.settings.offhost import JOURNALD_SOCKET, CheckpointInterval, SyslogTarget, checkpoint_interval

# The settings before the areas (the flat config module at e1d093d): each must keep its RELAY_SHELL_* name.
FLAT_NAMES = """
transport http_host http_port http_allowed_hosts http_allowed_origins token_file metrics_token_name oauth_state_dir
oauth_issuer oauth_lock_first_client oauth_access_ttl oauth_refresh_ttl audit_path audit_chain audit_fsync
audit_on_failure policy_mode policy_deny policy_allow confirm_tier3 confirm_ttl max_output max_output_hard
max_timeout kill_grace containment max_concurrent_calls max_sessions session_buffer_bytes session_idle_timeout
session_max_lifetime secret_env_allow record_dir record_max_bytes ssh_config inventory ssh_known_hosts
ssh_connect_timeout ssh_max_connections ssh_max_channels ssh_idle_timeout ssh_keepalive max_forwards
forward_idle_timeout max_transfer_bytes fanout_max_hosts fanout_max_concurrency metrics_addr runbook_dir
runbook_max_files runbook_max_bytes audit_syslog audit_syslog_ca audit_syslog_cert audit_syslog_key audit_journald
audit_signing_key audit_checkpoint_interval gate exec_trace exec_deny exec_trace_entries
""".split()  # noqa: SIM905  # a list of 62 names reads better as words
# Settings added since, by the issue that added them: a new setting must be listed here on purpose.
ADDED = {
    "readonly_enforcement": 26,
    "passprompt": 26,
    "yield_after": 28,
    "max_jobs": 28,
    "job_retention": 28,
    "output_store_bytes": 28,
    "output_retention": 28,
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for key in list(os.environ):
        if key.startswith("RELAY_SHELL_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path


def test_every_flat_name_is_a_setting_of_exactly_one_area() -> None:
    assert len(FLAT_NAMES) == 62
    assert sorted(setting_fields()) == sorted(FLAT_NAMES + list(ADDED))
    per_area = [name for model in areas().values() for name in model.model_fields]
    assert len(per_area) == len(set(per_area)) == 62 + len(ADDED)
    assert setting_fields()["max_sessions"][0] == setting_fields()["session_max_lifetime"][0] == "sessions"


def test_every_variable_is_read_into_its_area(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_SHELL_MAX_SESSIONS", "3")
    monkeypatch.setenv("relay_shell_kill_grace", "5")  # case-insensitive, as pydantic-settings read them before
    settings = load_settings()
    assert settings.sessions.max_sessions == 3 and settings.limits.kill_grace == 5.0
    assert unknown_variables() == []


def test_the_config_variable_is_not_an_unknown_setting(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = clean_env / "relay.toml"
    config.write_text("[sessions]\nmax_sessions = 4\n")
    monkeypatch.setenv("RELAY_SHELL_CONFIG", str(config))
    monkeypatch.setenv("RELAY_SHELL_SESIONS", "1")
    assert load_settings().sessions.max_sessions == 4
    assert unknown_variables() == ["RELAY_SHELL_SESIONS"]


def test_a_section_named_in_another_case_is_refused(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TOML names are case-sensitive (adr/0035): `[HTTP]` was read as [http] (as pydantic-settings matched it,
    adr/0030), so a file could set one setting twice ([sessions] and [Sessions]) and `config show` called the value
    of the one it did not look in a default (review nit). Now it is an error naming the section meant."""
    config = clean_env / "relay.toml"
    config.write_text("[http]\nhttp_port = 9001\n[Sessions]\nmax_sessions = 4\n")
    monkeypatch.setenv("RELAY_SHELL_CONFIG", str(config))
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert str(raised.value) == (
        f"{config}:3: [Sessions]: unknown section (TOML names are case-sensitive); did you mean [sessions]?"
    )


def test_by_area_groups_flat_names_and_refuses_others() -> None:
    assert by_area({"max_sessions": 2, "max_output": 2048}) == {
        "sessions": {"max_sessions": 2},
        "limits": {"max_output": 2048},
    }
    with pytest.raises(ValueError, match="'max_session' is not a relay-shell setting"):
        by_area({"max_session": 2})


def test_an_area_no_source_sets_equals_its_validated_defaults(clean_env: Path) -> None:
    """Unset areas are made without validation (settings/model.py): their defaults must be what validation makes."""
    for name, model in areas().items():
        assert model.model_construct() == model.model_validate({}), name


def test_values_are_held_parsed_from_text_and_from_toml_values(tmp_path: Path) -> None:
    from_text = Settings(
        http={"http_allowed_hosts": " a.example:443, ,b.example:* ", "http_allowed_origins": ""},
        sessions={"secret_env_allow": "DB_*,PGPASSWORD"},
        offhost={"audit_syslog": "tls://[::1]:6514", "audit_checkpoint_interval": "1000,5m"},
        metrics={"metrics_addr": "localhost:9464"},
        trace={"exec_deny": "^/usr/bin/nc\n\n(^|/)socat( |$)"},
    )
    from_toml = Settings(
        http={"http_allowed_hosts": ["a.example:443", "b.example:*"], "http_allowed_origins": []},
        sessions={"secret_env_allow": ["DB_*", "PGPASSWORD"]},
        offhost={"audit_syslog": "tls://[::1]:6514", "audit_checkpoint_interval": "1000,300s"},
        metrics={"metrics_addr": "127.0.0.1:9464"},
        trace={"exec_deny": ["^/usr/bin/nc", "(^|/)socat( |$)"]},
    )
    for settings in (from_text, from_toml):
        assert settings.http.http_allowed_hosts == ("a.example:443", "b.example:*")
        assert settings.http.http_allowed_origins == ()
        assert settings.sessions.secret_env_allow == ("DB_*", "PGPASSWORD")
        assert settings.offhost.audit_syslog == SyslogTarget("tls", host="::1", port=6514)
        assert settings.offhost.audit_checkpoint_interval == CheckpointInterval(1000, 300.0)
        assert settings.metrics.metrics_addr == ("127.0.0.1", 9464)
        assert [pattern.pattern for pattern in settings.trace.exec_deny] == ["^/usr/bin/nc", "(^|/)socat( |$)"]
    assert from_text.model_dump(mode="json") == from_toml.model_dump(mode="json")


def test_parsed_values_are_written_back_as_settings(tmp_path: Path) -> None:
    """`config show` prints model_dump(mode="json"): each parsed value as its setting's text."""
    socket_path = tmp_path / "journal.sock"
    socket_path.touch()
    settings = Settings(offhost={"audit_syslog": "unix:///dev/log", "audit_journald": str(socket_path)})
    dumped = settings.model_dump(mode="json")
    assert dumped["offhost"]["audit_syslog"] == "unix:/dev/log"
    assert dumped["offhost"]["audit_journald"] == str(socket_path)
    assert dumped["offhost"]["audit_checkpoint_interval"] == "1000,5m"
    assert dumped["metrics"]["metrics_addr"] == "" and dumped["policy"]["policy_deny"] == []
    assert Settings().model_dump(mode="json")["offhost"]["audit_journald"] == "off"
    assert SyslogTarget("journald", path=JOURNALD_SOCKET) == SyslogTarget("journald", path=JOURNALD_SOCKET)


@pytest.mark.parametrize("text", ["1000", "60s", "5m", "1h", "24h", "90s", "7,1s", "10000000,86400s"])
def test_a_checkpoint_interval_round_trips_through_its_text(text: str) -> None:
    interval = checkpoint_interval(text)
    assert checkpoint_interval(interval.text()) == interval


def test_a_parsed_metrics_address_is_checked_again() -> None:
    """A (host, port) given already parsed is not trusted: the listener has no authentication."""
    with pytest.raises(ValueError, match="must be loopback"):
        Settings(metrics={"metrics_addr": ("10.0.0.1", 9464)})


@pytest.mark.parametrize("value", [5, ["tcp://127.0.0.1:514"], {"host": "x"}])
def test_a_parsed_setting_given_the_wrong_toml_type_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="must be a string"):
        Settings(offhost={"audit_syslog": value})


TOML = """\
# relay-shell
transport_is_not_here = 1

[http]
transport = "http"
"http_port" = 8080

[sessions]  # the sessions
max_sessions = 4
record_dir = ""

[policy]
policy_deny = [
  "^rm",
]
runbooks.gate = "briefing"
ssh = { ssh_keepalive = 10 }
"""


@pytest.mark.parametrize(
    ("path", "line"),
    [
        (("http", "transport"), 5),
        (("http", "http_port"), 6),
        (("sessions", "max_sessions"), 9),
        (("sessions",), 8),
        (("policy", "policy_deny"), 13),
        (("runbooks", "gate"), None),  # under [policy], `runbooks.gate` is policy.runbooks.gate
        (("policy", "runbooks", "gate"), 16),
        (("ssh", "ssh_keepalive"), None),  # likewise policy.ssh
        (("sessions", "max_sesions"), 8),  # a key not written: its section's header
        (("transport_is_not_here",), 2),
    ],
)
def test_key_line_finds_where_a_key_is_written(path: tuple[str, ...], line: int | None) -> None:
    assert key_line(TOML, path) == line


def test_key_line_finds_dotted_and_inline_keys_at_the_top() -> None:
    text = "sessions.max_sessions = 3\nssh = { ssh_keepalive = 10 }\n[http]\n"
    assert key_line(text, ("sessions", "max_sessions")) == 1
    assert key_line(text, ("ssh", "ssh_keepalive")) == 2  # the inline table holding it
    assert key_line(text, ("http",)) == 3
