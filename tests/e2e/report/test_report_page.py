"""The report page's own machinery in a real headless Chromium, on logs written with the real AuditLog: every byte
value survives the page's data encoding (digests made of all 256 values come back exact on the calls' pages), and
a 3,000-call timeline is paged (never more than a page of rows in the document), sorted and filtered by exception
kind. The 100,000-call targets are measured by benchmarks/bench_report.py. Screenshots: conftest.SCREENSHOTS."""

from __future__ import annotations

from pathlib import Path

import orjson
from playwright.sync_api import Browser

from relay_shell.audit.log import AuditLog
from tests.e2e.report.conftest import make_report, open_report
from tests.report_log import write_log


def test_digests_of_every_byte_value_come_back_exact(browser: Browser, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    digests = {}
    for index in range(8):
        output = bytes(range(32 * index, 32 * index + 32)).hex()
        raw = bytes(reversed(range(32 * index, 32 * index + 32))).hex()
        digests[f"t-{index}"] = (output, raw)
        log.write(
            {
                "v": 1,
                "ts": f"2026-11-29T00:00:0{index}.000000Z",
                "tool": "shell_exec",
                "phase": "end",
                "call_id": f"t-{index}",
                "outcome": "ok",
                "output_sha256": output,
                "raw_sha256": raw,
                "args": {"command": f"echo {index}"},
            }
        )
    log.close()
    made = make_report(tmp_path / "report.html", path)
    assert made.returncode == 0, made.stderr
    opened = open_report(browser, made.path)
    for call_id, (output, raw) in digests.items():
        opened.page.evaluate(f"location.hash = 'call={call_id}'")
        opened.page.wait_for_selector(f"#call h2:has-text('{call_id}')")
        shown = opened.page.inner_text("#call table")
        assert output in shown and raw in shown, (call_id, shown)
    opened.assert_quiet()


def test_a_3000_call_timeline_is_paged_sorted_and_filtered(browser: Browser, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3000)
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    rows = len({r["call_id"] for r in records if r.get("phase")})
    rows += sum(1 for r in records if "phase" not in r and r["tool"] not in ("audit:checkpoint", "audit:continue"))
    denied = sum(1 for r in records if r.get("outcome") == "denied")
    longest = max(r.get("duration_ms", 0) for r in records if r.get("phase") != "start")
    made = make_report(tmp_path / "report.html", path)
    assert made.returncode == 0, made.stderr
    opened = open_report(browser, made.path)
    page = opened.page
    assert page.inner_text("#t-status").startswith(f"{rows} of {rows} rows")
    assert page.locator("#t-body tr").count() == 100
    assert page.inner_text("#p-where") == f"page 1 of {-(-rows // 100)}"
    page.click("#p-last")
    assert page.locator("#t-body tr").count() == (rows % 100 or 100)
    page.click("th button[data-sort='2']")  # duration, then again for the longest first
    page.click("th button[data-sort='2']")
    first = page.locator("#t-body tr").first.locator("td").nth(7).inner_text()
    assert first == (f"{longest} ms" if longest < 1000 else f"{longest / 1000:.2f} s"), first
    page.select_option("#f-kind", label="Denied calls")
    assert page.inner_text("#t-status").startswith(f"{denied} of {rows} rows")
    assert set(page.locator("#t-body tr td:nth-child(7)").all_inner_texts()) == {"denied"}
    opened.screenshot("timeline-3000-calls-denied")
    opened.assert_quiet()
