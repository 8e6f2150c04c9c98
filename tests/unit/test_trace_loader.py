"""The dynamic loader told by content (trace/loader.py, adr/0027 Round 5): real files of this machine."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from relay_shell.trace.loader import is_loader, loaded_program

LOADER = os.path.realpath("/lib64/ld-linux-x86-64.so.2")


def test_the_loader_and_a_copy_of_it_under_another_name_are_loaders(tmp_path: Path) -> None:
    assert is_loader(LOADER)
    copy = tmp_path / "innocent"
    shutil.copy(LOADER, copy)
    assert is_loader(str(copy))


def test_programs_libraries_and_other_files_are_not(tmp_path: Path) -> None:
    libc = glob.glob("/lib/x86_64-linux-gnu/libc.so.6") or glob.glob("/usr/lib/x86_64-linux-gnu/libc.so.6")
    for path in [
        "/usr/bin/true",
        "/usr/bin/python3",
        "/bin/sh",
        *libc,
    ]:  # PIE programs have PT_INTERP; libc.so.6 is a library
        assert not is_loader(os.path.realpath(path)), path
    cut = tmp_path / "cut"
    cut.write_bytes(Path(LOADER).read_bytes()[:100])  # headers claiming what the file does not hold
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    assert not is_loader(str(cut)) and not is_loader(str(script)) and not is_loader(str(tmp_path / "missing"))


def test_the_program_argument_is_found_past_the_options() -> None:
    assert loaded_program([LOADER, "/usr/bin/id", "-u"]) == 1
    assert loaded_program([LOADER, "--argv0", "x", "--inhibit-cache", "--library-path", "/lib", "./id"]) == 6
    assert loaded_program([LOADER, "--list", "/usr/bin/id"]) == 2
    assert loaded_program([LOADER, "--unknown", "/usr/bin/id"]) == 1  # older glibc runs `--unknown`
    assert loaded_program([LOADER, "--help"]) is None and loaded_program([LOADER]) is None
