"""Issue 17's classes through a real server and the SDK client over stdio, in guarded mode: every dangerous
spelling is refused and nothing ran (each refused command first creates a marker file, so an admitted one would
leave it; real directory trees stand in for the data), the read-only commands that used to be rated too high run,
and the audit log keeps none of the secret shapes. One server for the whole module; many calls."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import connect, read_records, text_of

pytestmark = pytest.mark.anyio

GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ"  # assembled: not a leak to secret scanners
SLACK_SECRET = "a1B2c3D4e5F6g7H8i9J0kLmN"


def make_tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    for name in ("a.txt", "b.log", "sub/c.dat"):
        (root / name).write_text("precious\n")
    return root


def refused_calls(tmp: Path, tree: Path) -> list[tuple[str, dict[str, Any], int]]:
    """(class, arguments, expected tier); each command touches a marker first."""
    encoded = base64.b64encode(f"Remove-Item -Recurse -Force {tree}".encode("utf-16-le")).decode()
    commands: list[tuple[str, dict[str, Any], int]] = [
        # recursive and bulk deletion
        ("rm -r", {"command": f"rm -rf {tree}"}, 3),
        ("find -delete", {"command": f"find {tree} -mtime -1 -delete"}, 3),
        ("find -exec rm", {"command": f"find {tree} -type f -exec rm {{}} +"}, 3),
        ("rm *", {"command": f"rm {tree}/*"}, 3),
        # commands hidden in loops, xargs, bash -c, stdin, the env overlay
        ("for loop", {"command": f'for f in {tree}/*; do rm -rf "$f"; done'}, 3),
        ("while loop", {"command": f'ls {tree} | while read f; do rm -rf "{tree}/$f"; done'}, 3),
        ("xargs -i", {"command": f"echo {tree} | xargs -i rm -rf {{}}"}, 3),
        ("xargs -I", {"command": f"echo {tree} | xargs -I{{}} rm -rf {{}}"}, 3),
        ("bash -c in a loop", {"command": f'for d in {tree}; do bash -c "rm -rf $d"; done'}, 3),
        ("batch stdin", {"command": "batch", "stdin": f"rm -rf {tree}\n"}, 3),
        ("psql stdin", {"command": "psql appdb", "stdin": "DROP TABLE orders;"}, 3),
        ("sqlite3 stdin", {"command": f"sqlite3 {tmp}/app.db", "stdin": "DELETE FROM orders;"}, 3),
        ("env overlay", {"command": 'sh -c "$CMD"', "env": {"CMD": f"rm -rf {tree}"}}, 3),
        # infrastructure tools
        ("aws", {"command": "aws s3 rb s3://prod-bucket --force"}, 3),
        ("aws delete", {"command": "aws ec2 delete-volume --volume-id vol-0123"}, 3),
        ("gcloud", {"command": "gcloud compute instances delete web-1 --quiet"}, 3),
        ("az", {"command": "az group delete -n prod --yes"}, 3),
        ("zfs", {"command": "zfs destroy tank/data"}, 3),
        ("qm", {"command": "qm destroy 100"}, 3),
        ("virsh", {"command": "virsh undefine web --remove-all-storage"}, 3),
        ("busybox", {"command": f"busybox rm -rf {tree}"}, 3),
        ("dd", {"command": "dd if=/dev/zero of=/dev/usb_drive bs=1M"}, 3),
        ("restic", {"command": "restic forget --keep-last 1 --prune"}, 3),
        # Windows text
        ("Remove-Item", {"command": "Remove-Item -Recurse -Force C:\\data"}, 3),
        ("Format-Volume", {"command": "Format-Volume -DriveLetter D"}, 3),
        ("Clear-Disk", {"command": "Clear-Disk -Number 1 -RemoveData"}, 3),
        ("Stop-Computer", {"command": "Stop-Computer -Force"}, 3),
        ("del /s", {"command": "del /s /q C:\\data"}, 3),
        ("rd /s", {"command": "rd /s /q C:\\data"}, 3),
        ("format", {"command": "format D: /q"}, 3),
        ("powershell -enc", {"command": f"powershell -EncodedCommand {encoded}"}, 3),
        # stateful, with a secret in a webhook URL (the redaction class is checked in the audit log below)
        ("webhook POST", {"command": f"curl -X POST https://hooks.slack.com/services/T0/B0/{SLACK_SECRET}"}, 2),
    ]
    for index, (name, arguments, tier) in enumerate(commands):
        marker = tmp / f"marker-{index}"
        arguments["command"] = f"touch {marker}; {arguments['command']}"
        commands[index] = (name, arguments, tier)
    return commands


ADMITTED = [
    "systemctl list-units --no-pager",
    "systemctl help sshd --no-pager",
    "date -d yesterday +%F",
    "kill -0 $$",
    "kill -l",
    "X=$(date +%s); echo $X",
    "ls --help",
    "at -c 1",
]


async def test_guarded_mode_refuses_every_class_and_nothing_runs(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    work = tmp_path / "work"
    work.mkdir()
    tree = make_tree(work / "tree")
    refused = refused_calls(work, tree)
    async with connect(audit_path, policy_mode="guarded") as client:
        for name, arguments, tier in refused:
            result = await client.call_tool("shell_exec", arguments)
            assert text_of(result).startswith(f"[DENIED tier {tier} "), (name, text_of(result))
        for command in ADMITTED:
            result = await client.call_tool("shell_exec", {"command": command, "cwd": str(work)})
            assert text_of(result).startswith("[exit "), (command, text_of(result))
        (work / "old").write_text("x")
        renamed = await client.call_tool("shell_exec", {"command": f"mv {work}/old {work}/new"})
        assert text_of(renamed).startswith("[exit 0]"), text_of(renamed)
        overlay = await client.call_tool("shell_exec", {"command": "true", "env": {GITHUB: "1"}})
        assert text_of(overlay).startswith("[exit 0]"), text_of(overlay)
        await client.read_resource("relay-shell://inventory/deploy:uriS3cret@web1")
    assert not list(work.glob("marker-*")), "a refused command ran"
    assert sorted(path.name for path in tree.rglob("*")) == ["a.txt", "b.log", "c.dat", "sub"]
    assert (work / "new").exists()
    records = read_records(audit_path)
    denied = [record for record in records if record["denied"]]
    assert len(denied) == len(refused)
    assert all(record["outcome"] == "denied" and record["tier"] >= 2 for record in denied)
    log = audit_path.read_text()
    for secret in (SLACK_SECRET, GITHUB, "uriS3cret"):
        assert secret not in log, secret
    assert "hooks.slack.com/services/[REDACTED]" in log
    assert "relay-shell://inventory/deploy:[REDACTED]@web1" in log
