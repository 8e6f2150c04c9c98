"""What a paused execve/execveat asks for, read from the process's memory (/proc/PID/mem).

Every read is bounded: a path up to PATH_MAX, at most MAX_ARGS argument pointers (the count goes on) and
MAX_ARG_BYTES of argument text per exec (one argument longer than the kernel's MAX_ARG_STRLEN cannot be passed
anyway); no read crosses a page (a string ending just before an unmapped page must not fail the read). What
was read is kept only if the answer then reaches the process (trace/seccomp.py): otherwise the process did not
wait all along, and the memory read may be another program's (process_vm_readv names the process by its pid).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os

PAGE = 4096
PATH_MAX = 4096
MAX_ARGS = 1024  # argument pointers read; the count goes on (argc) up to MAX_ARG_POINTERS
MAX_ARG_POINTERS = 1 << 20
MAX_ARG_BYTES = 256 * 1024  # argument text read per exec, all arguments together
MAX_ARG_STRLEN = 32 * PAGE  # the kernel's limit for one argument


_FIRST_CHUNK = 256  # bytes read at first from a string: most end within it
_FIRST_POINTERS = 16 * 8  # bytes of argv's pointer array read at first
_IOV_MAX = 1024  # iovecs per process_vm_readv call


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.process_vm_readv.restype = ctypes.c_ssize_t
_libc.process_vm_readv.argtypes = [
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
    ctypes.c_ulong,
    ctypes.c_ulong,
]


class Reader:
    """Reads a process's memory with process_vm_readv into one buffer of the reading thread's (the tracer's
    service thread has one): many spans in one call, each within one page, so a span is read whole or not at all
    (the call stops at the first span it cannot read)."""

    def __init__(self) -> None:
        self.size = MAX_ARG_BYTES + _IOV_MAX * _FIRST_CHUNK + 2 * PAGE
        # Anonymous pages, resident only once a read writes them: the zero-filled ctypes buffer this was kept every
        # idle traced server's 520 KiB resident (adr/0030, round 4: idle RSS 1.090x -> 1.082-1.085x the bare server).
        self.pages = mmap.mmap(-1, self.size)
        self.buffer = (ctypes.c_char * self.size).from_buffer(self.pages)
        self.base = ctypes.addressof(self.buffer)

    def spans(self, pid: int, spans: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each span (address, length) that could be read, in order, up to the first that could not.
        OSError when none could (the process is gone: ESRCH)."""
        count = len(spans)
        local = (_IOVec * count)()
        remote = (_IOVec * count)()
        offset = 0
        for index, (address, length) in enumerate(spans):
            local[index].base = self.base + offset
            local[index].length = length
            remote[index].base = address
            remote[index].length = length
            offset += length
        got = _libc.process_vm_readv(pid, local, count, remote, count, 0)
        if got < 0:
            code = ctypes.get_errno()
            if code != errno.EFAULT:
                raise OSError(code, os.strerror(code))
            got = 0
        found = []
        offset = 0
        for _, length in spans:
            if offset + length > got:
                break
            found.append(ctypes.string_at(self.base + offset, length))
            offset += length
        return found

    def one(self, pid: int, address: int, length: int) -> bytes:
        found = self.spans(pid, [(address, length)])
        return found[0] if found else b""

    def rest_of_string(self, pid: int, chunk: bytes, address: int, limit: int) -> tuple[bytes, bool]:
        """A string whose first `chunk` (read at `address`) held no NUL: read on a page at a time."""
        pieces = [chunk]
        total = len(chunk)
        address += len(chunk)
        while chunk and total < limit:
            chunk = self.one(pid, address, min(PAGE - address % PAGE, limit - total))
            end = chunk.find(b"\0")
            if end >= 0:
                pieces.append(chunk[:end])
                return b"".join(pieces), True
            pieces.append(chunk)
            total += len(chunk)
            address += len(chunk)
        return b"".join(pieces), False


def _first(address: int, limit: int) -> tuple[int, int]:
    """The first span of a string at `address`: up to _FIRST_CHUNK bytes, not past its page."""
    return address, min(PAGE - address % PAGE, limit, _FIRST_CHUNK)


def _string(reader: Reader, pid: int, chunk: bytes | None, address: int, limit: int) -> tuple[bytes, bool]:
    """The NUL-terminated string at `address` whose first span is `chunk` (None: could not be read)."""
    if chunk is None:
        chunk = reader.one(pid, *_first(address, limit))
        if not chunk:
            raise OSError(errno.EFAULT, "unreadable string", hex(address))
    end = chunk.find(b"\0")
    if end >= 0:
        return chunk[:end], True
    return reader.rest_of_string(pid, chunk, address, limit)


def read_request(
    reader: Reader, pid: int, path_address: int, argv_address: int, pointer_size: int = 8
) -> tuple[bytes, list[bytes], int, bool]:
    """The raw path, the raw arguments (at most MAX_ARGS, MAX_ARG_BYTES together), the real argument count, and
    whether anything was cut. `pointer_size` 4 for a 32-bit ABI's argv array (i386, x32). Kept lean: the
    process waits while this runs (decoding happens after the answer). process_vm_readv, two calls for most
    execs (the path and the first pointers; then every argument's first span), and no /proc entry opened: the
    first open of a new process's /proc entry costs ~20-30 µs here, more than reading all of it (adr/0027).
    OSError when the memory cannot be read (the process is gone)."""
    first = [_first(path_address, PATH_MAX)] if path_address else []
    if argv_address:
        first.append((argv_address, min(PAGE - argv_address % PAGE, _FIRST_POINTERS)))
    found = reader.spans(pid, first) if first else []
    raw_path, path_complete = b"", True
    if path_address:
        raw_path, path_complete = _string(reader, pid, found[0] if found else None, path_address, PATH_MAX)
    block = found[1] if argv_address and len(found) > 1 else None
    pointers, argc, cut = _pointers(reader, pid, argv_address, block, pointer_size)
    budget = MAX_ARG_BYTES
    wanted = pointers[:MAX_ARGS]
    chunks: list[bytes] = []
    for start in range(0, len(wanted), _IOV_MAX):
        batch = wanted[start : start + _IOV_MAX]
        chunks.extend(reader.spans(pid, [_first(pointer, MAX_ARG_STRLEN) for pointer in batch]))
    argv: list[bytes] = []
    for index, pointer in enumerate(wanted):
        if budget <= 0:
            cut = True
            break
        chunk = chunks[index] if index < len(chunks) else None
        text, complete = _string(reader, pid, chunk, pointer, min(budget, MAX_ARG_STRLEN))
        budget -= len(text) + 1
        argv.append(text)
        cut = cut or not complete
    cut = cut or not path_complete or len(argv) < argc
    return raw_path, argv, argc, cut


def _pointers(
    reader: Reader, pid: int, argv_address: int, block: bytes | None, pointer_size: int
) -> tuple[list[int], int, bool]:
    """argv's pointers (the first MAX_ARGS of them), the real count, and whether the array could not be read to
    its end."""
    pointers: list[int] = []
    argc = 0
    address = argv_address
    while argv_address and argc < MAX_ARG_POINTERS:
        if block is None:
            block = reader.one(pid, address, PAGE - address % PAGE)
            if not block and argc == 0:
                raise OSError(errno.EFAULT, "unreadable argv", hex(argv_address))
        count = len(block) // pointer_size
        if not count:
            return pointers, argc, True
        view = memoryview(block)[: count * pointer_size]
        for pointer in view.cast("Q") if pointer_size == 8 else view.cast("I"):
            if pointer == 0:
                return pointers, argc, False
            argc += 1
            if len(pointers) < MAX_ARGS:
                pointers.append(pointer)
        address += count * pointer_size
        block = None
    return pointers, argc, argc >= MAX_ARG_POINTERS


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="backslashreplace")
