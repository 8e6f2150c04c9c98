"""Tier classification: obvious variants of destructive commands stay destructive; ordinary work is not
over-classified; pathological input stays linear."""

from __future__ import annotations

import time

import pytest

from relay_shell.plan import Subject
from relay_shell.policy.classify import analyze, classify

TIERS = {
    # tier 0: observe
    "ls -la /": 0,
    "cat /etc/passwd": 0,
    "grep -r rm .": 0,
    'echo "rm -rf /"': 0,
    "git log --oneline": 0,
    "true": 0,
    "ls 2>&1 >/dev/null": 0,
    "cat <<EOF\nrm -rf /\nEOF\n": 0,
    "ls # rm -rf /": 0,
    "seq 1 10 | sort -r | head -3": 0,
    "systemctl status nginx": 0,
    "docker ps -a": 0,
    # tier 1: reversible
    "touch x": 1,
    "mkdir -p a/b": 1,
    "echo hi > out.txt": 1,
    "make build": 1,
    "git commit -m msg": 1,
    # tier 2: stateful
    "rm -rf ./build/app.o": 2,  # a file: -r is moot (a directory tree is 3, issue 17)
    "sudo ls": 2,
    "curl -fsSL http://example.invalid/install.sh | sh": 2,
    "base64 -d payload | bash": 2,
    # a command word only known at run time could be any program (adr/0025): treated as irreversible
    "$X -rf /": 3,
    "$(echo rm) -rf /tmp/x": 3,
    "find . -name '*.pyc' -exec rm {} \\;": 2,
    "kill -TERM 1234": 2,
    "apt-get install -y nginx": 2,
    "systemctl restart nginx": 2,
    "git reset --hard HEAD~1": 2,
    "echo 'nameserver 1.1.1.1' >> /etc/resolv.conf": 2,
    # tier 3: irreversible, in their obvious spellings
    "rm -rf /": 3,
    "rm -rf ./build": 3,
    "rm --recursive --force --no-preserve-root /": 3,
    "sudo rm -fr /*": 3,
    "rm -f -r /": 3,
    "rm -r -- /": 3,
    "rm   -rf \t /": 3,
    "'rm' -rf \"/\"": 3,
    "r''m -rf /": 3,
    '"r"m -rf /': 3,
    "\\rm -rf /": 3,
    "/bin/rm -rf /": 3,
    "rm -rf ~": 3,
    "rm -rf /etc/": 3,
    "rm -rf $HOME": 3,
    "sudo -u root env X=1 nice -n 5 timeout 10 /usr/bin/rm   -rf   /": 3,
    "nohup ionice -c 3 rm -rf /var": 3,
    "xargs rm -rf < list": 3,
    "find / -delete": 3,
    "dd if=/dev/zero of=/dev/sda bs=1M": 3,
    "cat /dev/urandom > /dev/nvme0n1": 3,
    "echo x | tee /dev/sdb": 3,
    "mkfs.ext4 /dev/sdb1": 3,
    "wipefs -a /dev/sda": 3,
    ":(){ :|:& };:": 3,
    ":(){\n  :|:&\n};:": 3,
    "bomb(){ bomb|bomb& };bomb": 3,
    "echo x > /etc/passwd": 3,
    "timeout 5 shutdown -h now": 3,
    "systemctl reboot": 3,
    "init 0": 3,
    "bash -c 'rm -rf /'": 3,
    'sh -c "sudo rm -rf /etc"': 3,
    "eval 'rm -rf /'": 3,
    "echo $(rm -rf /)": 3,
    "x=`rm -rf ~`": 3,
    "bash <<EOF\nrm -rf /\nEOF\n": 3,
    "git push --force origin main": 3,
    "kill -9 -1": 3,
    "chmod -R 777 /": 3,
    "chown -R nobody /etc": 3,
    "mv /etc /tmp/x": 3,
    "crontab -r": 3,
    "psql -c 'DROP DATABASE prod'": 3,
    "true && rm -rf /": 3,
    "ls; rm -rf /": 3,
    "(cd /tmp && rm -rf /)": 3,
}


@pytest.mark.parametrize(("command", "tier"), list(TIERS.items()))
def test_tier(command: str, tier: int) -> None:
    result = classify(Subject(command=command))
    assert result.tier == tier, result.reasons


def test_canonical_form_strips_wrappers_quotes_and_paths() -> None:
    assert classify(Subject(command='sudo  /bin/rm  -rf  "/"')).canonical == ("rm -rf /",)


def test_stdin_feeding_a_shell_is_a_script() -> None:
    assert classify(Subject(command="sh", stdin="rm -rf /\n")).tier == 3
    assert classify(Subject(argv=("bash",), stdin="rm -rf /\n")).tier == 3
    assert classify(Subject(command="cat", stdin="rm -rf /\n")).tier == 0  # data, not commands


def test_env_overlay_code_injection() -> None:
    assert classify(Subject(command="ls", env=(("LD_PRELOAD", "/tmp/x.so"),))).tier == 2
    assert classify(Subject(command="ls", env=(("GREETING", "hi"),))).tier == 0


def test_argv_and_scripts() -> None:
    assert classify(Subject(argv=("rm", "-rf", "/"))).tier == 3
    assert classify(Subject(argv=("bash", "-c", "rm -rf /"))).tier == 3
    assert classify(Subject(argv=("echo", "rm -rf /"))).tier == 0
    assert classify(Subject(script="set -e\nls\nrm -rf /srv\n", interpreter="bash")).tier == 3
    assert classify(Subject(script="print(1)\n", interpreter="python")).tier == 1
    assert classify(Subject(script="import os\nos.remove('x')\n", interpreter="python")).tier == 2
    assert classify(Subject(script="import shutil\nshutil.rmtree('/')\n", interpreter="python")).tier == 3
    assert classify(Subject(script="import os\nos.system('mkfs.ext4 /dev/sda')\n", interpreter="python")).tier == 3


def test_fixed_tier() -> None:
    assert classify(Subject(fixed_tier=0)).tier == 0


@pytest.mark.parametrize(
    "pathological",
    [
        "a" * 2**20,
        "'" * 2**20,
        "$(" * 2**19,
        ";" * 2**20,
        "rm -rf / " * 100_000,
        "\"'" * 2**19,
        "(){" * 300_000,
        "bash -c '" * 100_000,
        "`" * 2**20,
        "<<" * 2**19,
        "\\" * 2**20,
        "{ " * 2**19,
    ],
)
def test_megabyte_inputs_stay_linear(pathological: str) -> None:
    # A correctness guard against quadratic behaviour (which would take minutes), with a wide margin.
    started = time.process_time()  # CPU, not wall: a loaded machine does not count
    classify(Subject(command=pathological))
    assert time.process_time() - started < 10


def test_a_transfer_onto_a_critical_file_is_tier_3() -> None:
    """Classified like `> /etc/shadow` (not run end to end: a bug would overwrite this machine's file)."""
    subject = Subject(hosts=("h01",), transfer="upload /tmp/x -> h01:/etc/shadow", transfer_writes="/etc/shadow")
    assert max(finding.tier for finding in analyze(subject)) == 3
    plain = Subject(hosts=("h01",), transfer="upload /tmp/x -> h01:/tmp/y", transfer_writes="/tmp/y")
    assert max(finding.tier for finding in analyze(plain)) == 2
