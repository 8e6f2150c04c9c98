"""The server's own files as write targets (policy/own_files.py; attack 3, L1; adr/0025 Round 7): a command that
writes, moves, links, changes or deletes the audit log (or a rotation of it), the signing key, the token file or
a file of the OAuth state directory is tier 3 in every mode; reading them stays what it was."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from relay_shell.plan import Subject
from relay_shell.policy import own_files
from relay_shell.policy.admission import Policy

LOG = "/var/lib/relay-test/audit.jsonl"


@pytest.fixture(autouse=True)
def protected() -> Iterator[None]:
    own_files.protect(["/etc/relay-test/signing.key", "/etc/relay-test/tokens"], [LOG], ["/var/lib/relay-test/oauth"])
    yield
    own_files.protect([], [], [])


def tier(command: str, mode: str = "guarded") -> tuple[int, bool]:
    decision = Policy(mode).decide(Subject(command=command))
    return decision.tier, decision.denied


@pytest.mark.parametrize(
    "command",
    [
        f"mv {LOG} /tmp/a.old && echo '{{\"seq\": 0}}' > {LOG}",  # the finding
        f"mv {LOG} /tmp/a.old",
        f"echo forged >> {LOG}",
        f"echo forged >| {LOG}",
        f"sed -i 3d {LOG}",
        f"truncate -s0 {LOG}",
        f"rm {LOG}",
        f"rm -f {LOG}.1",
        f"shred -u {LOG}-20261129.gz",
        f"ln -sf /dev/null {LOG}",
        f"cp /tmp/forged {LOG}",
        "cp -t /var/lib/relay-test /tmp/audit.jsonl",
        f"dd if=/tmp/forged of={LOG}",
        f"chmod 666 {LOG}",
        f"tee -a {LOG} < /tmp/forged",
        "python3 - < /dev/null; mv //var/lib/relay-test/./audit.jsonl /tmp/x",
        "rm /etc/relay-test/signing.key",
        "mv /var/lib/relay-test/oauth/grants.json /tmp/g",
        "echo x > /etc/relay-test/tokens",
    ],
)
def test_writing_the_servers_own_files_is_tier_3(command: str) -> None:
    assert tier(command) == (3, True), command
    assert tier(command, "open")[0] == 3


@pytest.mark.parametrize(
    "command",
    [
        f"cat {LOG}",
        f"tail -n 5 {LOG}",
        f"grep call_id {LOG}",
        f"cp {LOG} /tmp/copy.jsonl",
        f"relay-shell audit verify {LOG}",
        "echo x > /var/lib/relay-test/notes.txt",
        "mv /tmp/a /tmp/b",
    ],
)
def test_reading_them_and_writing_beside_them_are_not(command: str) -> None:
    assert tier(command)[0] < 3, command


def test_nothing_is_protected_until_the_server_says_what() -> None:
    own_files.protect([], [], [])
    assert tier(f"mv {LOG} /tmp/a.old") == (1, False)
