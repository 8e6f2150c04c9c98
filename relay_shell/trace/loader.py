"""The dynamic loader run as a program (`/lib64/ld-linux-x86-64.so.2 /usr/bin/id`): the kernel execs the loader,
which maps and runs the program named in its arguments with no execve of its own, so the trace sees one exec, of
the loader. With RELAY_SHELL_EXEC_DENY set, the program it will load is resolved in the process's context and
matched too (adr/0027 "Round 5"), as a `#!` script's interpreter is; when it cannot be named (a name without a
slash is searched in the library directories, a file that cannot be read) the exec is refused, like any exec whose
program cannot be determined.

A loader is told by its content, not its name (a copy under another name loads programs as well): an ELF shared
object with no interpreter of its own whose soname is a loader's (glibc's `ld-linux*.so*`/`ld.so*`, musl's
`libc.so`, which is its loader). Read only while deny patterns are set: a few preads of the ELF headers.
"""

from __future__ import annotations

import os
import struct

ET_DYN = 3
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_STRTAB, DT_SONAME = 0, 5, 14
PROGRAM_HEADERS_MAX = 64  # more than any loader has; a file claiming more is not one
DYNAMIC_MAX = 8192  # bytes of the dynamic section read
SONAME_MAX = 64
# glibc's rtld options taking a value, and those taking none (elf/rtld.c); the first other word is the program
_WITH_VALUE = {
    "--library-path",
    "--inhibit-rpath",
    "--audit",
    "--preload",
    "--argv0",
    "--glibc-hwcaps-prepend",
    "--glibc-hwcaps-mask",
}
_FLAGS = {"--list", "--verify", "--inhibit-cache", "--list-tunables", "--list-diagnostics", "--help", "--version"}


def is_loader(handle: str) -> bool:
    """Whether the file at `handle` (a path the server reaches it by) is a dynamic loader. False when it cannot
    be read or parsed (the kernel then does not run it as one either, or it is no loader)."""
    try:
        descriptor = os.open(handle, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        soname = _soname(descriptor)
    except (OSError, struct.error, ValueError):
        return False
    finally:
        os.close(descriptor)
    return soname is not None and (soname.startswith((b"ld-", b"ld.so")) or soname == b"libc.so")


def _soname(descriptor: int) -> bytes | None:
    """DT_SONAME of an ELF shared object without PT_INTERP; None otherwise."""
    header = os.pread(descriptor, 64, 0)
    if len(header) < 52 or header[:4] != b"\x7fELF" or header[4] not in (1, 2) or header[5] not in (1, 2):
        return None
    wide = header[4] == 2
    order = "<" if header[5] == 1 else ">"
    if struct.unpack_from(order + "H", header, 16)[0] != ET_DYN:
        return None
    if wide:
        (phoff,) = struct.unpack_from(order + "Q", header, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", header, 54)
        layout, entry = order + "IIQQQQQQ", order + "qQ"
    else:
        (phoff,) = struct.unpack_from(order + "I", header, 28)
        phentsize, phnum = struct.unpack_from(order + "HH", header, 42)
        layout, entry = order + "IIIIIIII", order + "iI"
    if phnum > PROGRAM_HEADERS_MAX or phentsize < struct.calcsize(layout):
        return None
    table = os.pread(descriptor, phentsize * phnum, phoff)
    loads: list[tuple[int, int, int]] = []  # (vaddr, filesz, offset)
    dynamic: tuple[int, int] | None = None  # (offset, filesz)
    for index in range(phnum):
        fields = struct.unpack_from(layout, table, index * phentsize)
        if wide:
            kind, _, offset, vaddr, _, filesz = fields[:6]
        else:
            kind, offset, vaddr, _, filesz = fields[:5]
        if kind == PT_INTERP:
            return None  # a program with its own loader: the kernel runs that loader, not this file as one
        if kind == PT_LOAD:
            loads.append((vaddr, filesz, offset))
        elif kind == PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return None
    section = os.pread(descriptor, min(dynamic[1], DYNAMIC_MAX), dynamic[0])
    size = struct.calcsize(entry)
    strtab = soname = None
    for start in range(0, len(section) - size + 1, size):
        tag, value = struct.unpack_from(entry, section, start)
        if tag == DT_NULL:
            break
        if tag == DT_STRTAB:
            strtab = value
        elif tag == DT_SONAME:
            soname = value
    if strtab is None or soname is None:
        return None
    for vaddr, filesz, offset in loads:
        if vaddr <= strtab < vaddr + filesz:
            text = os.pread(descriptor, SONAME_MAX, strtab - vaddr + offset + soname)
            return text.split(b"\0", 1)[0]
    return None


def loaded_program(arguments: list[str]) -> int | None:
    """The index in argv of the program a loader is told to run (its options skipped; an unknown `--…` word is
    refused by glibc 2.36 and taken as the program by older ones: named either way), or None when none is named.
    `--list`/`--verify` still load the program: it is named all the same."""
    index = 1
    while index < len(arguments):
        word = arguments[index]
        if word in _WITH_VALUE:
            index += 2
        elif word in _FLAGS:
            index += 1
        else:
            return index
    return None
