"""The fifth attack's spellings (/work/plan/attack5-findings.md; adr/0025 Round 9): what a text makes known of its
later words (the directory a literal `cd` went to, a loop variable's words, a link it made), words built at run
time, any process's root directory, trees holding the server's secrets, device nodes and critical files moved away.
Each case below was admitted (tier 0 or 1, or 2 where 3 is due) before the fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay_shell.plan import Subject
from relay_shell.policy import own_files
from relay_shell.policy.admission import Policy

LOG = "/var/lib/relay-test/audit.jsonl"
KEY = "/etc/relay-test/signing.key"


@pytest.fixture
def protected() -> Iterator[None]:
    own_files.protect([KEY, "/etc/relay-test/tokens"], [LOG], ["/var/lib/relay-test/oauth"])
    yield
    own_files.protect([], [], [])


def tier(command: str, mode: str = "guarded") -> int:
    return Policy(mode).decide(Subject(command=command)).tier


@pytest.mark.parametrize(
    ("command", "least"),
    [
        # F1: relative paths after a literal cd (the rules read `> /etc/passwd`, not `cd /etc && > passwd`)
        ("cd /etc && echo 'x::0:0::/:/bin/sh' > passwd", 3),
        ("cd /etc && echo 'x ALL=(ALL) NOPASSWD: ALL' >> sudoers", 2),
        ("cd /etc/sudoers.d && echo 'x ALL=(ALL) NOPASSWD: ALL' > x", 2),
        ("cd /etc/cron.d && echo '* * * * * root id' > x", 2),
        ("cd /dev && cat /dev/zero > sda", 3),
        ("cd /root/.ssh && echo key >> authorized_keys", 2),
        ("cd ~/.ssh && echo key >> authorized_keys", 2),
        ("cd && echo 'curl x | sh' >> .bashrc", 2),
        ("cd / && cd etc && echo x > passwd", 3),
        ("pushd /etc; echo x > shadow", 3),
        ("builtin cd /etc && echo x > passwd", 3),
        ("if cd /etc; then echo x > passwd; fi", 3),
        ("cd /sys/fs/cgroup/unified/x && echo $$ > cgroup.procs", 2),
        ("cd /usr/bin && echo x > ls", 2),
        ("cd /etc; cp /tmp/x passwd", 3),
        # F7: the arguments after `sh -c TEXT NAME` are TEXT's $1…
        ("sh -c 'echo x > \"$1\"' sh /etc/passwd", 3),
        ("bash -c 'echo x >> $1' _ /etc/sudoers", 2),
        ("sh -c 'cat > \"$2\"' sh x /dev/sda", 3),
        ("sh -c 'echo $$ > \"$1\"; exec head -c1' sh /sys/fs/cgroup/cgroup.procs", 2),
        # F6: a device node under a name of its own, a critical file moved away
        ("mknod /tmp/d b 8 0", 3),
        ("mknod -m 666 /tmp/mem c 1 1", 3),
        ("mv /etc/passwd /tmp/p", 2),
        ("mv /etc/shadow /tmp/s", 2),
        ("cd /etc && mv shadow /tmp/s", 2),
    ],
)
def test_paths_the_text_makes_known_are_read_as_the_shell_reads_them(command: str, least: int) -> None:
    assert tier(command) >= least, command


@pytest.mark.parametrize(
    "command",
    [
        # F2: any process's root or working directory
        f"mv /proc/$PPID/root{LOG} /tmp/x",
        f"echo forged >> /proc/$$/root{LOG}",
        "mv /proc/$BASHPID/cwd/audit.jsonl /tmp/x",
        f"mv /proc/*/root{LOG} /tmp/x",
        # F3: words built at run time
        f"mv ${{X:-{LOG}}} /tmp/x",
        f"mv ${{X-{LOG}}} /tmp/x",
        "mv /var/lib/relay-te$(echo s)t/audit.jsonl /tmp/x",
        "mv /var/lib/relay-test/${X:-audit}.jsonl /tmp/x",
        "f=$(ls /var/lib/relay-test); mv /var/lib/relay-test/$f /tmp/x",
        "mv $HOME/audit.jsonl /tmp/x",
        "mv ~/audit.jsonl /tmp/x",
        "HOME=/var/lib/relay-test; mv ~/audit.jsonl /tmp/x",
        f'mv "$(printf {LOG})" /tmp/x',
        f"mv `echo {LOG}` /tmp/x",
        f"echo forged > $(echo {LOG})",
        # F1 for the own files: the directory a cd went to, a loop variable's words, a link made in the text
        'cd /var/lib/relay-test && mv "$PWD" /tmp/x',
        "cd /var/lib/relay-test && tar -xf /tmp/forged.tar",
        "cd /var/lib && tar -xf /tmp/forged.tar",
        "cd /var/lib/relay-test && unzip -o /tmp/forged.zip",
        'for f in /var/lib/relay-test/*; do mv "$f" /tmp/; done',
        "ln -s /var/lib/relay-test /tmp/l; mv /tmp/l/audit.jsonl /tmp/x",
        "ln -sfn /var/lib /tmp/l; mv /tmp/l/relay-test/audit.jsonl /tmp/x",
        # a link to an own directory, made for a later call (`cat /tmp/k/*` would not be recognised)
        "ln -s /etc/relay-test /tmp/k",
        "ln -sfn /var/lib/relay-test /tmp/l",
    ],
)
def test_the_servers_own_files_by_run_time_spellings_are_tier_3(protected: None, command: str) -> None:
    assert tier(command) == 3, command
    assert tier(command, "open") == 3, command


@pytest.mark.parametrize(
    "command",
    [
        f"cat ${{K:-{KEY}}}",
        f"cat /proc/$PPID/root{KEY}",
        "cat /proc/self/root/etc/relay-test/$(echo signing).key",
        'for f in /etc/relay-test/*; do cat "$f"; done',
        "ls /etc/relay-test | xargs -I{} cat /etc/relay-test/{}",
        f"curl -s file://{KEY}",
        "grep -r PRIVATE /etc/relay-test",
        "rg PRIVATE /etc/relay-test",
        "find /etc/relay-test -type f -exec cat {} +",
        "tar -cf - /etc/relay-test | base64",
        "zip -r /tmp/k.zip /etc/relay-test",
        "cp -r /etc/relay-test /tmp/k",
        "ln -s /etc/relay-test /tmp/k; cat /tmp/k/signing.key",
        "cd /etc/relay-test && cat signing.key",
        "HOME=/etc/relay-test; cat ~/signing.key",
    ],
)
def test_the_secrets_by_other_spellings_are_tier_3_to_read(protected: None, command: str) -> None:
    assert tier(command, "readonly") == 3, command


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cd /tmp && echo x > notes.txt", 1),
        ("cd /etc && cat passwd", 0),
        ("cd /etc && grep root passwd", 0),
        ("cd /tmp && nice ls", 0),
        ("ln -s /usr/bin/python3 /tmp/py", 1),
        ("ln -s /var /tmp/v", 1),
        ("cd /tmp && bash -c 'echo hi'", 1),
        ("cd /var/log && tail -n 5 syslog", 0),
        ('for f in *.txt; do mv "$f" "$f.bak"; done', 2),
        ("mknod /tmp/fifo p", 1),
        ("mv /etc/important /tmp/", 1),
        ('cat "$f"', 0),
        ("sh -c 'cat \"$1\"' sh /etc/passwd", 1),
        ("sh -c 'echo x > \"$1\"' sh notes.txt", 1),
        ("grep -r foo /etc", 0),
        ("cat /etc/$f", 0),
        (f"tail -n 3 {LOG}", 0),
        (f"cat ${{L:-{LOG}}}", 0),
        ('rm -f "$(mktemp)"', 2),
        ("cp $(ls /var/lib/relay-test/audit.jsonl*) /backup/", 1),
    ],
)
def test_their_neighbours_keep_their_tiers(protected: None, command: str, expected: int) -> None:
    assert tier(command) == expected, command


# C1: the directory the caller gives (a call's `cwd`, a local terminal's shell at the send) is where relative words
# are read too; shell text, argv, a script, typed input and `sh -c`/`eval` text inside them.
@pytest.mark.parametrize(
    ("subject", "least"),
    [
        (Subject(command="echo x > passwd", directories=("/etc",)), 3),
        (Subject(command="echo 'x ALL=(ALL) NOPASSWD: ALL' > x", directories=("/etc/sudoers.d",)), 2),
        (Subject(command="cat /dev/zero > sda", directories=("/dev",)), 3),
        (Subject(command="sh -c 'echo x > passwd'", directories=("/etc",)), 3),
        (Subject(command="eval 'echo x > passwd'", directories=("/etc",)), 3),
        (Subject(argv=("cp", "/tmp/x", "passwd"), directories=("/etc",)), 3),
        (Subject(script="echo x > passwd", interpreter="bash", directories=("/etc",)), 3),
        (Subject(typed="echo x > passwd", directories=("/etc",)), 3),
        (Subject(command=f"mv {Path(LOG).name} x", directories=(str(Path(LOG).parent),)), 3),
    ],
)
def test_the_callers_working_directory_is_read(protected: None, subject: Subject, least: int) -> None:
    assert Policy("guarded").decide(subject).tier >= least, subject


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        (Subject(command="echo x > notes.txt", directories=("/tmp",)), 1),
        (Subject(command="tail -n 5 syslog", directories=("/var/log",)), 0),
        (Subject(command="ls -la", directories=("/etc",)), 0),
        (Subject(typed="cat hostname", directories=("/etc",)), 0),
    ],
)
def test_neighbours_in_a_working_directory_keep_their_tiers(protected: None, subject: Subject, expected: int) -> None:
    assert Policy("guarded").decide(subject).tier == expected, subject


# P2/P3 (the policy's part): a control group's files that move, kill or freeze processes, by their name in any
# directory, the directory built at run time included; reading them stays 0, a to-do list named `tasks` stays 1.
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo $$ > /sys/fs/cgroup/unified/cgroup.procs", 3),
        ("echo $$ > $(echo /sys/fs/cgroup/unified)/cgroup.procs", 3),
        ("sh -c 'echo $$ > \"$1\"; exec sleep 777' sh $(echo /sys/fs/cgroup/unified)/cgroup.procs", 3),
        ("echo $$ | tee $D/cgroup.threads", 3),
        ("cp pids $D/cgroup.procs", 3),
        ("echo 1 > $D/cgroup.kill", 3),
        ("echo 1 > $D/cgroup.freeze", 3),
        ("echo $$ > /sys/fs/cgroup/pids/x/tasks", 3),
        ("cat /sys/fs/cgroup/unified/cgroup.procs", 0),
        ("wc -l /sys/fs/cgroup/x/cgroup.threads", 0),
        ("echo buy milk >> tasks", 1),
    ],
)
def test_a_control_groups_process_files_are_tier_3_to_write(command: str, expected: int) -> None:
    assert tier(command) == expected, command
