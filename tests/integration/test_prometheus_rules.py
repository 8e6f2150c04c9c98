"""deploy/prometheus/relay-shell-rules.yml: `promtool check rules` is clean, `promtool test rules` passes, and
every alert has a summary, a runbook-style description, a severity, and unit tests that see it fire and stay
silent. The rules loaded by a real Prometheus scraping a real server: tests/e2e/ops/test_alerts_and_dashboard.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

RULES_DIRECTORY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = RULES_DIRECTORY / "relay-shell-rules.yml"
RULE_TESTS = RULES_DIRECTORY / "relay-shell-rules.test.yml"

# What issue 20 asks alerts for, by the alert that covers it.
REQUIRED_ALERTS = {
    "RelayShellAuditWriteFailing",  # audit write failures
    "RelayShellCallsRefusedAuditUnavailable",  # calls refused because the log is unavailable
    "RelayShellAuditShipLagging",  # shipping lag above a threshold
    "RelayShellCheckpointSigningFailing",  # checkpoint signing failures
    "RelayShellDeniedCallsBurst",  # a burst of denied calls
    "RelayShellBusyRefusingCalls",  # the server busy
    "RelayShellSessionsNearLimit",  # sessions near the limit
}


def alerting_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_check_rules_is_clean() -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerting_rules())} rules found" in checked.stdout, checked.stdout


def test_promtool_unit_tests_pass() -> None:
    tested = subprocess.run(
        ["promtool", "test", "rules", RULE_TESTS.name],
        cwd=RULES_DIRECTORY,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout, tested.stdout


def test_every_alert_the_issue_names_exists_with_summary_description_and_severity() -> None:
    rules = alerting_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)), names
    assert set(names) >= REQUIRED_ALERTS, REQUIRED_ALERTS - set(names)
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description"}, rule["alert"]
        assert "{{ $labels.instance }}" in annotations["summary"], rule["alert"]  # which host
        # runbook-style: what it means, then what to check and do
        description = annotations["description"]
        assert len(description) > 300, rule["alert"]
        assert "Check" in description, rule["alert"]
        assert "RELAY_SHELL_" in description, rule["alert"]  # names the setting involved


def test_every_alert_has_unit_tests_that_see_it_fire_and_stay_silent() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alerting_rules()}
    assert fired == names, names ^ fired
    assert silent == names, names ^ silent
