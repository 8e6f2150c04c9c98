"""The config file through the real command line (`relay-shell --config FILE`, RELAY_SHELL_CONFIG): the server uses
it, the environment overrides it, a misspelt key, a wrong type and an out-of-range value each stop startup with
exit code 2 and one line naming the file, the line, the key and the problem, and `relay-shell config show`
prints the effective settings with their sources, secrets masked, as a file that round-trips."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from relay_shell.settings.model import setting_fields
from tests.conftest import fields, server_env

pytestmark = pytest.mark.anyio


def relay_shell(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    return subprocess.run(
        [sys.executable, "-m", "relay_shell", *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


async def server_info(audit_path: Path, args: list[str], **settings: str) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "relay_shell", *args], env=server_env(audit_path, **settings)
    )
    async with Client(params, mode="legacy") as client:  # type: ignore[arg-type]
        info: dict[str, Any] = fields(await client.call_tool("server_info", {}))["info"]
        return info


def shown(output: str) -> dict[tuple[str, str], tuple[str, str]]:
    """`config show`'s lines by (area, key): the line without its source, and the source."""
    lines = {}
    area = ""
    for line in output.splitlines():
        header = re.fullmatch(r"\[(\w+)\]", line)
        if header:
            area = header.group(1)
            continue
        setting = re.fullmatch(r"(# )?(\w+) = (.*?)\s+# (.*)", line)
        if area and setting:
            commented, key, value, source = setting.groups()
            lines[area, key] = (f"{commented or ''}{key} = {value}", source)
    return lines


# -- the server uses the file; the environment overrides it ------------------------------------------------------


async def test_the_server_serves_with_the_file_given_by_option_or_variable(tmp_path: Path) -> None:
    config = tmp_path / "relay.toml"
    config.write_text('[sessions]\nmax_sessions = 3\n\n[policy]\npolicy_mode = "readonly"\n')
    by_option = await server_info(tmp_path / "a.jsonl", ["--config", str(config)])
    by_variable = await server_info(tmp_path / "b.jsonl", [], config=str(config))
    for info in (by_option, by_variable):
        assert info["sessions"]["max"] == 3 and info["policy"]["mode"] == "readonly", info


async def test_the_environment_overrides_the_file(tmp_path: Path) -> None:
    config = tmp_path / "relay.toml"
    config.write_text("[sessions]\nmax_sessions = 3\n\n[limits]\nmax_output = 4096\n")
    info = await server_info(tmp_path / "audit.jsonl", ["--config", str(config)], max_sessions="5")
    assert info["sessions"]["max"] == 5 and info["limits"]["max_output_default"] == 4096, info
    show = relay_shell("config", "show", "--config", str(config), env={"RELAY_SHELL_MAX_SESSIONS": "5"})
    assert show.returncode == 0, show.stderr
    lines = shown(show.stdout)
    assert lines["sessions", "max_sessions"] == ("max_sessions = 5", "environment RELAY_SHELL_MAX_SESSIONS")
    assert lines["limits", "max_output"] == ("max_output = 4096", f"file {config}:5")
    assert lines["limits", "max_timeout"] == ("max_timeout = 3600.0", "default")


def test_check_config_and_the_audit_tools_read_the_file(tmp_path: Path, log_path: Path) -> None:
    config = tmp_path / "relay.toml"
    config.write_text(f'[audit]\naudit_path = "{log_path}"\n')
    checked = relay_shell("--config", str(config), "--check-config")
    assert checked.returncode == 0 and f"audit log {log_path} is writable" in checked.stdout, checked
    tail = relay_shell("audit", "tail", "--config", str(config))
    assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 6, tail
    verify = relay_shell("audit", "verify", env={"RELAY_SHELL_CONFIG": str(config)})
    assert verify.returncode == 0 and "OK: 6 records" in verify.stdout, verify


# -- errors: one line, the file and line, the key, the problem -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "fragments"),
    [
        # a misspelt key: the nearest valid one is named
        ("[sessions]\nmax_sesions = 3\n", 2, ["[sessions] max_sesions: unknown setting; did you mean max_sessions?"]),
        # a wrong type
        (
            '\n[sessions]\nmax_sessions = "many"\n',
            3,
            ['[sessions] max_sessions = "many"', "must be an integer, not a string", "1 to 1024"],
        ),
        # review nit: a TOML string is no number or truth value, even one that reads as one (strict types)
        ('[sessions]\nmax_sessions = "7"\n', 2, ['[sessions] max_sessions = "7": must be an integer, not a string']),
        ('[limits]\nkill_grace = "2.5"\n', 2, ['[limits] kill_grace = "2.5": must be a number, not a string']),
        ('[audit]\naudit_chain = "true"\n', 2, ['[audit] audit_chain = "true": must be true or false, not a string']),
        # review nit: TOML names are case-sensitive; a table or key in another case is refused, never merged
        (
            "[SESSIONS]\nmax_sessions = 3\n",
            1,
            ["[SESSIONS]: unknown section (TOML names are case-sensitive); did you mean [sessions]?"],
        ),
        (
            "[sessions]\nmax_sessions = 3\n[Sessions]\nmax_sessions = 5\n",
            3,
            ["[Sessions]: unknown section", "did you mean [sessions]?"],
        ),
        (
            "[limits]\nMAX_OUTPUT = 2048\n",
            2,
            ["[limits] MAX_OUTPUT: unknown setting (TOML names are case-sensitive); did you mean max_output?"],
        ),
        # review S3: a truth value is no number and a number no truth value (pydantic's lax mode would take them)
        ("[audit]\naudit_chain = 1\n", 2, ["[audit] audit_chain = 1: must be true or false, not the number 1"]),
        ("[auth]\noauth_lock_first_client = 0.0\n", 2, ["oauth_lock_first_client = 0.0: must be true or false"]),
        ("[sessions]\nmax_sessions = true\n", 2, ["[sessions] max_sessions = true: must be a number, not true"]),
        ("[http]\nhttp_port = true\n", 2, ["[http] http_port = true: must be a number, not true; allowed: "]),
        ("[limits]\nkill_grace = false\n", 2, ["[limits] kill_grace = false: must be a number, not false"]),
        # out of range
        ("[sessions]\n\nmax_sessions = 5000\n", 3, ["[sessions] max_sessions = 5000", "less than or equal to 1024"]),
        # a key in the wrong section, a misspelt section, a setting outside any section
        ("[http]\nmax_sessions = 3\n", 2, ["unknown setting in [http]; did you mean [sessions] max_sessions?"]),
        ("[sesions]\nmax_sessions = 3\n", 1, ["[sesions]: unknown section; did you mean [sessions]?"]),
        ("max_sessions = 3\n", 1, ["max_sessions: a setting outside its section; put it under [sessions]"]),
        # a parsed setting's own check, and a pattern RE2 refuses
        ('[offhost]\naudit_syslog = "tcp://collector"\n', 2, ["[offhost] audit_syslog", "HOST:PORT"]),
        ('[policy]\npolicy_deny = ["rm(?=x)"]\n', 2, ["'rm(?=x)'", "invalid perl operator: (?="]),
        # a rule over two settings
        ("[limits]\nmax_output = 200000\nmax_output_hard = 100000\n", 2, ["must not exceed"]),
        # not TOML at all
        ("[sessions\nmax_sessions = 3\n", 1, ["not valid TOML", "column 10"]),
    ],
)
def test_a_bad_file_stops_startup_with_one_line_naming_file_line_key_and_problem(
    tmp_path: Path, text: str, line: int, fragments: list[str]
) -> None:
    config = tmp_path / "relay.toml"
    config.write_text(text)
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    for args in (["--config", str(config)], ["--config", str(config), "--check-config"], ["config", "show"]):
        result = relay_shell(*args, env={**env, "RELAY_SHELL_CONFIG": str(config)} if args[0] == "config" else env)
        error = result.stderr.strip()
        assert result.returncode == 2, (args, result)
        assert error.count("\n") == 0 and "Traceback" not in error, error
        assert error.startswith(f"relay-shell: configuration error: {config}:{line}: "), error
        for fragment in fragments:
            assert fragment in error, (fragment, error)
        assert result.stdout == ""


def test_the_environment_still_reads_truth_values_as_text(tmp_path: Path) -> None:
    """Review S3 refuses a number for a truth value in the file; RELAY_SHELL_AUDIT_CHAIN=0 (text) stays false."""
    result = relay_shell("config", "show", env={"RELAY_SHELL_AUDIT_CHAIN": "0", "RELAY_SHELL_MAX_SESSIONS": "7"})
    assert result.returncode == 0, result.stderr
    lines = shown(result.stdout)
    assert lines["audit", "audit_chain"][0] == "audit_chain = false" and lines["sessions", "max_sessions"][0] == (
        "max_sessions = 7"
    )


def test_an_empty_variable_that_empties_the_files_setting_is_never_silent(tmp_path: Path) -> None:
    """Review N3: `RELAY_SHELL_POLICY_DENY=` left in a unit overrides the file's deny list with none. The
    environment wins (empty is how a setting is turned off), with a warning naming both, at start and in config
    show; an empty variable for a setting the file leaves alone, or none at all, says nothing."""
    config = tmp_path / "relay.toml"
    config.write_text('[policy]\npolicy_mode = "guarded"\npolicy_deny = ["mkfs", "^rm -rf /$"]\n')
    empty = {"RELAY_SHELL_POLICY_DENY": "", "RELAY_SHELL_EXEC_DENY": " "}
    warning = (
        f"relay-shell: warning: RELAY_SHELL_POLICY_DENY is empty and overrides [policy] policy_deny set in "
        f"{config}:3: the setting is empty; unset the variable to use the file's value"
    )
    for args in (["--config", str(config), "--check-config"], ["config", "show", "--config", str(config)]):
        result = relay_shell(*args, env={**empty, "XDG_STATE_HOME": str(tmp_path / "state")})
        assert result.returncode == 0, result.stderr
        assert result.stderr.splitlines() == [warning], result.stderr
        quiet = relay_shell(*args, env={"XDG_STATE_HOME": str(tmp_path / "state"), "RELAY_SHELL_EXEC_DENY": ""})
        assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    show = relay_shell("config", "show", "--config", str(config), env=empty)
    assert shown(show.stdout)["policy", "policy_deny"] == ("policy_deny = []", "environment RELAY_SHELL_POLICY_DENY")


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    result = relay_shell("--config", str(tmp_path / "nowhere.toml"), "--check-config")
    assert result.returncode == 2
    assert "RELAY_SHELL_CONFIG=" in result.stderr and "no such file" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ("group-writable file", "the file {config} is writable by its group (mode 0664)"),
        ("world-writable file", "the file {config} is writable by others (mode 0646)"),
        ("file of another user", "the file {config} is owned by uid 65534, not root or the server's user"),
        ("world-writable directory", "the directory {directory} is writable by its group and others (mode 0777)"),
        ("directory of another user", "the directory {directory} is owned by uid 65534"),
    ],
)
def test_a_file_others_could_change_is_refused_at_startup(tmp_path: Path, change: str, fragment: str) -> None:
    """Review S5: whoever can write the config file sets the policy, so a file (or a directory above it) that
    another user owns or that its group or others can write is refused, as sshd's StrictModes refuses its own;
    the sticky /tmp above tmp_path is fine."""
    directory = tmp_path / "etc"
    directory.mkdir(mode=0o755)
    config = directory / "relay.toml"
    config.write_text('[policy]\npolicy_deny = ["mkfs"]\n')
    config.chmod(0o644)
    assert relay_shell("--config", str(config), "--check-config").returncode == 0
    if change == "group-writable file":
        config.chmod(0o664)
    elif change == "world-writable file":
        config.chmod(0o646)
    elif change == "file of another user":
        os.chown(config, 65534, -1)
    elif change == "world-writable directory":
        directory.chmod(0o777)
    else:
        os.chown(directory, 65534, -1)
    for args in (["--config", str(config), "--check-config"], ["--config", str(config)], ["config", "show"]):
        result = relay_shell(*args, env={"RELAY_SHELL_CONFIG": str(config)} if args[0] == "config" else None)
        error = result.stderr.strip()
        assert result.returncode == 2 and result.stdout == "", (args, result)
        assert error.startswith(f"relay-shell: configuration error: {config}: refused: "), error
        assert fragment.format(config=config, directory=directory) in error, error
        assert error.endswith("writable by no one else (chmod go-w, chown)") and "\n" not in error, error
    directory.chmod(0o1777)  # the sticky bit: nobody else can replace the file
    os.chown(directory, 0, -1)
    config.chmod(0o600)
    os.chown(config, os.geteuid(), -1)
    assert relay_shell("--config", str(config), "--check-config").returncode == 0


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ("link in a world-writable directory", "the directory {links} is writable by its group and others (mode 0777)"),
        ("link of another user in a sticky directory", "the symbolic link {link} is owned by uid 65534"),
        ("link to a file others may write", "the file {config} is writable by others (mode 0646)"),
        ("link to a directory others may write", "the directory {directory} is writable by its group and others"),
    ],
)
def test_a_symbolic_link_others_could_change_is_refused(tmp_path: Path, change: str, fragment: str) -> None:
    """Review nit: StrictModes followed a symbolic link to a safe file and checked only where it led. Whoever may
    replace the link (another user owning it, or anyone writing the directory that holds it) chooses the file, so
    the path is walked as the kernel resolves it: the link's owner, the directory holding it, then the directories
    and the file it leads to. `..` names no entry anyone could replace."""
    directory = tmp_path / "etc"
    directory.mkdir(mode=0o755)
    config = directory / "relay.toml"
    config.write_text('[policy]\npolicy_deny = ["mkfs"]\n')
    config.chmod(0o644)
    links = tmp_path / "links"
    links.mkdir(mode=0o755)
    link = links / "relay.toml"
    link.symlink_to(config)
    assert relay_shell("--config", str(link), "--check-config").returncode == 0
    assert relay_shell("--config", str(links / ".." / "etc" / "relay.toml"), "--check-config").returncode == 0
    if change == "link in a world-writable directory":
        links.chmod(0o777)
    elif change == "link of another user in a sticky directory":
        links.chmod(0o1777)  # in a sticky directory only its owner may replace the link: here another user
        os.lchown(link, 65534, -1)
    elif change == "link to a file others may write":
        config.chmod(0o646)
    else:
        directory.chmod(0o777)
    for args in (["--config", str(link), "--check-config"], ["--config", str(link)], ["config", "show"]):
        result = relay_shell(*args, env={"RELAY_SHELL_CONFIG": str(link)} if args[0] == "config" else None)
        error = result.stderr.strip()
        assert result.returncode == 2 and result.stdout == "", (args, result)
        assert error.startswith(f"relay-shell: configuration error: {link}: refused: "), error
        assert fragment.format(links=links, link=link, config=config, directory=directory) in error, error
        assert "any symbolic link on the way" in error and "\n" not in error, error
    if change == "link of another user in a sticky directory":
        os.lchown(link, os.geteuid(), -1)  # the server's own link in a sticky directory is fine
        assert relay_shell("--config", str(link), "--check-config").returncode == 0


def test_an_environment_variable_keeps_its_error_with_a_file(tmp_path: Path) -> None:
    config = tmp_path / "relay.toml"
    config.write_text("[sessions]\nmax_sessions = 3\n")
    result = relay_shell("--config", str(config), "--check-config", env={"RELAY_SHELL_MAX_SESSIONS": "lots"})
    assert result.returncode == 2
    assert "configuration error: RELAY_SHELL_MAX_SESSIONS='lots': " in result.stderr, result.stderr


# -- config show: every area round-trips, secrets masked --------------------------------------------------------


def every_area(directory: Path) -> tuple[str, dict[str, str]]:
    """A config file that sets a value other than the default in every area, and the secrets it holds."""
    for name in ("tokens", "ca.pem", "client.pem", "client.key", "signing.key", "journal.sock"):
        (directory / name).write_text("x")
    (directory / "oauth").mkdir()
    (directory / "runbooks").mkdir()
    secrets = {
        "token_file": str(directory / "tokens"),
        "oauth_state_dir": str(directory / "oauth"),
        "audit_syslog_key": str(directory / "client.key"),
        "audit_signing_key": str(directory / "signing.key"),
        "oauth_issuer": "hunter2",  # the password in the issuer's URL
    }
    text = f"""\
# every area
[http]
transport = "http"
http_port = 9000
http_allowed_hosts = ["relay.example:443", "*:9000"]

[auth]
token_file = "{directory}/tokens"
oauth_state_dir = "{directory}/oauth"
oauth_issuer = "https://operator:hunter2@relay.example"
oauth_access_ttl = 600

[audit]
audit_path = "{directory}/audit.jsonl"
audit_fsync = "always"

[offhost]
audit_syslog = "tls://collector.example:6514"
audit_syslog_ca = "{directory}/ca.pem"
audit_syslog_cert = "{directory}/client.pem"
audit_syslog_key = "{directory}/client.key"
audit_journald = "{directory}/journal.sock"
audit_signing_key = "{directory}/signing.key"
audit_checkpoint_interval = "500,1h"

[policy]
policy_mode = "guarded"
policy_deny = ["^rm -rf /$", "mkfs"]
policy_allow = ['^systemctl restart \\w+$']
confirm_tier3 = "token"

[limits]
max_output = 8192
kill_grace = 0.5
containment = "subreaper"

[sessions]
max_sessions = 4
secret_env_allow = ["DB_*"]
record_dir = "{directory}/casts"

[jobs]
yield_after = 30
max_jobs = 3

[ssh]
ssh_config = ""
ssh_known_hosts = "strict"
fanout_max_hosts = 12

[metrics]
metrics_addr = "127.0.0.1:9464"
metrics_token_name = "prometheus"

[trace]
exec_trace = "on"
exec_deny = ["(^|/)nc( |$)"]

[runbooks]
runbook_dir = "{directory}/runbooks"
gate = "briefing"
"""
    return text, secrets


def test_every_area_round_trips_through_config_show_with_secrets_masked(tmp_path: Path) -> None:
    text, secrets = every_area(tmp_path)
    config = tmp_path / "relay.toml"
    config.write_text(text)
    first = relay_shell("config", "show", "--config", str(config))
    assert first.returncode == 0, first.stderr
    written = tomllib.loads(text)
    output = tomllib.loads(first.stdout)
    lines = shown(first.stdout)
    assert set(output) == set(written) == {area for area, _ in lines}  # every area, in the file's shape
    masked = {key for (_, key), (line, _) in lines.items() if line.startswith("# ")}
    assert masked == set(secrets), masked
    for area, values in written.items():
        for key, value in values.items():
            line, source = lines[area, key]
            assert source.startswith(f"file {config}:"), (key, source)
            line_number = int(source.removesuffix(" (masked)").rsplit(":", 1)[1])
            assert text.splitlines()[line_number - 1].startswith(f"{key} = "), (key, source)
            if key in masked:
                assert "[REDACTED]" in line and source.endswith("(masked)") and key not in output[area]
            else:
                assert output[area][key] == value, (key, output[area][key], value)
    for secret in secrets.values():
        assert secret not in first.stdout, secret
    # The output is a config file: with the masked lines filled in again (as the operator who has the secrets
    # would), it gives exactly the same settings.
    originals = {line.split(" = ")[0]: line for line in text.splitlines() if " = " in line}
    refilled = [
        originals[match.group(1)] if (match := re.match(r"# (\w+) = ", line)) and match.group(1) in masked else line
        for line in first.stdout.splitlines()
    ]
    again = tmp_path / "again.toml"
    again.write_text("\n".join(refilled) + "\n")
    second = relay_shell("config", "show", "--config", str(again))
    assert second.returncode == 0, second.stderr
    assert {key: line for key, (line, _) in shown(second.stdout).items()} == {
        key: line for key, (line, _) in lines.items()
    }


def test_patterns_that_look_like_secrets_round_trip_through_config_show(tmp_path: Path) -> None:
    """Review S4: a deny pattern that names a password option looks like a secret to redaction, but it is the
    policy: `config show` must print it, so that its output read back as a config file denies the same."""
    config = tmp_path / "relay.toml"
    config.write_text(
        "[policy]\n"
        "policy_deny = ['--password=\\S+', 'Authorization: Bearer .*', 'mysql -p\\S+', 'mkfs']\n"
        "policy_allow = ['^export AWS_SECRET_ACCESS_KEY=x$']\n"
        "[trace]\n"
        "exec_deny = ['sshpass -p \\S+', 'https://admin:hunter2@']\n"
        "[sessions]\n"
        'secret_env_allow = ["DB_PASSWORD", "API_TOKEN"]\n'
    )
    written = tomllib.loads(config.read_text())
    first = relay_shell("config", "show", "--config", str(config))
    assert first.returncode == 0, first.stderr
    assert "[REDACTED]" not in first.stdout and "(masked)" not in first.stdout, first.stdout
    output = tomllib.loads(first.stdout)
    for area, values in written.items():
        for key, value in values.items():
            assert output[area][key] == value, (key, output[area][key])
    again = tmp_path / "again.toml"
    again.write_text(first.stdout)
    second = relay_shell("config", "show", "--config", str(again))
    assert second.returncode == 0, second.stderr
    assert {key: line for key, (line, _) in shown(second.stdout).items()} == {
        key: line for key, (line, _) in shown(first.stdout).items()
    }


def test_config_show_names_each_source_and_the_defaults(tmp_path: Path) -> None:
    result = relay_shell("config", "show", env={"RELAY_SHELL_POLICY_MODE": "readonly", "RELAY_SHELL_POLICY_MOD": "x"})
    assert result.returncode == 0, result.stderr
    lines = shown(result.stdout)
    assert len(lines) == len(setting_fields())  # every setting, each pinned by tests/unit/test_settings_areas.py
    assert lines["policy", "policy_mode"] == ('policy_mode = "readonly"', "environment RELAY_SHELL_POLICY_MODE")
    assert all(source == "default" for key, (_, source) in lines.items() if key != ("policy", "policy_mode"))
    assert "# Config file: none" in result.stdout
    assert "RELAY_SHELL_POLICY_MOD is not a relay-shell setting" in result.stderr


def test_a_start_without_a_file_pays_for_none_of_it(tmp_path: Path) -> None:
    """No config file: pydantic-settings and the TOML reader, the misspelling suggestions, `config show` and RE2 (no
    patterns) stay unloaded; with a file, only pydantic-settings and the TOML reader come in."""
    probe = (
        "import sys, relay_shell.cli\n"
        "code = relay_shell.cli.main(sys.argv[1:])\n"
        "names = ('pydantic_settings', 'tomllib', 'difflib', 'relay_shell.config_show', 're2')\n"
        "print(code, *[name for name in names if name in sys.modules])\n"
    )
    env = {**server_env(tmp_path / "audit.jsonl"), "PYTHONDONTWRITEBYTECODE": "1"}
    plain = subprocess.run([sys.executable, "-c", probe, "--check-config"], env=env, capture_output=True, text=True)
    assert plain.stdout.splitlines()[-1] == "0", plain
    config = tmp_path / "relay.toml"
    config.write_text("[sessions]\nmax_sessions = 3\n")
    with_file = subprocess.run(
        [sys.executable, "-c", probe, "--check-config", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert with_file.stdout.splitlines()[-1] == "0 pydantic_settings tomllib", with_file
