"""The classes of misses and false alarms of issue 17, each with its spellings: recursive and bulk deletion,
commands hidden in loops, xargs, stdin and the env overlay, infrastructure tools, read-only commands rated too
high, Windows text, read-only programs that write when told to. Plus the safety shape: every wrapper is seen through in
every getopt spelling, a wrapper given no command is a shell reading stdin, nesting deeper than the classifier
reads is tier 3, and classification stays linear."""

from __future__ import annotations

import base64
import time

import pytest

from relay_shell.plan import Subject
from relay_shell.policy.admission import Policy
from relay_shell.policy.classify import classify

BULK_DELETION = {
    "rm -rf some_dir": 3,
    "rm -r build/": 3,
    "rm -rf /srv/data": 3,
    "rm -rf $DIR": 3,
    "rm -rf *.pyc": 2,  # files by extension: -r is moot
    "rm -f app.log": 2,
    "rm *": 3,
    "rm -d empty_dir": 1,
    "find /srv/data -mtime +90 -delete": 3,
    "find / -nouser -exec rm {} +": 3,
    "find /srv/data -type f -exec rm -f {} \\;": 3,
    "find . -name '*.tmp' -delete": 2,
    "find . -name '*.tmp' -exec rm {} +": 2,
    "find . ! -name '*.txt' -delete": 3,
    "find . -type d -empty -delete": 2,
    "find . -type d -name node_modules -exec rm -rf {} +": 3,
    "find /var/log -name '*.gz' -print0 | xargs -0 rm": 2,
    "find /srv/cache -type f | xargs rm -f": 3,
    "ls -t | tail -n +6 | xargs rm": 3,
    "ls | xargs rm": 3,
}
HIDDEN_COMMANDS = {
    'for f in *; do rm -rf "$f"; done': 3,
    'for f in *.log; do gzip "$f"; done': 2,
    'while read -r f; do rm -rf "$f"; done < list': 3,
    "until false; do rm -rf /srv/x; done": 3,
    'for d in a b; do bash -c "rm -rf $d"; done': 3,
    "if true; then rm -rf /srv/x; fi": 3,
    "ls | xargs -i rm -rf {}": 3,
    "ls | xargs -I{} rm -rf {}": 3,
    "ls | xargs -I {} rm -rf {}": 3,
    "ls | xargs -J % rm -rf %": 3,
    "ls | xargs -n 1 -P 4 rm -rf": 3,
    "cat dirs | xargs -I{} sh -c 'rm -rf {}'": 3,
    'bash -c "sh -c \'bash -c \\"rm -rf /\\"\'"': 3,
    "X=$(rm -rf /)": 3,
    "X=$(date)": 0,
    "echo $(shred -u key)": 3,
}
INFRASTRUCTURE = {
    "aws ec2 delete-volume --volume-id vol-1": 3,
    "aws rds delete-db-instance --db-instance-identifier prod": 3,
    "aws cloudformation delete-stack --stack-name web": 3,
    "aws s3 rb s3://bucket --force": 3,
    "aws s3 rm s3://bucket/logs --recursive": 3,
    "aws s3 sync s3://a s3://b --delete": 3,
    "aws s3 cp s3://bucket/file ./file": 1,
    "aws s3 cp ./file s3://bucket/file": 2,
    "aws ec2 describe-instances": 0,
    "aws secretsmanager delete-secret --secret-id x": 2,
    "gcloud compute instances delete web-1": 3,
    "gcloud compute instances list": 0,
    "gcloud sql instances delete db": 3,
    "az group delete -n rg": 3,
    "az vm list": 0,
    "az storage blob delete -c c -n b": 2,
    "doctl compute droplet delete 123": 3,
    "zfs destroy tank/data": 3,
    "zpool destroy tank": 3,
    "zpool status": 0,
    "lvm lvremove vg/lv": 3,
    "vgremove vg": 3,
    "btrfs subvolume delete /mnt/sub": 3,
    "btrfs filesystem df /mnt": 0,
    "mdadm --zero-superblock /dev/sdb1": 3,
    "mdadm --detail /dev/md0": 0,
    "qm destroy 100": 3,
    "pct destroy 100": 3,
    "qm list": 0,
    "virsh destroy vm1": 2,
    "virsh undefine vm1 --remove-all-storage": 3,
    "borg prune --keep-within 7d repo": 3,
    "restic forget --keep-last 1 --prune": 3,
    "restic snapshots": 0,
    "busybox rm -rf /srv/x": 3,
    "toybox rm -rf /srv/x": 3,
    "dd if=image.iso of=/dev/usb_drive": 3,
    "dd if=/dev/zero of=/dev/disk/by-id/ata-X": 3,
    "dd if=/dev/sda of=disk.img": 1,
    "terraform destroy -auto-approve": 3,
    "terraform plan": 0,
    "kubectl delete namespace prod": 3,
    "kubectl delete pods --all -n staging": 3,
    "kubectl get pods": 0,
    "docker volume rm data": 3,
    "docker compose down -v": 3,
    "psql -c 'DROP TABLE orders'": 3,
    "mysql -e 'DELETE FROM orders'": 3,
    "mysql -e 'DELETE FROM orders WHERE id = 1'": 2,
    "sqlite3 app.db 'SELECT * FROM t'": 0,
    "redis-cli FLUSHALL": 3,
    "mongosh --eval 'db.dropDatabase()'": 3,
}
READ_ONLY_NOT_ALARMS = {
    "systemctl list-units": 0,
    "systemctl list-timers --all": 0,
    "systemctl help sshd": 0,
    "systemctl show nginx": 0,
    "systemctl cat nginx": 0,
    "systemctl is-active nginx": 0,
    "systemctl is-system-running --wait": 0,
    "date -d yesterday": 0,
    "date +%s": 0,
    "kill -0 1234": 0,
    "kill -l": 0,
    "killall -l": 0,
    "aws ec2 help": 0,
    "docker volume list --help": 0,
    "vgremove -h": 0,
    "parted -h": 0,
    "mysql --version": 0,
    "at -c 3": 0,
    "at -l": 0,
    "mv old new": 1,
    "chmod -R g+w .": 2,
    "chown -R me *": 2,
    "echo hi > /srv/app/out.txt": 1,
}
WINDOWS = {
    "Remove-Item -Recurse -Force C:\\data": 3,
    "remove-item -r -fo C:\\data": 3,
    "Remove-Item C:\\data\\report.txt": 2,
    "Format-Volume -DriveLetter D": 3,
    "Clear-Disk -Number 1 -RemoveData": 3,
    "Stop-Computer -Force": 3,
    "Restart-Computer": 3,
    "Get-ChildItem C:\\": 0,
    "Get-Process | Sort-Object CPU | Format-Table": 0,
    "del /s /q C:\\data": 3,
    "del /s /q C:\\temp\\*.tmp": 2,
    "rd /s /q C:\\data": 3,
    "rmdir /s C:\\data": 3,
    "format D: /q": 3,
    "vssadmin delete shadows /all /quiet": 3,
    "shutdown /r /t 0": 3,
    "shutdown /a": 2,
    "net user bob /delete": 2,
    "sc stop spooler": 2,
    "robocopy C:\\a D:\\b /mir": 3,
    'powershell -Command "Remove-Item -Recurse C:\\x"': 3,
    'cmd /c "rd /s /q C:\\x"': 3,
    "wsl --unregister Ubuntu": 3,
}
WRAPPED = [
    "sudo {}",
    "sudo -u www-data {}",
    "doas {}",
    "env A=1 B=2 {}",
    "nice -n 5 {}",
    "nice -5 {}",
    "ionice -c 3 {}",
    "timeout 10 {}",
    "timeout -s KILL 10 {}",
    "stdbuf -oL {}",
    "chroot /mnt {}",
    "nsenter -t 1 -m -u {}",
    "flock /run/lock {}",
    "flock /run/lock -c '{}'",
    "watch -n 5 {}",
    "watch '{}'",
    "script -c '{}' session.log",
    # getopt spellings: `--name=value`, a bundle whose last letter takes the value, options after the operand
    "script --command='{}' out.log",
    "script -qc '{}' /dev/null",
    "script -eqc '{}' /dev/null",
    "script out.log -c '{}'",
    "su -c '{}'",
    "su - root -c '{}'",
    "su -lc '{}'",
    "su --command='{}'",
    "su --session-command '{}' bob",
    "su bob -- -c '{}'",
    "runuser -u bob -- {}",
    "runuser -u bob {}",
    "runuser -lu bob -- {}",
    "runuser --user=bob -- {}",
    "runuser -ubob -- {}",
    "runuser bob -c '{}'",
    "flock --command '{}' /l",
    "flock /l --command '{}'",
    "flock -w 5 /l -c '{}'",
    "sudo -iu bob {}",
    "sudo --user=bob {}",
    "env -iS '{}'",
    "env - {}",
    "env --split-string='{}'",
    "nsenter -t 1 -r {}",
    "nsenter --target=1 --mount {}",
    "unshare --propagation private -m {}",
    "sg docker '{}'",
    "sg - docker -c '{}'",
    "kdesu -c '{}'",
    "xargs -0I {{}} {}",
    "ionice -c3 -n7 {}",
    "timeout --signal=KILL 10 {}",
    "fd -X {}",
    "busybox {}",
    "xargs {}",
    "nohup {}",
    "setsid {}",
    "taskset -c 0 {}",
    "chrt -f 50 {}",
    "systemd-run {}",
    "strace -f -o trace.log {}",
    "bash -c '{}'",
    "sh -c 'bash -c \"{}\"'",
    "eval '{}'",
    "ssh host {}",
    "ssh -p 2222 -i key host '{}'",
    "kubectl exec pod -- {}",
    "docker exec -it web {}",
    "for i in 1; do {}; done",
    "find . -exec {} \\;",
]


def tier(command: str, **subject: object) -> int:
    return classify(Subject(command=command, **subject)).tier  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        *BULK_DELETION.items(),
        *HIDDEN_COMMANDS.items(),
        *INFRASTRUCTURE.items(),
        *READ_ONLY_NOT_ALARMS.items(),
        *WINDOWS.items(),
    ],
)
def test_tier_of_each_class(command: str, expected: int) -> None:
    result = classify(Subject(command=command))
    assert result.tier == expected, result.reasons


@pytest.mark.parametrize("wrapper", WRAPPED)
def test_every_wrapper_is_seen_through(wrapper: str) -> None:
    assert tier(wrapper.format("rm -rf /srv/data")) == 3
    assert tier(wrapper.format("mkfs.ext4 /dev/sdb1")) == 3
    assert (
        Policy("guarded", deny=[r"^rm -rf /srv/data$"])
        .decide(Subject(command=wrapper.format("rm -rf /srv/data")))
        .denied
    )


WITHOUT_A_COMMAND = [
    "script out.log",
    "script -q /dev/null",
    "nsenter -t 1 -m",
    "chroot /mnt",
    "unshare -m",
    "su",
    "su - bob",
    "runuser -u bob",
    "runuser -l bob",
    "sudo -i",
    "sudo -iu bob",
    "sg docker",
]


@pytest.mark.parametrize("wrapper", WITHOUT_A_COMMAND)
def test_a_wrapper_given_no_command_runs_a_shell_whose_stdin_is_classified(wrapper: str) -> None:
    # Interactive, so at least 1 (readonly refuses it); what the shell reads is classified as shell text.
    assert tier(wrapper) >= 1
    assert Policy("readonly").decide(Subject(command=wrapper)).denied
    assert tier(wrapper, stdin="rm -rf /srv/data\n") == 3
    assert tier(wrapper, stdin="ls -la\n") == tier(wrapper)
    # deny patterns see the canonical form of what the shell reads
    hidden = Subject(command=wrapper, stdin="sudo /bin/rm  -rf '/srv/data'\n")
    assert Policy("open", deny=[r"^rm -rf /srv/data$"]).decide(hidden).denied


def test_a_wrapper_that_only_prints_is_no_shell() -> None:
    assert tier("script --help") == 0
    assert tier("firejail --list") == 0
    assert tier("env") == 0
    assert tier("command -v rm") == 0


def nested(command: str, prefix: str = "bash -c") -> str:
    """`prefix "command"`, with command quoted for the double quotes it sits in."""
    for char in ("\\", '"', "$", "`"):
        command = command.replace(char, "\\" + char)
    return f'{prefix} "{command}"'


def test_bash_c_at_any_depth_fails_towards_caution() -> None:
    command = "rm -rf /srv/data"
    for _level in range(10):
        command = nested(command)
    assert tier(command) == 3  # deeper than the classifier reads: tier 3, not 2
    harmless = "ls"
    for _level in range(10):
        harmless = nested(harmless)
    assert tier(harmless) == 3  # what it runs was not looked at


def test_a_chain_of_ten_wrappers_is_seen_through_or_fails_towards_caution() -> None:
    inline = ["su -c", "script -qc", "flock /l -c", "watch", "sh -c", "runuser bob -c", "sudo sh -c", "env -S", "eval"]
    command = "rm -rf /srv/data"
    for prefix in [*inline, "ssh host"]:
        command = nested(command, prefix)
    assert tier(command) == 3
    plain = "sudo env A=1 nice -n 5 ionice -c3 timeout 10 stdbuf -oL chroot /mnt nsenter -t 1 -m setsid nohup"
    assert len(plain.split(" ")) > 10 and tier(f"{plain} rm -rf /srv/data") == 3
    assert Policy("open", deny=[r"^rm -rf /srv/data$"]).decide(Subject(command=f"{plain} rm -rf /srv/data")).denied
    assert tier("nice " * 40 + "ls") == 3  # more wrappers than are looked through
    assert tier("kubectl exec pod -- " * 3000 + "ls") == 3  # argv a program runs nests too


WRITERS = {
    "sort -o sorted.txt in.txt": 1,
    "sort --output=sorted.txt in.txt": 1,
    "sort -osorted.txt in.txt": 1,
    "sort -u -o sorted.txt in.txt": 1,
    "sort -uo sorted.txt in.txt": 1,
    "sort -o in.txt in.txt": 2,  # rewrites its input without a backup, as sed -i does
    "sort -o /etc/passwd /etc/passwd": 3,
    "sort in.txt": 0,
    "sort -t, -k2 in.csv": 0,
    "sort -to in.txt": 0,  # -t takes "o" as the separator
    "sort -o - in.txt": 0,
    "shuf -o out.txt in.txt": 1,
    "uniq in.txt out.txt": 1,
    "uniq -c in.txt out.txt": 1,
    "uniq in.txt out.txt -c": 1,
    "uniq -f 1 in.txt": 0,
    "uniq -c in.txt": 0,
    "less -o session.log in.txt": 1,
    "less -O session.log in.txt": 1,
    "less -osession.log in.txt": 1,
    "less --log-file=session.log in.txt": 1,
    "less -So session.log in.txt": 1,
    "less -S in.txt": 0,
    "tree -o listing.txt": 1,
    "xxd in.bin out.hex": 1,
    "xxd -cols 8 in.bin": 0,
    "sdiff -o merged a b": 1,
    "yq -i '.a = 1' f.yaml": 2,
    "mlr -I --csv sort -f a f.csv": 2,
    "fd -e pyc -x rm": 2,
    "fd -t f -x rm -rf": 2,
    "fd -x rm -rf": 3,
    "fd . /srv -X rm -rf": 3,
    "fd -x echo": 0,
    # the rest of the read-only vocabulary: options that write a file (1, or onto an input 2, a system file 2-3)
    "nmap -oN scan.txt 10.0.0.1": 1,
    "nmap -sC -sV -oA top-ports host1": 1,
    "nmap -oX /etc/hosts host1": 3,
    "nmap -oX - host1": 0,
    "nmap --resume scan.gnmap": 1,
    "nmap -p 80,443 host1": 0,
    "info -o coreutils.txt coreutils": 1,
    "dmidecode --dump-bin dmi.bin": 1,
    "ss -D diag.bin": 1,
    "file -C -m magic": 1,
    "xmllint --output out.xml in.xml": 1,
    "tree -R -H . -o index.html": 1,
    "atop -w raw.log 10": 1,
    "ncdu -o scan.json /srv": 1,
    "ncdu -o - /srv": 0,
    "lshw -dump hw.db": 1,
    "lshw -short": 0,
    "hwinfo --all --log hw.txt": 1,
    "sar -o data.bin 2 5": 1,
    "sar -o 2 5": 2,  # no file name: the daily file under /var/log/sa
    "sar -u ALL 2": 0,
    "dstat --output out.csv": 1,
    "sslscan --xml=out.xml example.com": 1,
    "testssl --logfile out.log example.com": 1,
    "testssl --json example.com": 1,
    "whatweb --log-json=out.json example.com": 1,
    "httpx -u example.com -ss": 1,
    "tlsx -u db1.example.com -ss": 0,  # -ss is "self-signed" there
    "dnsx -d domains.txt -w words.txt -o out.txt": 1,
    "gau example.com --o urls.txt": 1,
    "flake8 --output-file=lint.txt .": 1,
    "mypy --junit-xml j.xml src": 1,
    "bandit -r . -o report.json": 1,
    "trivy image -o report.json alpine": 1,
    "syft nginx -o spdx-json=sbom.json": 1,
    "syft nginx -o spdx-json": 0,
    "semgrep --json-output=r.json .": 1,
    "feh -m -o montage.png images": 1,
    "mplayer -dumpstream -dumpfile out.mp4 http://example.com/s": 1,
    "mpv --o=out.mkv in.mp4": 1,
    "ffprobe -report in.mp4": 1,
    "mediainfo --LogFile=log.txt in.mp4": 1,
    "pg_waldump --save-fullpage=pages seg": 1,
    "csvclean data.csv": 1,
    "csvclean -n data.csv": 0,
    "mlr --icsv cat then tee out.csv in.csv": 1,
    "mlr --icsv put 'tee > $a.\".csv\", $*' in.csv": 1,
    "xsv index data.csv": 1,
    "sed -n 'w out.txt' in.txt": 1,
    "sed 's/a/b/w changed.txt' in.txt": 1,
    "sed -n '1~2w in.txt' in.txt": 2,
    "sed 's/a/b/;w /etc/passwd' in.txt": 3,
    "sed 's/a/b/w /dev/stdout' in.txt": 0,
    "sed 's/world/w/' in.txt": 0,
    "sed --sandbox 's/a/b/w x' in.txt": 0,
    "sed -f edit.sed in.txt": 1,  # a script file's commands cannot be seen
    "history -w": 1,
    "tldr -u": 1,
    "fastfetch --gen-config": 1,
    "screenfetch -s": 1,
    # ... that change something
    "ss -K dst 192.168.1.20": 2,
    "ss -tK": 2,
    "ss -tulpn": 0,
    "vnstat --remove -i eth0 --force": 2,
    "vnstat --add -i eth0": 2,
    "vnstat -tr 30": 0,
    "lastlog -C -u alice": 2,
    "sensors -s": 2,
    "systemd-analyze set-log-level debug": 2,
    "systemd-analyze log-level debug": 2,
    "systemd-analyze log-level": 0,
    "nmap --script smb-brute host1": 2,
    "nmap --script vuln host1": 2,
    "nmap --script 'default and not intrusive' host1": 0,
    "nmap --script ./mine.nse host1": 1,
    "nmap --script-updatedb": 2,
    "glances -w": 2,
    "inxi -U": 2,
    "httpx -up": 2,
    "mypy --install-types": 2,
    "pip-audit --fix": 2,
    "tflint --fix": 2,
    "semgrep --autofix -c p/python .": 2,
    "ansible-lint --fix": 2,
    "jsonlint -i f.json": 2,
    "xq -i '.a' f.xml": 2,
    "pg_amcheck --install-missing appdb": 2,
    "trivy server": 2,
    "vlc -I http movie.mp4": 2,
    "fc -s": 2,  # re-runs a command from the history, which cannot be classified
    "fc -l": 0,
    # ... and commands they run: classified like a find -exec command
    "sort --compress-program=./squash in.txt": 1,
    "sort --compress-program=gzip in.txt": 0,  # a compressor run as a filter
    "rg --pre 'rm -rf /srv/data' pattern": 3,
    "ugrep --filter='pdf:rm -rf /srv/data' x": 3,
    "man -P 'rm -rf /srv/data' ls": 3,
    "bat --pager 'rm -rf /srv/data' f": 3,
    "sdiff --diff-program='rm notes.txt' a b": 2,
    "feh --action ';[Delete]rm %F' images": 2,
    "sed '1e rm -rf /srv/data' in.txt": 3,
    # adr/0025 Round 6: the s flag e runs a command only known at run time, and this one evidently runs rm -rf (3).
    "sed 's/.*/rm -rf &/e' in.txt": 3,
    "dc -e '!rm -rf /srv/data'": 3,
    "dc -e '1 2 !<a p'": 0,
    "awk 'BEGIN { system(\"rm -rf /srv/data\") }'": 3,
    "awk '{ print | \"sh\" }' cmds.txt": 2,
    "mlr -n put 'end { system(\"rm -rf /srv/data\") }'": 3,
    "trap 'rm -rf /srv/data' EXIT": 3,
    "trap 'echo done' EXIT": 0,
    "trap - INT": 0,
    "bind -x '\"\\C-e\": rm -rf /srv/data'": 3,
    "complete -C 'rm -rf /srv/data' ls": 3,
    ". ./env.sh": 1,
    "kubectl completion fish | source": 1,
}


@pytest.mark.parametrize(("command", "expected"), WRITERS.items())
def test_read_only_programs_that_write_when_told_to(command: str, expected: int) -> None:
    assert tier(command) == expected
    assert Policy("readonly").decide(Subject(command=command)).denied == (expected > 0)


def test_aws_without_a_service_is_classified_not_an_error() -> None:
    # It raised ValueError (the service's position was looked up in the words) and failed the whole call.
    assert tier("aws") == 0 and tier("aws --debug") == 0 and tier("sudo aws") == 2


def test_stdin_is_classified_as_the_text_that_reaches_the_program() -> None:
    assert tier("batch", stdin="rm -rf /srv/data\n") == 3
    assert tier("at now + 1 minute", stdin="reboot\n") == 3
    assert tier("ssh db1", stdin="rm -rf /srv/data\n") == 3
    assert tier("sudo -i", stdin="rm -rf /srv/data\n") == 3
    assert tier("crontab -", stdin="* * * * * rm -rf /srv/data\n") == 3
    assert tier("psql appdb", stdin="DROP TABLE orders;") == 3
    assert tier("mysql appdb", stdin="delete from orders") == 3
    assert tier("sqlite3 app.db", stdin="select count(*) from t;") == 1  # an interactive client reading a query
    assert tier("redis-cli", stdin="FLUSHDB\n") == 3
    assert tier("cat > notes.txt", stdin="rm -rf /") == 1  # data, not commands
    assert tier("cd /tmp && sh", stdin="rm -rf /srv/data\n") == 3
    assert tier("psql <<'EOF'\nDROP DATABASE prod;\nEOF\n") == 3
    assert tier("mysql <<< 'TRUNCATE TABLE t'") == 3


def test_the_env_overlay_is_classified_where_it_reaches_a_program() -> None:
    assert tier('sh -c "$CMD"', env=(("CMD", "rm -rf /srv/data"),)) == 3
    assert tier('eval "$X"', env=(("X", "shutdown -h now"),)) == 3
    assert tier('psql -c "$Q" appdb', env=(("Q", "DROP DATABASE prod"),)) == 3
    # EDITOR's value is the command line the program runs (adr/0025's table of code-carrying variables): vim is an
    # editor (1), a destructive value is what it destroys.
    assert tier("$EDITOR notes.txt", env=(("EDITOR", "vim"),)) == 1
    assert tier("crontab -l", env=(("EDITOR", "rm -rf /srv/data"),)) == 3
    assert tier("ls", env=(("GIT_SSH_COMMAND", "rm -rf /srv/data"),)) == 3
    assert tier('echo "$GREETING"', env=(("GREETING", "rm -rf /"),)) == 0  # only printed, never run
    # without the overlay the command word is only known at run time: any program (adr/0025)
    assert tier('sh -c "$CMD"') == 3


def test_argv_reaches_the_same_rules() -> None:
    assert classify(Subject(argv=("rm", "-rf", "some_dir"))).tier == 3
    assert classify(Subject(argv=("psql",), stdin="DROP TABLE t;")).tier == 3
    assert classify(Subject(argv=("systemctl", "list-units"))).tier == 0


def test_powershell_encoded_commands_are_decoded() -> None:
    encoded = base64.b64encode("Remove-Item -Recurse -Force C:\\data".encode("utf-16-le")).decode()
    assert tier(f"powershell -NoProfile -EncodedCommand {encoded}") == 3
    assert tier("powershell -EncodedCommand !!!notbase64") == 2  # what cannot be read is dynamic


def test_unknown_programs_stay_tier_1_unless_evidence_says_more() -> None:
    assert tier("frobnicate --fast input.dat") == 1
    assert tier("frobnicate list") == 0
    assert tier("frobnicate delete-cluster prod") == 3
    assert tier("frobnicate delete-alarm cpu") == 2


@pytest.mark.parametrize(
    "pathological",
    [
        "a | " * 100_000,
        "for x in y; do " * 100_000,
        "xargs -I{} " * 100_000 + "rm {}",
        "find . " + "-exec rm {} ; " * 100_000,
        "sudo " * 200_000 + "rm -rf /",
        "aws " + "delete-" * 150_000,
        "Remove-Item " + "-r " * 300_000,
        "$X " * 300_000,
        "psql -c '" + "DROP TABLE t; -- ;" * 50_000 + "'",
        "ls -t | tail -n +6 | " * 25_000 + "xargs rm",
        "echo " + "/s " * 300_000,
        "sed '" + "s/a/b/w x\\" * 100_000 + "' f",  # the sed script parser
        "awk '" + '"' + "x" * 900_000 + "'",  # an unterminated string literal
        "mlr put '" + 'tee > "' * 100_000 + "'",
        "nmap --script '" + "not (" * 150_000 + "'",
    ],
)
def test_megabyte_inputs_stay_linear(pathological: str) -> None:
    # A correctness guard against quadratic behaviour (which would take minutes), with a wide margin.
    started = time.process_time()  # CPU, not wall: other processes on a loaded machine do not count
    classify(Subject(command=pathological, stdin=pathological[:1_000_000], env=(("X", "rm -rf /"),)))
    assert time.process_time() - started < 20


def test_megabyte_sql_and_env_values_stay_linear() -> None:
    started = time.process_time()
    sql = "SELECT 1; /* x */ -- y\n" * 40_000
    classify(Subject(command="psql appdb", stdin=sql))
    classify(
        Subject(
            command='sh -c "$A $A $A"',
            env=(*((f"V{index}", "x" * 1000) for index in range(1000)), ("A", "rm " * 20_000)),
        )
    )
    assert time.process_time() - started < 20


def test_an_env_value_classified_in_place_is_not_shown_in_the_reason() -> None:
    # The overlay's value decides the tier, but a reason (sent to the client, kept in the audit log) shows the
    # command as written: the value may be a secret only its variable's name reveals.
    decision = Policy("guarded").decide(
        Subject(command='curl -X POST -H "X-Key: $KEY" https://api.example.com', env=(("KEY", "k-8f3a9c2e71"),))
    )
    assert decision.denied and decision.tier == 2
    assert "k-8f3a9c2e71" not in decision.reason and "k-8f3a9c2e71" not in " ".join(decision.canonical)
    assert "$KEY" in decision.reason
