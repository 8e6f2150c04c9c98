"""What a readonly tree keeps of root's power (adr/0024, "Privileges"): on the spawning thread, the securebit
SECBIT_NOROOT (an exec by root no longer grants every capability) and, as ambient capabilities, only what
reading and looking need. Every process of the tree is then, after its exec, root without the power to change
the host outside the file system either: no network configuration, clock, reboot, modules, mounts, other users'
files or processes. With no_new_privs neither a set-user-ID program nor a file capability adds any back.

Capabilities and securebits are per thread and inherited by children, so this changes nothing else of the
server. The thread itself keeps its permitted set: a tree's processes then hold strictly fewer capabilities than
the thread that started them, which the kernel requires before letting one of them ptrace or read /proc of it
(commoncap's ptrace check; confine/confinement.py). Six system calls, where cutting the bounding set took forty.
"""

from __future__ import annotations

import ctypes
import os

PR_SET_SECUREBITS = 28
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECBIT_NOROOT = 1 << 0
SECBIT_NOROOT_LOCKED = 1 << 1
CAP_SETPCAP = 8
_CAPABILITY_VERSION_3 = 0x20080522
# Kept: reading every file and directory (not writing: that needs CAP_DAC_OVERRIDE), raw sockets (ping,
# traceroute, tcpdump), the kernel log (dmesg where dmesg_restrict is set; clearing it is filtered).
KEPT = {
    2: "cap_dac_read_search",
    13: "cap_net_raw",
    34: "cap_syslog",
}
KEPT_MASK = sum(1 << capability for capability in KEPT)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_CAPGET = {"x86_64": 125, "aarch64": 90}
_CAPSET = {"x86_64": 126, "aarch64": 91}
_MACHINE = os.uname().machine


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _sets() -> tuple[_Header, ctypes.Array[_Data]]:
    header = _Header(_CAPABILITY_VERSION_3, 0)  # pid 0: the calling thread
    data = (_Data * 2)()
    if _libc.syscall(ctypes.c_long(_CAPGET[_MACHINE]), ctypes.byref(header), data) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"capget: {os.strerror(code)}")
    return header, data


def privileged() -> bool:
    """The calling thread may set securebits (CAP_SETPCAP in effect: root, or a granted capability)."""
    _, data = _sets()
    return bool(data[0].effective & (1 << CAP_SETPCAP))


def reduce_for_readonly(privileged: bool) -> None:
    """On the calling thread: what its tree keeps after exec. Privileged (root): SECBIT_NOROOT, locked, and the
    kept capabilities inheritable and ambient. Otherwise: no inheritable or ambient capability (a server started
    with some, by systemd's AmbientCapabilities= say, passes none on). OSError when the kernel refuses."""
    if privileged and _libc.prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED, 0, 0, 0) != 0:
        _raise("prctl(PR_SET_SECUREBITS)")
    kept = KEPT_MASK if privileged else 0
    header, data = _sets()
    data[0].inheritable, data[1].inheritable = kept & 0xFFFFFFFF, kept >> 32
    if _libc.syscall(ctypes.c_long(_CAPSET[_MACHINE]), ctypes.byref(header), data) != 0:
        _raise("capset")
    if _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        _raise("prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
    for capability in KEPT if privileged else ():
        if _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, capability, 0, 0) != 0:
            _raise(f"prctl(PR_CAP_AMBIENT_RAISE, {KEPT[capability]})")


def _raise(what: str) -> None:
    code = ctypes.get_errno()
    raise OSError(code, f"{what}: {os.strerror(code)}")
