"""`relay-shell audit report` as a command: arguments it refuses (exit 2, naming the argument), rotated files read in
order, signed checkpoints, the --since/--until/--client window, a transcript that no longer matches its record, and
a large log (3,000 calls) whose report keeps every call. Logs are written with the real AuditLog; the page is read
as HTML here (the browser tests are in tests/e2e/report/)."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import zlib
from pathlib import Path

import orjson
import pytest

from relay_shell.audit.log import AuditLog
from relay_shell.offhost.checkpoints import checkpoint_record
from relay_shell.offhost.signing_keys import generate_keypair, key_id, load_signing_key
from relay_shell.report import blobs
from tests.report_log import write_log


def report(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "report", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
    )


def shown(page: Path, label: str) -> str:
    """A line of the page's header (`<dt>Calls shown</dt><dd>…</dd>`)."""
    found = re.search(rf"<dt>{re.escape(label)}</dt><dd>(.*?)</dd>", page.read_text(encoding="latin-1"))
    assert found, label
    return found.group(1)


def write_calls(log: AuditLog, first: int, count: int, client: str = "http:alice") -> None:
    for index in range(first, first + count):
        ts = f"2026-11-29T{index // 60:02d}:{index % 60:02d}:00.000000Z"
        common = {"v": 1, "ts": ts, "tool": "shell_exec", "call_id": f"c-{index}", "client_id": client, "tier": 1}
        log.write({**common, "phase": "start", "decision": "admitted", "args": {"command": f"echo {index}"}})
        log.write({**common, "phase": "end", "outcome": "ok", "exit_code": 0, "args": {"command": f"echo {index}"}})


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    write_calls(log, 0, 10)
    write_calls(log, 10, 5, client="http:bob")
    log.close()
    return path


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["missing.jsonl"], "LOG missing.jsonl: no such file"),
        (["LOG", "--since", "last night"], "--since: 'last night' is not a time"),
        (["LOG", "--since", "2026-11-30", "--until", "2026-11-29"], "is not before --until"),
        (["LOG", "--against", "nowhere.jsonl"], "--against nowhere.jsonl: no such file"),
        (["LOG", "--record-dir", "nowhere"], "--record-dir nowhere: not a directory"),
        (["LOG", "--public-key", "LOG"], "--public-key: "),
        (["LOG", "--against", "EMPTY"], "holds no audit record"),
    ],
)
def test_arguments_it_cannot_use_exit_2_naming_them(
    log_path: Path, tmp_path: Path, arguments: list[str], message: str
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not a record\n")
    arguments = [str(log_path) if item == "LOG" else str(empty) if item == "EMPTY" else item for item in arguments]
    ran = report(*arguments, "-o", str(tmp_path / "report.html"))
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert ran.stderr.startswith("relay-shell audit report: ") and message in ran.stderr, ran.stderr
    assert not (tmp_path / "report.html").exists()


def test_the_report_never_writes_over_a_file_it_reads(log_path: Path) -> None:
    before = log_path.read_bytes()
    ran = report(str(log_path), "-o", str(log_path))
    assert ran.returncode == 2 and "is one of the files to read" in ran.stderr
    assert log_path.read_bytes() == before


def test_rotated_files_are_read_in_order_and_out_of_order_fail(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    write_calls(log, 0, 4)
    path.rename(tmp_path / "audit.jsonl.1")  # logrotate's rename; the next write starts audit:continue
    write_calls(log, 4, 4)
    log.close()
    older, newer = tmp_path / "audit.jsonl.1", path
    ran = report(str(older), str(newer), "-o", str(tmp_path / "both.html"))
    assert ran.returncode == 0, ran.stderr
    assert "8 calls" in shown(tmp_path / "both.html", "Calls shown")
    assert "from genesis (seq 0)" in (tmp_path / "both.html").read_text(encoding="latin-1")
    alone = report(str(newer), "-o", str(tmp_path / "newer.html"))
    assert alone.returncode == 0 and "continues an older file not given" in (tmp_path / "newer.html").read_text(
        encoding="latin-1"
    )
    swapped = report(str(newer), str(older), "-o", str(tmp_path / "swapped.html"))
    assert swapped.returncode == 1 and "Hash chain FAILED" in swapped.stderr


def test_signed_checkpoints_verify_with_their_key_and_fail_with_another(tmp_path: Path) -> None:
    public = generate_keypair(tmp_path / "signing.key")
    other = generate_keypair(tmp_path / "other.key")
    key = load_signing_key(tmp_path / "signing.key")
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    write_calls(log, 0, 3)
    log.write_at_head(lambda seq, prev: checkpoint_record(key, key_id(key.public_key()), "records", seq, prev))
    write_calls(log, 3, 1)
    log.close()
    good = report(str(path), "--public-key", str(public), "-o", str(tmp_path / "good.html"))
    assert good.returncode == 0, good.stderr
    page = (tmp_path / "good.html").read_text(encoding="latin-1")
    assert "1 signature(s) verified with key" in page and "2 record(s) after it are not covered" in page
    bad = report(str(path), "--public-key", str(other), "-o", str(tmp_path / "bad.html"))
    assert bad.returncode == 1 and "not by the public key given" in bad.stderr


def test_the_window_shows_the_calls_of_its_time_and_client(log_path: Path, tmp_path: Path) -> None:
    page = tmp_path / "window.html"
    ran = report(
        str(log_path),
        "--since",
        "2026-11-29T00:03",
        "--until",
        "2026-11-29T00:12Z",
        "--client",
        "http:bob",
        "-o",
        str(page),
    )
    assert ran.returncode == 0, ran.stderr
    assert shown(page, "Calls shown").startswith("2 calls")  # c-10 and c-11: bob's, before 00:12
    assert "client http:bob" in shown(page, "Shown")
    assert "30 records verified" in page.read_text(encoding="latin-1")  # verification covers the whole log


def test_the_client_window_matches_the_client_exactly_as_recorded(tmp_path: Path) -> None:
    """Review N6: `--client alice` showed http:alice's and stdio:alice's calls, two clients that only share the
    name they declared; the window now takes the client as recorded."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    write_calls(log, 0, 3, client="http:alice")
    write_calls(log, 3, 2, client="stdio:alice")
    log.close()
    page = tmp_path / "page.html"
    for client, calls in (("http:alice", 3), ("stdio:alice", 2), ("alice", 0)):
        ran = report(str(path), "--client", client, "-o", str(page))
        assert ran.returncode == 0, ran.stderr
        assert shown(page, "Calls shown").startswith(f"{calls} calls"), client
        assert f"client {client}" in shown(page, "Shown")


def test_data_that_spells_a_mark_of_the_page_stays_data(tmp_path: Path) -> None:
    """Review S6: the page's marks were substituted one after another, so a mark inside substituted text (a log
    file under a directory named @SUMMARY@, a client named @EXCEPTIONS@ or @BANNER@) was replaced in
    turn: the summary, the exceptions or the trust banner written again where the data stood."""
    directory = tmp_path / "@SUMMARY@"
    directory.mkdir()
    path = directory / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    write_calls(log, 0, 3, client="http:@EXCEPTIONS@")
    write_calls(log, 3, 2, client="stdio:@BANNER@")
    log.close()
    page = tmp_path / "page.html"
    for window, client in (([], "http:@EXCEPTIONS@"), (["--client", "stdio:@BANNER@"], "stdio:@BANNER@")):
        ran = report(str(path), *window, "-o", str(page))
        assert ran.returncode == 0, ran.stderr
        text = page.read_text(encoding="latin-1")
        assert text.count('<div class="figures">') == 1 and text.count('<section id="trust"') == 1, window
        assert f"{directory}/audit.jsonl" in shown(page, "Log file(s), oldest first")
        assert f"<title>{client}</title>" in text  # in the chart of calls per client
    assert "client stdio:@BANNER@" in shown(page, "Shown")


def test_a_transcript_that_no_longer_matches_its_record_fails_the_report(tmp_path: Path) -> None:
    casts = tmp_path / "casts"
    casts.mkdir()
    cast = casts / "s-0123456789ab.cast"
    cast.write_text('{"version": 2, "width": 80, "height": 24}\n[0.1, "o", "hello"]\n')
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    log.write(
        {
            "v": 1,
            "ts": "2026-11-29T00:00:01.000000Z",
            "tool": "session:end",
            "session_id": "s-0123456789ab",
            "transcript_sha256": hashlib.sha256(cast.read_bytes()).hexdigest(),
            "outcome": "ok",
        }
    )
    log.close()
    matched = report(str(path), "--record-dir", str(casts), "-o", str(tmp_path / "matched.html"))
    assert matched.returncode == 0, matched.stderr
    cast.write_text('{"version": 2, "width": 80, "height": 24}\n[0.1, "o", "HELLO"]\n')
    altered = report(str(path), "--record-dir", str(casts), "-o", str(tmp_path / "altered.html"))
    assert altered.returncode == 1 and "altered or replaced after the session ended" in altered.stderr
    assert "banner fail" in (tmp_path / "altered.html").read_text(encoding="latin-1")


def test_a_log_of_3000_calls_keeps_every_call(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    key = tmp_path / "checkpoints.pub"
    written = write_log(path, 3000, public_key=key)
    page = tmp_path / "report.html"
    ran = report(str(path), "--public-key", str(key), "-o", str(page))
    assert ran.returncode == 0, ran.stderr
    assert shown(page, "Calls shown").startswith(f"{written:,} calls")
    assert "Signed checkpoints verified" in page.read_text(encoding="latin-1")
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    calls = {record["call_id"] for record in records if record.get("phase")}
    events = [r for r in records if "phase" not in r and r["tool"] not in ("audit:checkpoint", "audit:continue")]
    html = page.read_bytes()
    rows = orjson.loads(zlib.decompress(blobs.decode(re.search(rb'id="rows">(.*?)</script>', html, re.S)[1])))
    assert len(rows) == len(calls) + len(events) and len(calls) == written
    assert {row[0] for row in rows} >= calls
    chunks = re.findall(rb'<script type="application/x-relay-blob" id="d(\d+)">', html)
    assert len(chunks) == -(-len(rows) // 512)  # every row has its details
