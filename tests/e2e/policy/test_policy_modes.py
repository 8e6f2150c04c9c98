"""Policy through the real server: denials are audited, say why, and nothing runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import connect, read_records, text_of

pytestmark = pytest.mark.anyio


async def test_readonly_mode_admits_only_tier_0(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    marker = tmp_path / "marker"
    async with connect(audit_path, policy_mode="readonly") as client:
        observe = await client.call_tool("shell_exec", {"command": f"ls -la {tmp_path}"})
        assert text_of(observe).startswith("[exit 0]")
        change = await client.call_tool("shell_exec", {"command": f"touch {marker}"})
        assert change.is_error
        assert text_of(change).startswith("[DENIED tier 1 (reversible): ")
        assert change.structured_content and change.structured_content["status"] == "denied"
        # stdin that feeds a shell is classified as a script
        piped = await client.call_tool("shell_exec", {"command": "sh", "stdin": "rm -rf /\n"})
        assert text_of(piped).startswith("[DENIED tier 3 (irreversible): ")
        # the env overlay is classified too
        injected = await client.call_tool("shell_exec", {"command": "ls", "env": {"LD_PRELOAD": "/tmp/evil.so"}})
        assert text_of(injected).startswith("[DENIED tier 2")
        script = await client.call_tool("shell_script", {"script": f"echo hi\ntouch {marker}\n"})
        assert text_of(script).startswith("[DENIED tier 1")
        info = await client.call_tool("server_info", {})
        assert not info.is_error
    assert not marker.exists()
    denied = [record for record in read_records(audit_path) if record.get("denied")]
    assert len(denied) == 4
    assert all(record["outcome"] == "denied" and "reason" in record for record in denied)


async def test_deny_patterns_see_canonical_forms_in_every_mode(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    marker = tmp_path / "victim"
    marker.mkdir()
    deny = json.dumps([r"^rm .*victim"])
    async with connect(audit_path, policy_mode="open", policy_deny=deny) as client:
        for spelling in (
            f"rm -r {marker}",
            f"sudo  /bin/rm  -r  '{marker}'",
            f"env X=1 nice -n 5 r''m -r {marker}",
            f"true && \\rm -r {marker}",
            f'bash -c "rm -r {marker}"',
        ):
            result = await client.call_tool("shell_exec", {"command": spelling})
            # a recursive delete of a directory is tier 3 (issue 17); the deny pattern refuses it first
            assert text_of(result).startswith("[DENIED tier 3 (irreversible): matches deny pattern"), spelling
        other = await client.call_tool("shell_exec", {"command": "echo still-works"})
        assert text_of(other) == "[exit 0]\nstill-works\n"
    assert marker.exists()


async def test_guarded_mode_needs_an_allow_for_each_stateful_command(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    target = tmp_path / "build"
    target.mkdir()
    allow = json.dumps([rf"^rm -r {target}$"])
    async with connect(audit_path, policy_mode="guarded", policy_allow=allow) as client:
        reversible = await client.call_tool("shell_exec", {"command": f"mkdir -p {tmp_path}/new"})
        assert text_of(reversible).startswith("[exit 0]")
        unallowed = await client.call_tool("shell_exec", {"command": f"rm -r {tmp_path}/new"})
        assert text_of(unallowed).startswith("[DENIED tier 3 (irreversible): ")
        smuggled = await client.call_tool("shell_exec", {"command": f"rm -r {target}; rm -r {tmp_path}/new"})
        assert text_of(smuggled).startswith("[DENIED tier 3")
        allowed = await client.call_tool("shell_exec", {"command": f"rm -r {target}"})
        assert text_of(allowed).startswith("[exit 0]")
    assert not target.exists()
    assert (tmp_path / "new").exists()


async def test_destructive_variants_are_tier_3(tmp_path: Path) -> None:
    # readonly mode: classified and refused, never run.
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path, policy_mode="readonly") as client:
        for command in (
            "rm -rf /",
            "rm --recursive --force --no-preserve-root /",
            "sudo rm -fr /*",
            "dd if=/dev/zero of=/dev/sda bs=1M",
            "cat /dev/urandom > /dev/nvme0n1",
            "mkfs.ext4 /dev/sdb1",
            ":(){ :|:& };:",
            "echo x > /etc/passwd",
            "find / -delete",
            "xargs rm -rf < list",
            "timeout 5 shutdown -h now",
        ):
            result = await client.call_tool("shell_exec", {"command": command})
            assert text_of(result).startswith("[DENIED tier 3 (irreversible)"), command


async def test_readonly_refuses_read_only_tools_that_write_and_wrapper_spellings(tmp_path: Path) -> None:
    # Tools that print (tier 0) but write a file, run a command or close sockets when told to, and wrappers in
    # getopt spellings or given no command: each is refused and nothing is written; the same tools without the
    # option run.
    audit_path = tmp_path / "audit.jsonl"
    source = tmp_path / "in.txt"
    source.write_text("b\na\na\n")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    out = tmp_path / "out"
    refused: list[tuple[dict[str, str], int]] = [
        ({"command": f"sort -o {out}-sort {source}"}, 1),
        ({"command": f"sort --output={out}-sort-long {source}"}, 1),
        ({"command": f"sort -uo {out}-sort-bundled {source}"}, 1),
        ({"command": f"uniq {source} {out}-uniq"}, 1),
        ({"command": f"cat {source} | less -o {out}-less"}, 1),
        ({"command": f"cat {source} | less -O {out}-less-upper"}, 1),
        ({"command": f"cat {source} | less --log-file={out}-less-long"}, 1),
        ({"command": f"sed -n 'w {out}-sed' {source}"}, 1),
        ({"command": f"sed '1e touch {out}-sed-e' {source}"}, 1),
        ({"command": f"ss -t -D {out}-ss"}, 1),
        ({"command": f"history -w {out}-history"}, 1),
        ({"command": f"trap 'touch {out}-trap' EXIT; echo hi"}, 1),
        ({"command": f"man -P 'touch {out}-man' ls"}, 1),
        ({"command": f"sort --compress-program=./squash -o {out}-compressed {source}"}, 1),
        ({"command": "ss -K dst 192.0.2.1"}, 2),
        ({"command": f"script --command='rm -rf {tree}' {out}-script"}, 3),
        ({"command": f"script -qc 'rm -rf {tree}' /dev/null"}, 3),
        ({"command": f"script -q {out}-typescript", "stdin": f"rm -rf {tree}\n"}, 3),
        ({"command": f"flock --command 'rm -rf {tree}' {out}-lock"}, 3),
    ]
    async with connect(audit_path, policy_mode="readonly") as client:
        for arguments, tier in refused:
            result = await client.call_tool("shell_exec", arguments)
            assert text_of(result).startswith(f"[DENIED tier {tier} "), (arguments, text_of(result))
        printed = await client.call_tool("shell_exec", {"command": f"sort {source} | uniq -c"})
        assert text_of(printed).startswith("[exit 0]") and "2 a" in text_of(printed), text_of(printed)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["audit.jsonl", "in.txt", "tree"], "a refused call ran"
    assert (tree / "sub").is_dir()
    denied = [record for record in read_records(audit_path) if record.get("denied")]
    assert len(denied) == len(refused)


async def test_abbreviated_options_and_swallowed_commands_are_refused_and_nothing_runs(tmp_path: Path) -> None:
    # getopt_long reads any unambiguous prefix of a long option (`--sp` is env's --split-string); env's signal
    # options take only `=SIG`, so the next word is the command; dc runs `!cmd` from its stdin (final review
    # F1-F3). readonly refuses the tier-1 spellings, guarded the tier-3 ones; nothing is written or deleted.
    audit_path = tmp_path / "audit.jsonl"
    source = tmp_path / "in.txt"
    source.write_text("b\na\n")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    repository = tree / "repository"
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    (repository / "untracked").write_text("x")
    out = tmp_path / "out"
    readonly: list[tuple[dict[str, str], int]] = [
        ({"command": f"env --sp='touch {out}-env'"}, 1),
        ({"command": f"sed --e='1e touch {out}-sed' {source}"}, 1),
        ({"command": f"sort --out={out}-sort {source}"}, 1),
        ({"command": f"sort --o {out}-sort-o {source}"}, 1),
        ({"command": f"shuf --out={out}-shuf {source}"}, 1),
        ({"command": f"man --pag='touch {out}-man' ls"}, 1),
        ({"command": f"dc --exp='!touch {out}-dc'"}, 1),
        ({"command": f"echo '!touch {out}-dc-pipe' | dc"}, 1),
        ({"command": "dc", "stdin": f"!touch {out}-dc-stdin\n"}, 1),
        ({"command": f"git -C {repository} clean --forc"}, 2),  # a per-program rule's option, abbreviated
    ]
    guarded: list[tuple[dict[str, str], int]] = [
        ({"command": f"env --block-signal sh -c 'rm -rf {tree}'"}, 3),
        ({"command": f"env --ignore-signal rm -rf {tree}"}, 3),
        ({"command": f"faketime -f +1d rm -rf {tree}"}, 3),
        ({"command": f"script --com='rm -rf {tree}' /dev/null"}, 3),
        ({"command": f"echo '!rm -rf {tree}' | dc"}, 3),
        ({"command": f"dc <<< '!rm -rf {tree}'"}, 3),
        ({"command": f"rm --rec {tree}"}, 3),
        ({"command": f"chmod --rec 000 {tree}"}, 2),
    ]
    for mode, refused in (("readonly", readonly), ("guarded", guarded)):
        async with connect(audit_path, policy_mode=mode) as client:
            for arguments, tier in refused:
                result = await client.call_tool("shell_exec", arguments)
                assert text_of(result).startswith(f"[DENIED tier {tier} "), (mode, arguments, text_of(result))
            printed = await client.call_tool("shell_exec", {"command": f"sort --rev {source}"})
            assert text_of(printed) == "[exit 0]\nb\na\n", text_of(printed)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["audit.jsonl", "in.txt", "tree"], "a refused call ran"
    assert (tree / "sub").is_dir()
    assert (repository / "untracked").exists()
    assert tree.stat().st_mode & 0o777 != 0
    denied = [record for record in read_records(audit_path) if record.get("denied")]
    assert len(denied) == len(readonly) + len(guarded)
