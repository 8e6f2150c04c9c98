"""A probe of the host's shared state a readonly tree must not change or squat (adr/0024, Round 4): device ioctls
through read-only descriptors (R1), kernel keyrings (R2), leases and locks (R3), names bound (R4). Installed on the
server's PATH under a read-only command's name (`nproc`), it prints one JSON object {attempt: "ok" or errno name}.

Every attempt undoes itself when the process ends (a process keyring, a lease, a lock, a socket), but LOOP_CTL_ADD:
the test picks a free high index and removes /dev/loopN afterwards if the attempt got through."""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROBE = r"""
import ctypes, errno, fcntl, json, os, platform, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
work, loop_index, udp_port, abstract = os.environ["SHARED_DIR"], int(os.environ["SHARED_LOOP"]), \
    int(os.environ["SHARED_UDP_PORT"]), os.environ["SHARED_ABSTRACT"]
numbers = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
ADD_KEY, REQUEST_KEY, KEYCTL = numbers
PROCESS_KEYRING, USER_KEYRING = -2, -4
out = {}
def attempt(name, action):
    try:
        action()
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
def call(number, *args):
    converted = [a if isinstance(a, (bytes, type(None))) else ctypes.c_long(a) for a in args]
    result = libc.syscall(ctypes.c_long(number), *converted)
    if result < 0:
        code = ctypes.get_errno(); raise OSError(code, os.strerror(code))
    return result
def ioctl_on(path, request, argument):
    descriptor = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(descriptor, request, argument)
    finally:
        os.close(descriptor)
# R1: a loop device made through /dev/loop-control opened read-only (LOOP_CTL_ADD)
attempt("loop_ctl_add", lambda: ioctl_on("/dev/loop-control", 0x4C80, loop_index))
attempt("null_ioctl", lambda: ioctl_on("/dev/null", 0x5401, bytes(60)))  # TCGETS: ENOTTY, not refused
attempt("zero_ioctl", lambda: ioctl_on("/dev/zero", 0x5401, bytes(60)))  # any device but its own ones
# R2: keyrings
attempt("add_key", lambda: call(ADD_KEY, b"user", b"relay-probe", b"x", 1, PROCESS_KEYRING))
attempt("request_key", lambda: call(REQUEST_KEY, b"user", b"relay-absent-%d" % os.getpid(), None, 0))
attempt("keyring_create", lambda: call(KEYCTL, 0, PROCESS_KEYRING, 1))  # GET_KEYRING_ID, create
attempt("keyring_id", lambda: call(KEYCTL, 0, USER_KEYRING, 0))  # GET_KEYRING_ID, no create: a read
attempt("join_session", lambda: call(KEYCTL, 1, None))  # JOIN_SESSION_KEYRING (a new anonymous one)
attempt("search_linking", lambda: call(KEYCTL, 10, USER_KEYRING, b"user", b"relay-absent", PROCESS_KEYRING))
attempt("search", lambda: call(KEYCTL, 10, USER_KEYRING, b"user", b"relay-absent", 0))
attempt("clear", lambda: call(KEYCTL, 7, PROCESS_KEYRING))
attempt("describe", lambda: call(KEYCTL, 6, USER_KEYRING, None, 0))
# R3: a lease and locks on a file opened read-only
locked = os.open(os.path.join(work, "locked"), os.O_RDONLY)
attempt("lease", lambda: fcntl.fcntl(locked, 1024, fcntl.F_RDLCK))  # F_SETLEASE
attempt("flock_ex", lambda: fcntl.flock(locked, fcntl.LOCK_EX | fcntl.LOCK_NB))
attempt("flock_sh", lambda: fcntl.flock(locked, fcntl.LOCK_SH | fcntl.LOCK_NB))
fcntl.flock(locked, fcntl.LOCK_UN)
lock = lambda kind: struct.pack("hhqqi4x", kind, 0, 0, 0, 0)
attempt("posix_write_lock", lambda: fcntl.fcntl(locked, fcntl.F_SETLK, lock(fcntl.F_WRLCK)))
attempt("ofd_write_lock", lambda: fcntl.fcntl(locked, 37, lock(fcntl.F_WRLCK)))  # F_OFD_SETLK
attempt("posix_read_lock", lambda: fcntl.fcntl(locked, fcntl.F_SETLK, lock(fcntl.F_RDLCK)))
# R4: names bound
def bound(family, kind, address, listen=False):
    with socket.socket(family, kind) as sock:
        sock.bind(address)
        if listen:
            sock.listen()
attempt("udp_port", lambda: bound(socket.AF_INET, socket.SOCK_DGRAM, ("0.0.0.0", udp_port)))
attempt("udp_port_0", lambda: bound(socket.AF_INET, socket.SOCK_DGRAM, ("0.0.0.0", 0)))  # dig's bind
attempt("udp6_port_0", lambda: bound(socket.AF_INET6, socket.SOCK_DGRAM, ("::", 0)))
attempt("netlink", lambda: bound(socket.AF_NETLINK, socket.SOCK_RAW, (0, 0)))  # ip, ss
attempt("abstract_dgram", lambda: bound(socket.AF_UNIX, socket.SOCK_DGRAM, "\0" + abstract))
attempt("abstract_stream", lambda: bound(socket.AF_UNIX, socket.SOCK_STREAM, "\0" + abstract))
attempt("autobind", lambda: bound(socket.AF_UNIX, socket.SOCK_DGRAM, ""))  # a name the kernel picks
attempt("autobind_listen", lambda: bound(socket.AF_UNIX, socket.SOCK_STREAM, "", listen=True))
def listen_unbound():
    with socket.socket() as sock:
        sock.listen()  # an ephemeral TCP port, no bind(2)
attempt("tcp_listen_unbound", listen_unbound)
print(json.dumps(out))
"""

# LOOP_CTL_ADD reaches the driver only for root (/dev/loop-control is root's alone); otherwise it is refused at open.
LOOP_ATTEMPT = os.geteuid() == 0 and os.path.exists("/dev/loop-control")
# The attempts the kernel must refuse a readonly tree, at every ABI (the filter) or from Landlock ABI 5 (devices).
REFUSED = (
    "add_key", "request_key", "keyring_create", "join_session", "search_linking", "clear", "lease", "flock_ex",
    "abstract_dgram", "abstract_stream", "autobind_listen", "tcp_listen_unbound",
)  # fmt: skip
# What read-only programs do, left to them: reads of keys, shared locks, the binds of dig, ip and ss.
ALLOWED = ("keyring_id", "describe", "flock_sh", "posix_read_lock", "udp_port_0", "udp6_port_0", "netlink", "autobind")


def install(bin_dir: Path) -> None:
    """The probe as `bin_dir/nproc` (run by this interpreter)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / "nproc"
    program.write_text(f"#!{sys.executable}\n{PROBE}")
    program.chmod(0o755)


def _loop_exists(index: int) -> bool:
    return os.path.exists(f"/sys/block/loop{index}") or os.path.exists(f"/dev/loop{index}")


@contextmanager
def free_loop_index() -> Iterator[int]:
    """A loop device index nothing uses (no /dev/loopN, no /sys/block/loopN): what LOOP_CTL_ADD would make. On
    leaving, a device an attempt made there is removed (unconfined, as the test's user), then checked gone."""
    index = next((number for number in range(240, 1000) if not _loop_exists(number)), None)
    if index is None:
        raise RuntimeError("no free loop device index between 240 and 999")
    try:
        yield index
    finally:
        if os.path.exists(f"/sys/block/loop{index}"):
            descriptor = os.open("/dev/loop-control", os.O_RDWR)
            try:
                fcntl.ioctl(descriptor, 0x4C81, index)  # LOOP_CTL_REMOVE
            finally:
                os.close(descriptor)
    assert not os.path.exists(f"/sys/block/loop{index}")
