"""The server's own files as write targets (policy/own_files.py; attack 3, L1; adr/0025 Round 7): a command that
writes, moves, links, changes or deletes the audit log (or a rotation of it), the signing key, the token file or
a file of the OAuth state directory is tier 3 in every mode; reading them stays what it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


@pytest.mark.parametrize(
    "command",
    [
        # attack 4, O1: through a process's root or working directory
        "mv /proc/self/root/var/lib/relay-test/audit.jsonl /tmp/x",
        "mv /proc/1/root//var/lib/relay-test/audit.jsonl /tmp/x",
        "rm /proc/thread-self/cwd/audit.jsonl",
        # O2: relative to a working directory the classifier does not know
        "cd /var/lib/relay-test && mv audit.jsonl x",
        "cd /var/lib && mv relay-test/audit.jsonl x",
        "cd /var/lib/relay-test/oauth && mv ../audit.jsonl x",
        "mv audit.jsonl.3 x",
        "echo forged > audit.jsonl",
        "rm oauth/grants.json",
        "rm tokens",
        # O3: globs
        "mv /var/lib/relay-test/audit.js?n* /tmp/x",
        "mv /var/lib/relay-test/* /tmp/x",
        "mv /var/lib/relay-*/audit.jsonl /tmp/x",
        "mv audit.* /tmp/x",
        # O4: a directory holding the log, or a move into it under the log's name
        "mv /tmp/src/audit.jsonl /var/lib/relay-test/",
        "mv -t /var/lib/relay-test /tmp/src/audit.jsonl",
        "ln -sf /tmp/src/audit.jsonl /var/lib/relay-test",
        "mv /var/lib/relay-test /var/lib/relay-test.old",
        "cd /var/lib && mv relay-test r.old",
        "chmod 000 /var/lib/relay-test",
        # O5: the server's descriptors through /proc
        "echo forged >> /proc/$PPID/fd/3",
        "echo x > /proc/1234/fd/3",
        "cat x | tee -a /proc/1234/fd/3",
        "for f in /proc/$PPID/fd/*; do case $(readlink $f) in *audit.jsonl) echo x >> $f;; esac; done",
        'for f in /var/lib/relay-test/audit.jsonl*; do echo x > "$f"; done',
        "printf x | dd of=/proc/$PPID/mem bs=1 seek=4194304 conv=notrunc",
        # O7: a tree merged into the log's directory (a file of it named like the log replaces it)
        "tar -xf /tmp/f.tar -C /var/lib/relay-test",
        "tar --extract --file=/tmp/f.tar --directory=/var/lib/relay-test",
        "cp -rT /tmp/src /var/lib/relay-test",
        "cp -a /tmp/src/. /var/lib/relay-test/",
        "rsync -a /tmp/src/ /var/lib/relay-test/",
        "unzip -o /tmp/f.zip -d /var/lib/relay-test",
        "mv -T /tmp/src /var/lib/relay-test",
        "echo x > /proc/$PPID/task/1/mem",
        # A tree holding the OAuth state copied whole reads its secrets (attack 5; adr/0025 Round 9: a decision
        # changed, these two were neighbours before).
        "tar -czf /tmp/b.tgz /var/lib/relay-test",
        "cp -r /var/lib/relay-test /tmp/backup",
    ],
)
def test_other_spellings_of_the_servers_own_files_are_tier_3(command: str) -> None:
    assert tier(command) == (3, True), command


@pytest.mark.parametrize(
    "command",
    [
        "mv /var/lib/relay-test/notes.txt /tmp/",
        "echo x > notes.txt",
        "mv a b",
        "tar -czf /tmp/b.tgz /var/lib/relay-test/notes",
        "tar -tf /tmp/x.tar",
        "ls /var/lib/relay-test",
        "for f in /var/lib/relay-test/audit.jsonl*; do wc -l $f; done",
        "cat /proc/self/root/var/lib/relay-test/audit.jsonl",
        "echo x > /proc/self/fd/2",
    ],
)
def test_their_neighbours_and_reads_are_not(command: str) -> None:
    assert tier(command)[0] < 3, command


def test_a_link_to_the_logs_directory_is_followed(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "audit.jsonl"
    log.parent.mkdir()
    log.write_text("")
    (tmp_path / "link").symlink_to(log.parent)
    own_files.protect([], [str(log)], [])
    assert tier(f"mv {tmp_path}/link/audit.jsonl /tmp/x") == (3, True)


@pytest.mark.parametrize(
    "command",
    [
        # attack 4, O6: the server's secrets read (readonly admitted `cat KEY`: the key signs checkpoints)
        "cat /etc/relay-test/signing.key",
        "base64 /etc/relay-test/signing.key",
        "cd /etc/relay-test; cat signing.key",
        "cat < /etc/relay-test/signing.key",
        "cp /etc/relay-test/signing.key /tmp/k",
        "sed -n p /etc/relay-test/sign*",
        "k=/etc/relay-test/signing.key; cat $k",
        "cat /var/lib/relay-test/oauth/oauth.json",
        "dd if=/proc/$PPID/mem bs=1 skip=4096 count=64",
    ],
)
def test_reading_the_servers_secrets_is_tier_3(command: str) -> None:
    assert tier(command, "readonly") == (3, True), command
    assert tier(command, "open")[0] == 3


@pytest.mark.parametrize(
    "command",
    [
        f"cat {LOG}",
        f"tail -f {LOG}",
        "cat /etc/relay-test/signing.key.pub",
        "ls -l /etc/relay-test",
        f"relay-shell audit verify {LOG} --public-key /etc/relay-test/signing.key.pub",
    ],
)
def test_the_log_and_the_public_key_stay_readable(command: str) -> None:
    assert tier(command, "readonly") == (0, False), command


def test_the_server_names_its_syslog_tls_files(tmp_path: Path) -> None:
    """Attack 4, S1: the syslog client key, certificate and CAs were missing from the server's own files: a
    replaced CA file sends the shipped log to another collector; the key is a secret."""
    from relay_shell.server import protect_own_files
    from relay_shell.settings.model import Settings, by_area

    names = {"audit_syslog_key": "client.key", "audit_syslog_cert": "client.pem", "audit_syslog_ca": "ca.pem"}
    for name in names.values():
        (tmp_path / name).write_text("PEM")
        (tmp_path / name).chmod(0o600)
    settings = Settings(
        **by_area(
            {
                "audit_path": str(tmp_path / "audit.jsonl"),
                "audit_syslog": "tls://127.0.0.1:6514",
                **{setting: str(tmp_path / name) for setting, name in names.items()},
            }
        )
    )
    protect_own_files(settings)
    for name in names.values():
        assert tier(f"cp /tmp/forged {tmp_path / name}") == (3, True), name
    assert tier(f"cat {tmp_path / 'client.key'}", "readonly") == (3, True)
