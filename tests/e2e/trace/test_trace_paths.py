"""End to end (issue 26): every way of naming the program an exec runs is resolved in the traced process's context
(its root, working directory, descriptors and /proc/self), and a `#!` script's interpreter chain is checked too, so
RELAY_SHELL_EXEC_DENY sees the real program and the record names it (adr/0027). Through a real relay-shell
subprocess and the SDK's stdio client, with the trace on by default (the tests run as root: `auto` is on).

The denied program is a stand-in compiled here, `<workdir>/denied/mark`, which creates the file $MARKER_FILE names:
a case fails if its marker appears. The pattern names only the stand-in's real path, so what catches a spelling is
the resolution, not the text the command was written with. Each case names the class it stands for.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import connect, fields, read_records, text_of
from tests.e2e.trace.attacks import compile_program

pytestmark = pytest.mark.anyio
PYTHON = "/usr/bin/python3"
MARK = r"""
#include <fcntl.h>
#include <stdlib.h>
int main(void) { const char *m = getenv("MARKER_FILE"); if (m) close(creat(m, 0644)); return 0; }
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("trace-paths")
    (directory / "denied").mkdir()
    compile_program(MARK, directory / "denied" / "mark")
    return directory


@pytest.fixture(scope="module")
async def client(workdir: Path) -> AsyncIterator[Client]:
    deny = f'["^{workdir}/denied/mark( |$)"]'
    async with connect(workdir / "audit.jsonl", exec_deny=deny) as connected:  # the trace: its default
        yield connected


def last_end(workdir: Path) -> dict[str, Any]:
    return [record for record in read_records(workdir / "audit.jsonl") if record.get("phase") == "end"][-1]


async def refused(client: Client, workdir: Path, command: str, shell: str = "sh") -> dict[str, Any]:
    """Run `command` (MARKER_FILE set); assert the stand-in never ran and its exec is in the record, refused.
    Returns the refused entry."""
    marker = workdir / f"ran-{secrets.token_hex(4)}"
    denied = workdir / "denied" / "mark"
    script = f"MARKER_FILE={marker} DENIED={denied}; export MARKER_FILE DENIED; cd {workdir}\n{command}\n"
    result = await client.call_tool("shell_script", {"script": script, "interpreter": shell, "timeout": 30})
    text = text_of(result)
    assert not marker.exists(), f"the denied program ran: {command!r}\n{text}"
    assert "exec refused by RELAY_SHELL_EXEC_DENY" in text, text
    execs = last_end(workdir)["execs"]
    entries = [entry for entry in execs["entries"] if entry.get("denied")]
    assert execs["denied"] >= 1 and entries, execs
    return entries[0]


def program(item: dict[str, Any]) -> str | None:
    """What an entry (or an interpreter level) ran: `program` when the path led elsewhere, else the path."""
    return item["program"] if "program" in item else item["path"]


def named(entry: dict[str, Any], workdir: Path) -> None:
    """The entry names the stand-in it would have run: its program, or a level of its interpreter chain."""
    names = [program(entry), *[program(level) for level in entry.get("interpreter", [])]]
    assert str(workdir / "denied" / "mark") in names, entry


async def test_the_trace_is_on_by_default_here(client: Client) -> None:
    """Root runs these tests: `auto` traces (adr/0027)."""
    info = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]
    assert (info["state"], info["setting"]) == ("on", "auto") and info["reason"].startswith("auto: "), info


async def test_dev_fd_of_a_descriptor_the_shell_opened(client: Client, workdir: Path) -> None:
    """Class /dev/fd/N: the issue's `exec 99<…; /dev/fd/99` (bash) and the same in sh with a one-digit fd."""
    named(await refused(client, workdir, 'exec 99<"$DENIED"; /dev/fd/99', shell="bash"), workdir)
    entry = await refused(client, workdir, 'exec 7<"$DENIED"; /dev/fd/7')
    assert entry["path"] == "/dev/fd/7" and entry["program"] == str(workdir / "denied" / "mark"), entry


async def test_proc_self_and_proc_pid_and_thread_self(client: Client, workdir: Path) -> None:
    """Class /proc/…/fd/N: /proc/self resolved as the exec'ing process's, not the server's."""
    named(await refused(client, workdir, 'exec 7<"$DENIED"; /proc/self/fd/7'), workdir)
    named(await refused(client, workdir, 'exec 7<"$DENIED"; /proc/$$/fd/7'), workdir)
    named(await refused(client, workdir, 'exec 7<"$DENIED"; /proc/thread-self/fd/7'), workdir)
    named(await refused(client, workdir, 'exec 7<"$DENIED"; /proc/self/fd/../fd/7'), workdir)


async def test_more_spellings_of_a_descriptor(client: Client, workdir: Path) -> None:
    """Class descriptor: stdin, a symlink into /dev/fd, a working directory inside /proc/self/fd, the process's
    root through /proc/self/root, the program by /proc/self/cwd."""
    named(await refused(client, workdir, '/dev/stdin < "$DENIED"'), workdir)
    named(await refused(client, workdir, 'ln -sf /dev/fd/7 link7; exec 7<"$DENIED"; ./link7'), workdir)
    named(await refused(client, workdir, 'exec 7<"$DENIED"; cd /proc/self/fd && ./7'), workdir)
    named(await refused(client, workdir, '/proc/self/root"$DENIED"'), workdir)
    named(await refused(client, workdir, "cd denied && /proc/self/cwd/mark"), workdir)


async def test_shebang_interpreters_and_env_targets(client: Client, workdir: Path) -> None:
    """Class `#!`: the kernel runs the interpreter itself (no second execve): each level is checked."""
    direct = await refused(client, workdir, 'printf "#!%s\\n" "$DENIED" > s1; chmod +x s1; ./s1')
    assert program(direct["interpreter"][0]) == str(workdir / "denied" / "mark"), direct
    nested = 'printf "#!%s\\n" "$DENIED" > s2; printf "#!./s2\\n" > s3; chmod +x s2 s3; ./s3'
    assert len((await refused(client, workdir, nested))["interpreter"]) == 2
    split = await refused(client, workdir, 'printf "#!/usr/bin/env -S %s -x\\n" "$DENIED" > s4; chmod +x s4; ./s4')
    assert split["interpreter"][0]["runs"] == [str(workdir / "denied" / "mark"), "-x"], split
    # env given a name: what env then executes (a real exec, trapped) is refused.
    await refused(client, workdir, 'printf "#!/usr/bin/env mark\\n" > s5; chmod +x s5; PATH="$PWD/denied:$PATH" ./s5')
    named(await refused(client, workdir, 'ln -sf "$DENIED" interp; printf "#!%s/interp\\n" "$PWD" > s6; ./s6 || '
                        'chmod +x s6; ./s6'), workdir)  # fmt: skip


async def test_execs_of_descriptors_no_path_names_are_refused(client: Client, workdir: Path) -> None:
    """Class undetermined: a memfd (fexecve), a deleted file run through its descriptor: no path leads to what
    runs, so with EXEC_DENY set the exec is refused (fail closed), and the record says why."""
    memfd = (
        f'{PYTHON} -c \'import os; f = os.memfd_create("innocent", 0); '
        'os.write(f, open(os.environ["DENIED"], "rb").read()); os.execve(f, ["innocent"], dict(os.environ))\''
    )
    entry = await refused(client, workdir, memfd)
    assert entry["program"] is None and "no path" in entry["undetermined"], entry
    deleted = (
        'cp "$DENIED" copy; '
        f'{PYTHON} -c \'import os; f = os.open("copy", os.O_RDONLY); os.unlink("copy"); '
        'os.execv(f"/proc/self/fd/{f}", ["copy"])\''
    )
    assert (await refused(client, workdir, deleted))["program"] is None


async def test_execveat_forms(client: Client, workdir: Path) -> None:
    """Class execveat: relative to a directory descriptor, and of an O_PATH descriptor itself (AT_EMPTY_PATH)."""
    call = (
        f"{PYTHON} -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
        'argv = (ctypes.c_char_p * 2)(b"x", None); envp = (ctypes.c_char_p * 2)(os.environb[b"MARKER_FILE"] and '
        'b"MARKER_FILE=" + os.environb[b"MARKER_FILE"], None); {body}; print(ctypes.get_errno())\''
    )
    at_directory = 'd = os.open("denied", os.O_PATH); libc.syscall(322, d, b"mark", argv, envp, 0)'
    named(await refused(client, workdir, call.format(body=at_directory)), workdir)
    empty_path = 'd = os.open(os.environ["DENIED"], os.O_PATH); libc.syscall(322, d, b"", argv, envp, 0x1000)'
    entry = await refused(client, workdir, call.format(body=empty_path))
    assert entry["path"].startswith("/dev/fd/") and entry["program"] == str(workdir / "denied" / "mark"), entry


async def test_a_symlink_swapped_between_two_execs_is_checked_again(client: Client, workdir: Path) -> None:
    """TOCTOU, the closed part: a decision never reuses an earlier resolution (the one-second cache serves the
    record only, without EXEC_DENY), so a link that pointed at an allowed program a moment ago is refused once it
    points at the denied one. The open part (a swap racing one exec, between the check and the kernel's own
    lookup) is in adr/0027."""
    command = 'ln -sf /bin/true swap; ./swap && echo allowed; ln -sf "$DENIED" swap; ./swap'
    entry = await refused(client, workdir, command)
    assert entry["path"] == str(workdir / "swap") and entry["program"] == str(workdir / "denied" / "mark"), entry
    allowed = [item for item in last_end(workdir)["execs"]["entries"] if item["path"] == str(workdir / "swap")]
    assert allowed[0]["ok"] is True and allowed[0]["program"] == "/usr/bin/true", allowed


async def test_a_copy_under_another_name_is_not_matched_but_is_named(client: Client, workdir: Path) -> None:
    """What EXEC_DENY does not claim: a copy of the denied program elsewhere is another file (not refused), and
    the record names it as it is."""
    marker = workdir / "copy-ran"
    shutil.copy(workdir / "denied" / "mark", workdir / "elsewhere")
    result = await client.call_tool("shell_exec", {"command": f"MARKER_FILE={marker} {workdir}/elsewhere"})
    assert fields(result)["status"] == "ok" and marker.exists(), text_of(result)
    entries = last_end(workdir)["execs"]["entries"]
    assert any(entry["path"] == str(workdir / "elsewhere") and "program" not in entry for entry in entries)


async def test_the_record_names_the_real_program_without_exec_deny(tmp_path: Path) -> None:
    """Without patterns nothing is refused, and the entry still names what ran: the descriptor's file, a link's
    target, a script's interpreter."""
    audit = tmp_path / "audit.jsonl"
    script = tmp_path / "script"
    script.write_text("#!/bin/sh -e\necho from-script\n")
    script.chmod(0o755)
    async with connect(audit) as client:
        command = f"exec 7</usr/bin/id; /dev/fd/7 -u; /proc/self/fd/7 -g; {script}"
        result = await client.call_tool("shell_exec", {"command": command})
        assert "from-script" in text_of(result), text_of(result)
    entries = [record for record in read_records(audit) if record.get("phase") == "end"][-1]["execs"]["entries"]
    by_path = {entry["path"]: entry for entry in entries}
    assert by_path["/dev/fd/7"]["program"] == "/usr/bin/id" and by_path["/dev/fd/7"]["argv"] == ["/dev/fd/7", "-u"]
    assert by_path["/proc/self/fd/7"]["program"] == "/usr/bin/id"
    level = by_path[str(script)]["interpreter"][0]
    assert level["path"] == "/bin/sh" and level["argument"] == "-e" and level["program"] == os.path.realpath("/bin/sh")


async def test_the_dynamic_loader_run_as_a_program(client: Client, workdir: Path) -> None:
    """Class loader: `ld.so PROGRAM` maps and runs the program with no execve of its own, so the one exec the
    kernel sees is the loader's; the program it is told to load is checked too (adr/0027 "Round 5"). By its path,
    through its options, a copy under another name (told by content, not name), a relative name, as a `#!`
    interpreter whose argument is the program; a name without a slash (searched in the library directories) cannot
    be determined: refused. The loader itself, told to run an allowed program, runs."""
    loader = os.path.realpath("/lib64/ld-linux-x86-64.so.2")
    entry = await refused(client, workdir, f'{loader} "$DENIED"')
    assert entry["path"] == loader or entry.get("program") == loader, entry
    await refused(client, workdir, '/lib64/ld-linux-x86-64.so.2 --argv0 x --inhibit-cache "$DENIED"')
    await refused(client, workdir, f'cp {loader} ./innocent && ./innocent --library-path /lib "$DENIED"')
    await refused(client, workdir, f"cd denied && {loader} ./mark")
    await refused(client, workdir, f'printf "#!{loader} %s\\n" "$DENIED" > s7; chmod +x s7; ./s7')
    searched = await refused(client, workdir, f"cd denied && {loader} --library-path . mark")
    assert "library directories" in searched["refusal"], searched
    marker = workdir / f"ran-{secrets.token_hex(4)}"
    writes = f'{PYTHON} -c \'import os; open(os.environ["MARKER_FILE"], "w")\''
    script = f"cd {workdir}; {loader} /usr/bin/env MARKER_FILE={marker} {writes}\n"
    result = await client.call_tool("shell_script", {"script": script, "interpreter": "sh", "timeout": 30})
    assert marker.exists(), text_of(result)
