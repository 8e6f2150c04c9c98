"""What a readonly tree keeps of root's power (adr/0024, "Privileges"): the capability bounding set of the
spawning thread cut down to what reading and looking need, its inheritable and ambient sets emptied. Every process
of the tree is then, after its exec, root without the power to change the host outside the file system either:
no network configuration, clock, reboot, modules, mounts, other users' files or processes.

Capabilities are per thread and children inherit the bounding set, so this changes nothing else of the server.
The thread itself keeps its permitted set: a tree's processes then hold strictly fewer capabilities than the
thread that started them, which the kernel requires before letting one of them ptrace or read /proc of it
(commoncap's ptrace check; confine/confinement.py).
"""

from __future__ import annotations

import ctypes
import os

PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAP_SETPCAP = 8
_CAPABILITY_VERSION_3 = 0x20080522
# Kept: reading every file and directory (not writing: that needs CAP_DAC_OVERRIDE), raw sockets (ping,
# traceroute, tcpdump), the kernel log (dmesg where dmesg_restrict is set; clearing it is filtered).
KEPT = {
    2: "cap_dac_read_search",
    13: "cap_net_raw",
    34: "cap_syslog",
}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_CAPGET = {"x86_64": 125, "aarch64": 90}
_CAPSET = {"x86_64": 126, "aarch64": 91}


def last_capability() -> int:
    with open("/proc/sys/kernel/cap_last_cap") as file:
        return int(file.read())


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _sets() -> tuple[_Header, ctypes.Array[_Data]]:
    header = _Header(_CAPABILITY_VERSION_3, 0)  # pid 0: the calling thread
    data = (_Data * 2)()
    if _libc.syscall(ctypes.c_long(_CAPGET[os.uname().machine]), ctypes.byref(header), data) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"capget: {os.strerror(code)}")
    return header, data


def can_drop_bounding() -> bool:
    """The calling thread may cut its bounding set (CAP_SETPCAP in effect: root, or a granted capability)."""
    _, data = _sets()
    return bool(data[0].effective & (1 << CAP_SETPCAP))


def reduce_for_readonly(drop: tuple[int, ...]) -> None:
    """On the calling thread: drop `drop` from the bounding set (an empty tuple when it may not), and empty the
    inheritable and ambient sets. OSError when the kernel refuses."""
    for capability in drop:
        if _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"prctl(PR_CAPBSET_DROP, {capability}): {os.strerror(code)}")
    header, data = _sets()
    if data[0].inheritable or data[1].inheritable:
        data[0].inheritable = data[1].inheritable = 0
        if _libc.syscall(ctypes.c_long(_CAPSET[os.uname().machine]), ctypes.byref(header), data) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"capset: {os.strerror(code)}")
    if _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_CAP_AMBIENT_CLEAR_ALL): {os.strerror(code)}")


def to_drop() -> tuple[int, ...]:
    """Every capability this kernel knows but those KEPT; none when this thread may not drop any."""
    if not can_drop_bounding():
        return ()
    return tuple(capability for capability in range(last_capability() + 1) if capability not in KEPT)
