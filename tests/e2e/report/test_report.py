"""`relay-shell audit report` of a log real servers wrote (scenario.py), opened in a real headless Chromium.

The page makes no request and logs no error; the banner and the counts match the log; filtering the timeline by tool
and by text shows the right rows; a call's page shows its exec trace, digests, fan-out results, confirmation and its
session's transcript; markup in a logged command stays text; without JavaScript the banner, summary and exceptions
are there. A tampered log and truncated copies give a red banner naming the records, and a non-zero exit.
Screenshots: conftest.SCREENSHOTS (`.artifacts/report/` in the checkout), one or more per test, named after it.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from relay_shell.audit.verify import verify_files
from tests.e2e.report.conftest import Made, Opened, make_report, open_report
from tests.e2e.report.scenario import CUT, LOCAL, MARKUP, SHRED, SLOW, TYPED, Served

pytestmark = pytest.mark.fleet(hosts=2)  # the module's sshd fleet (tests/conftest.py), for the fan-out


@pytest.fixture(scope="module")
def report(served: Served, tmp_path_factory: pytest.TempPathFactory) -> Made:
    output = tmp_path_factory.mktemp("made") / "report.html"
    made = make_report(
        output, served.audit, options=("--public-key", str(served.public_key), "--record-dir", str(served.casts))
    )
    assert made.returncode == 0, made.stdout + made.stderr
    return made


def figure(opened: Opened, label: str) -> int:
    """The number a summary figure shows (`<div class="figure"><b>12</b>calls</div>`)."""
    for text in opened.page.locator(".figure").all_inner_texts():
        number, _, name = text.partition("\n")
        if name.strip() == label:
            return int(number.replace(",", ""))
    raise AssertionError(f"no figure {label!r}")


def shown_rows(opened: Opened) -> list[list[str]]:
    return [row.locator("td").all_inner_texts() for row in opened.page.locator("#t-body tr").all()]


def call_id_of(served: Served, command: str, tool: str = "shell_exec") -> str:
    return str(served.call_of(command, tool)["call_id"])


def open_call(opened: Opened, call_id: str) -> str:
    opened.page.evaluate(f"location.hash = 'call=' + {call_id!r}")
    opened.page.wait_for_selector(f"#call h2:has-text('{call_id}')", timeout=10_000)
    return opened.page.inner_text("#call")


def test_the_report_opens_quietly_with_the_banner_and_counts_of_the_log(
    served: Served, report: Made, browser: Browser
) -> None:
    records = served.records()
    calls = {record["call_id"] for record in records if record.get("phase")}
    events = [r for r in records if not r.get("phase") and r["tool"] not in ("audit:checkpoint", "audit:continue")]
    assert verify_files([served.audit]).ok
    opened = open_report(browser, report.path)
    opened.screenshot("first-screen")
    banner = opened.page.inner_text("#trust")
    assert "Hash chain intact" in banner and f"{len(records)} records verified from genesis" in banner
    assert "Signed checkpoints verified" in banner
    assert "Interrupted calls" in banner and served.crashed_call_id in banner
    assert figure(opened, "calls") == len(calls)
    assert figure(opened, "denied") == sum(r.get("outcome") == "denied" for r in records)
    assert figure(opened, "timeouts") == sum(r.get("outcome") == "timeout" for r in records) == 2  # SLOW, MARKUP
    assert figure(opened, "interrupted or running") == 1
    assert figure(opened, "tier-3 confirmations") == 1
    assert figure(opened, "records failing verification") == 0
    assert opened.page.inner_text("#t-status").startswith(f"{len(calls) + len(events)} of {len(calls) + len(events)}")
    policies = opened.page.locator("#summary table").first.inner_text()
    assert "open\ttoken\ton\toff" in policies and "guarded" in policies  # server A, then server C
    opened.assert_quiet()


def test_filtering_by_tool_and_by_text_shows_the_right_rows(served: Served, report: Made, browser: Browser) -> None:
    opened = open_report(browser, report.path)
    opened.page.select_option("#f-tool", label="ssh_fanout")
    rows = shown_rows(opened)
    assert len(rows) == 1 and rows[0][2] == "ssh_fanout" and rows[0][3] == "h01, h02", rows
    opened.screenshot("filter-by-tool")
    opened.page.select_option("#f-tool", label="any")
    opened.page.fill("#f-text", "typed-$((6*7))")
    rows = shown_rows(opened)
    assert [row[2] for row in rows] == ["session_send"], rows
    assert TYPED in rows[0][9]
    opened.page.fill("#f-text", "shred -u")
    assert sorted(row[6] for row in shown_rows(opened)) == ["confirm_required", "ok"]
    opened.page.fill("#f-text", "no such call anywhere")
    assert shown_rows(opened) == [] and opened.page.inner_text("#t-status").startswith("0 of")
    opened.assert_quiet()


def test_a_calls_page_shows_its_exec_trace_and_both_digests(served: Served, report: Made, browser: Browser) -> None:
    record = served.call_of(LOCAL)
    opened = open_report(browser, report.path)
    page_text = open_call(opened, record["call_id"])
    opened.screenshot("call-exec-trace")
    assert record["output_sha256"] in page_text and record["raw_sha256"] in page_text
    assert record["execs"]["sha256"] in page_text
    trace = opened.page.inner_text("#call .execs")
    for entry in record["execs"]["entries"]:
        assert f"pid {entry['pid']}" in trace and entry["path"] in trace
    assert "/bin/sh -c 'echo report-local | tr a-z A-Z'" in trace and "tr a-z A-Z" in trace
    # the tree: tr runs under the shell that started it
    assert opened.page.locator("#call .execs ul.tree li ul.tree li").count() >= 1
    opened.assert_quiet()


def test_a_sessions_page_plays_its_transcript_matched_by_digest(served: Served, report: Made, browser: Browser) -> None:
    ended = [r for r in served.records() if r["tool"] == "session:end" and r["session_id"] == served.session_id]
    cast = served.casts / f"{served.session_id}.cast"
    digest = hashlib.sha256(cast.read_bytes()).hexdigest()
    assert ended and ended[0]["transcript_sha256"] == digest
    spawned = next(r for r in served.records() if r["tool"] == "shell_spawn" and r.get("phase") == "end")
    opened = open_report(browser, report.path)
    page_text = open_call(opened, spawned["call_id"])
    assert f"Matched by its SHA-256 {digest}" in page_text
    assert opened.page.get_attribute("#call a[href^='file://']", "href") == cast.resolve().as_uri()
    player = opened.page.locator("#call pre.player")
    assert "typed-42" in player.inner_text()  # shown as text first
    assert "session_send" in page_text and TYPED in page_text  # the session's calls, with the typed line
    # Played: the screen starts again from the first event (the shell starting, not yet the typed line), then the
    # rest comes at its recorded pace.
    first_step = opened.page.evaluate(
        "document.querySelector('#call button').click(), document.querySelector('#call pre.player').textContent"
    )
    assert "typed-42" not in first_step, first_step
    opened.page.wait_for_selector("#call pre.player:has-text('typed-42')", timeout=10_000)
    opened.screenshot("call-session-transcript")
    opened.assert_quiet()


def test_a_fanouts_page_shows_each_hosts_result(served: Served, report: Made, browser: Browser) -> None:
    record = served.call_of("hostname", "ssh_fanout")
    opened = open_report(browser, report.path)
    open_call(opened, record["call_id"])
    table = opened.page.locator("#call table:has(th:has-text('status'))").inner_text()
    for host in record["target"]["hosts"]:
        assert re.search(rf"{host['host']}\s+{host['status']}\s+{re.escape(host['address'])}:{host['port']}", table)
    opened.screenshot("call-fanout")
    opened.assert_quiet()


def test_exceptions_come_first_with_the_confirmation_and_the_interrupted_call(
    served: Served, report: Made, browser: Browser
) -> None:
    opened = open_report(browser, report.path)
    exceptions = opened.page.inner_text("#exceptions")
    for heading in ("Denied calls (1)", "Tier-3 confirmations (", "Timeouts (2)", "Calls whose output was cut (1)"):
        assert heading in exceptions, heading
    assert "Calls interrupted or still running (1)" in exceptions and served.crashed_call_id not in exceptions
    assert "asked for confirmation: shred destroys data" in exceptions
    assert "confirmed with the token (armed)" in exceptions and "ran (confirmed)" in exceptions
    assert CUT in exceptions and SLOW in exceptions
    confirmed = served.call_of(SHRED)
    page_text = open_call(opened, confirmed["call_id"])
    assert "Tier-3 confirmation" in page_text and "operation_confirm" in page_text
    assert confirmed["confirmation"] in page_text
    opened.screenshot("call-confirmation")
    opened.assert_quiet()


def test_markup_in_a_logged_command_stays_text(served: Served, report: Made, browser: Browser) -> None:
    record = served.call_of(MARKUP)
    opened = open_report(browser, report.path)
    assert MARKUP in opened.page.inner_text("#exceptions")  # a timeout: listed in the page itself
    opened.page.fill("#f-text", "window.pwned")
    assert [row[9] for row in shown_rows(opened)] == [MARKUP]
    open_call(opened, record["call_id"])
    assert "</script><script>window.pwned=1</script>" in opened.page.inner_text("#call .execs")
    assert opened.page.evaluate("window.pwned") is None
    assert opened.page.locator("img").count() == 0
    opened.assert_quiet()


def test_without_javascript_the_banner_summary_and_exceptions_are_there(report: Made, browser: Browser) -> None:
    opened = open_report(browser, report.path, javascript=False)
    opened.screenshot("without-javascript", full_page=True)
    assert "Hash chain intact" in opened.page.inner_text("#trust")
    assert opened.page.locator("#summary svg").count() >= 4  # calls per hour, tools, hosts, clients
    assert "Denied calls (1)" in opened.page.inner_text("#exceptions")
    assert "need JavaScript" in opened.page.inner_text("#timeline")
    opened.assert_quiet()


def edited(source: Path, target: Path, old: bytes, new: bytes) -> int:
    """A copy of `source` with `old` replaced by `new` in one line; returns that line's number."""
    lines = source.read_bytes().splitlines(keepends=True)
    number = next(index for index, line in enumerate(lines, start=1) if old in line and b'"phase":"end"' in line)
    lines[number - 1] = lines[number - 1].replace(old, new)
    target.write_bytes(b"".join(lines))
    return number


def test_a_tampered_log_gets_a_red_banner_naming_the_record(served: Served, browser: Browser, tmp_path: Path) -> None:
    record = served.call_of(LOCAL)
    tampered = tmp_path / "audit.jsonl"
    line = edited(served.audit, tampered, b"report-local", b"report-LOCAL")
    made = make_report(tmp_path / "tampered.html", tampered)
    assert made.returncode == 1 and "chain mismatch: the record was edited" in made.stderr, made.stderr
    opened = open_report(browser, made.path)
    opened.screenshot("tampered-log")
    assert opened.page.get_attribute("#trust", "class") == "banner fail"
    banner = opened.page.inner_text("#trust")
    assert f"{tampered}:{line} (seq {record['seq']}, shell_exec call {record['call_id']})" in banner
    assert "1 bad record(s) in all" in banner  # the records after it link up again: only the edited one is marked
    assert figure(opened, "records failing verification") == 1
    bad = opened.page.locator("#t-body tr.bad")
    assert bad.count() == 1 and "chain mismatch" in bad.inner_text() and LOCAL in bad.inner_text()
    opened.page.click(f"#trust a[href='#call={record['call_id']}']")
    opened.page.wait_for_selector("#call .problem")
    assert "chain mismatch: the record was edited" in opened.page.inner_text("#call .problem")
    opened.assert_quiet()


def test_a_truncated_copy_and_a_truncated_log_each_get_a_red_banner(
    served: Served, browser: Browser, tmp_path: Path
) -> None:
    lines = served.audit.read_bytes().splitlines(keepends=True)
    records = served.records()
    last_seq = records[-1]["seq"]
    kept = len(lines) - 4
    short = tmp_path / "short.jsonl"
    short.write_bytes(b"".join(lines[:kept]))
    missing = f"seq {records[kept]['seq']}-{last_seq}"

    # The collector's copy lacks the last four records (lag or loss): exit 3, as `audit verify --against` does.
    made = make_report(tmp_path / "copy-short.html", served.audit, options=("--against", str(short)))
    assert made.returncode == 3, made.stdout + made.stderr
    opened = open_report(browser, made.path)
    opened.screenshot("truncated-copy")
    assert opened.page.get_attribute("#trust", "class") == "banner fail"
    banner = opened.page.inner_text("#trust")
    assert f"MISSING REMOTELY: 4 record(s), {missing} after the copy's last record" in banner, banner
    assert opened.page.locator("#t-body tr.bad").count() >= 1
    opened.assert_quiet()

    # The local log lost its tail; the collector's copy still has it: exit 1 (tampering).
    local = tmp_path / "audit.jsonl"
    shutil.copy(short, local)
    made = make_report(tmp_path / "log-short.html", local, options=("--against", str(served.audit)))
    assert made.returncode == 1, made.stdout + made.stderr
    opened = open_report(browser, made.path)
    opened.screenshot("truncated-log")
    banner = opened.page.inner_text("#trust")
    assert opened.page.get_attribute("#trust", "class") == "banner fail"
    assert f"MISSING LOCALLY: 4 record(s), {missing} are in {served.audit} after the local log's last record" in banner
    assert "the local log's tail was truncated" in banner
    opened.assert_quiet()
