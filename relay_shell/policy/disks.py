"""Rules for disks and filesystems: dd, partitioning, mkfs, LVM, RAID, encryption, ZFS, btrfs, mounts, swap,
boot loaders. Writing onto a block device, repartitioning and destroying volumes are tier 3; listing is 0.
"""

from __future__ import annotations

from collections.abc import Callable

from relay_shell.policy.calls import READ, Call, Verdict, is_device, is_protected, verdict
from relay_shell.policy.vocabulary import CRITICAL_FILES


def _dd(call: Call) -> Verdict:
    for word in call.words[1:]:
        if word.startswith("of="):
            target = word[3:]
            if is_device(target) or target in CRITICAL_FILES:
                return verdict(3, f"dd onto {target}")
            if is_protected(target):
                return verdict(2, f"dd writes {target}")
            return _dd_file(call.words[1:], target)
    return verdict(0, "dd to stdout")


_ENDLESS = frozenset(["/dev/zero", "/dev/urandom", "/dev/random", "/dev/full"])


def _dd_file(operands: list[str], target: str) -> Verdict:
    """dd of=FILE truncates FILE: from empty input (`if=/dev/null`, or stdin, which may be anything) it empties
    it, as `: > FILE` does; from an endless source without count= it writes until the disk is full; conv=notrunc
    overwrites it in place. A bounded copy from a named file creates it (1)."""
    source = next((word[3:] for word in operands if word.startswith("if=")), None)
    bounded = any(word.startswith(("count=", "iflag=count_bytes")) for word in operands)
    if source is None or source == "/dev/null":
        return verdict(2, f"dd empties or overwrites {target}")
    if source in _ENDLESS and not bounded:
        return verdict(2, f"dd writes {target} without bound")
    if any(word.startswith("conv=") and "notrunc" in word for word in operands):
        return verdict(2, f"dd overwrites {target} in place")
    return verdict(1, "dd writes a file")


def _ddrescue(call: Call) -> Verdict:
    if len(call.operands) >= 2 and is_device(call.operands[1]):
        return verdict(3, f"ddrescue onto {call.operands[1]}")
    return verdict(1, "ddrescue copies a disk into a file")


def _destroys(name: str) -> Callable[[Call], Verdict]:
    def rule(call: Call) -> Verdict:
        return verdict(3, f"{name} destroys data on a device")

    return rule


def _wipefs(call: Call) -> Verdict:
    if call.has("-a", "--all", "-o", "--offset") and not call.has_exact("-n", "--no-act"):
        return verdict(3, "wipefs erases filesystem signatures")
    return verdict(0, "wipefs lists signatures")


def _fdisk(call: Call) -> Verdict:
    if call.has_exact("-l", "--list", "-V", "--version", "-h", "--help") or call.has_exact("--list-details"):
        return verdict(0, "lists partitions")
    return verdict(3, f"{call.program} repartitions a disk")


def _sfdisk(call: Call) -> Verdict:
    if call.has("--delete", "--move-data", "--wipe", "--wipe-partitions"):
        return verdict(3, "sfdisk changes the partition table")
    if call.has("--part-type", "--part-label", "--part-uuid", "--part-attrs"):
        return verdict(3 if len(call.operands) >= 3 else 0, "sfdisk partition attribute")
    if call.has_exact("-l", "--list", "-d", "--dump", "-J", "--json", "-s", "--show-size", "-V", "--verify", "-g"):
        return verdict(0, "sfdisk lists partitions")
    if call.has_exact("-h", "--help", "-v", "--version", "-T", "--list-types", "-F", "--list-free"):
        return READ
    return verdict(3, "sfdisk writes a partition table")


def _sgdisk(call: Call) -> Verdict:
    reading = {"p", "v", "L", "i", "O", "h", "P"}  # print, verify, list types, info, print MBR, help, pretend
    if (
        call.short
        and call.short <= reading | {"b"}
        and not call.long.keys() - {"--print", "--verify", "--info", "--backup"}
    ):
        return verdict(1 if "b" in call.short else 0, "sgdisk reads the partition table")
    return verdict(3, "sgdisk changes the partition table")


def _parted(call: Call) -> Verdict:
    if call.has_exact("-l", "--list", "-h", "--help", "-v", "--version"):
        return verdict(0, "parted lists partitions")
    script = [word for word in call.operands[1:] if not word.startswith("-")]
    if script and all(word in ("print", "p", "unit", "s", "B", "MiB", "GB", "help", "free") for word in script):
        return verdict(0, "parted prints the partition table")
    return verdict(3, "parted repartitions a disk")


def _lvm(call: Call) -> Verdict:
    # `lvm pvcreate /dev/sdb1` is `pvcreate /dev/sdb1`.
    if not call.operands:
        return verdict(1, "lvm shell")
    inner = Call(call.operands[0], call.words[1:], call.context)
    rule = RULES.get(inner.program)
    return rule(inner) if rule is not None else _lvm_other(inner)


def _lvm_other(call: Call) -> Verdict:
    if call.program in ("help", "version", "lvs", "vgs", "pvs", "lvdisplay", "vgdisplay", "pvdisplay", "lvscan"):
        return READ
    if call.program in ("vgscan", "pvscan", "lvmdiskscan", "fullreport", "devtypes", "formats", "segtypes"):
        return READ
    return verdict(2, f"{call.program} changes logical volumes")


def _lvresize(call: Call) -> Verdict:
    size = call.value("-L", "--size", "-l", "--extents") or ""
    if call.program == "lvextend" or size.startswith("+") or "FREE" in size.upper():
        return verdict(2, "grows a logical volume")
    if call.has("-r", "--resizefs"):
        return verdict(2, "shrinks a logical volume with its filesystem")
    return verdict(3, "shrinks a logical volume under its filesystem (data beyond the new end is lost)")


def _vg_with_devices(call: Call) -> Verdict:
    if any(is_device(operand) for operand in call.operands):
        return verdict(3, f"{call.program} initialises devices for a volume group")
    return verdict(2, f"{call.program} changes a volume group")


def _lvconvert(call: Call) -> Verdict:
    if call.has("--merge", "--mergesnapshot"):
        return verdict(3, "merges a snapshot back: the origin loses its later changes")
    return verdict(2, "converts a logical volume")


def _zfs(call: Call) -> Verdict:
    sub = call.subcommand
    if sub in ("destroy", "rollback"):
        return verdict(3, f"zfs {sub} destroys data")
    if sub in ("", "list", "get", "help", "version", "diff", "userspace", "groupspace", "holds", "wait"):
        return READ
    if sub in ("snapshot", "snap", "create", "bookmark", "send"):
        return verdict(1, f"zfs {sub}")
    if sub in ("receive", "recv") and call.has("-F"):
        return verdict(3, "zfs receive -F overwrites a filesystem")
    return verdict(2, f"zfs {sub} changes a filesystem")


def _zpool(call: Call) -> Verdict:
    sub = call.subcommand
    if sub in ("destroy", "create", "add", "labelclear", "attach", "replace", "initialize") or (
        sub == "import" and call.has("-D")
    ):
        return verdict(3, f"zpool {sub} destroys data on devices")
    if sub in ("", "status", "list", "iostat", "history", "get", "events", "help", "version", "wait") or (
        sub == "import" and len(call.operands) == 1
    ):
        return READ
    if sub in ("scrub", "trim", "sync"):
        return verdict(1, f"zpool {sub}")
    return verdict(2, f"zpool {sub} changes a pool")


def _btrfs(call: Call) -> Verdict:
    group, verb = [*call.operands, "", ""][:2]
    read_verbs = ("list", "show", "df", "usage", "du", "stats", "status", "get", "find-new", "label", "help")
    if group in ("subvolume", "subvol", "sub") and verb in ("delete", "del"):
        return verdict(3, "deletes a subvolume")
    if group in ("device", "dev") and verb == "add":
        return verdict(3, "btrfs device add formats the devices")
    if group in ("check",) and call.has("--repair", "--init-csum-tree", "--init-extent-tree"):
        return verdict(3, "btrfs check --repair can lose data")
    if group in ("", "version", "help", "--version", "inspect-internal", "inspect") or verb in read_verbs:
        return READ
    if group == "check" or (group == "device" and verb in ("scan", "ready")):
        return READ
    return verdict(2, f"btrfs {group} {verb}")


def _mdadm(call: Call) -> Verdict:
    if call.has("-C", "--create", "--zero-superblock", "-B", "--build"):
        return verdict(3, "mdadm writes RAID metadata onto devices")
    if call.has_exact("-D", "--detail", "-E", "--examine", "-Q", "--query", "--detail-platform", "-h", "--help"):
        return verdict(0, "mdadm shows arrays")
    return verdict(2, "mdadm changes an array")


def _cryptsetup(call: Call) -> Verdict:
    action = call.subcommand
    if action in ("luksFormat", "format", "erase", "luksErase", "reencrypt", "luksKillSlot", "tcryptFormat"):
        return verdict(3, f"cryptsetup {action} destroys data or keys")
    if action in ("status", "luksDump", "isLuks", "luksUUID", "tcryptDump", "benchmark", "bitlkDump", "fvault2Dump"):
        return READ
    return verdict(2, f"cryptsetup {action}")


def _tune(call: Call) -> Verdict:
    if call.has("-l") and call.program in ("tune2fs",):
        return READ
    if len(call.operands) <= 1 and call.program.endswith("label"):
        return verdict(0, "prints a filesystem label")
    return verdict(2, f"{call.program} changes filesystem metadata")


def _mount(call: Call) -> Verdict:
    if not call.operands and (not call.short or call.short <= {"l", "v", "t"}) and not call.has("-a", "--all"):
        return verdict(0, "lists mounts")
    return verdict(2, "mounts a filesystem")


def _swapon(call: Call) -> Verdict:
    if not call.operands and not call.has("-a", "--all", "-e", "--ifexists"):
        return verdict(0, "shows swap areas")
    return verdict(2, "enables swap")


def _losetup(call: Call) -> Verdict:
    if call.has_exact("-a", "--all", "-l", "--list", "-j", "--associated", "--show") and not call.has("-f", "-P", "-r"):
        return verdict(0, "lists loop devices")
    if not call.operands and not call.short - {"a", "l", "n", "O"} and not call.long:
        return verdict(0, "lists loop devices")
    return verdict(2, "changes loop devices")


def _grub_install(call: Call) -> Verdict:
    if any(is_device(operand) for operand in call.operands):
        return verdict(3, f"{call.program} writes boot code onto a disk")
    return verdict(2, f"{call.program} changes the boot loader")


def _fsck(call: Call) -> Verdict:
    if call.has_exact("-n", "-N", "--dry-run"):
        return verdict(0, "checks a filesystem without changing it")
    return verdict(2, "repairs a filesystem")


def _hdparm(call: Call) -> Verdict:
    if any(word.startswith("--security-erase") or word == "--trim-sector-ranges" for word in call.words):
        return verdict(3, "hdparm erases a disk")
    if call.short <= {"I", "i", "g", "t", "T", "C", "r", "v"} and not call.long:
        return verdict(0, "hdparm shows disk settings")
    return verdict(2, "hdparm changes disk settings")


def _smartctl(call: Call) -> Verdict:
    if call.has("-s", "--smart", "-o", "--offlineauto", "-S", "--saveauto", "-t", "--test", "-X", "--abort"):
        return verdict(1, "smartctl starts a self-test or changes SMART settings")
    return verdict(0, "smartctl reads SMART data")


def _mknod(call: Call) -> Verdict:
    # A block or character node for a disk or memory under any name (`mknod /tmp/d b 8 0`) writes the device
    # through every later redirection, which reads only the name (attack 5; adr/0025 Round 9): as `> /dev/sda`.
    if any(word in ("b", "c", "u") for word in call.operands):
        return verdict(3, "mknod makes a device node: raw access to a disk or memory under a name of its own")
    return verdict(1, "mknod makes a named pipe")


RULES: dict[str, Callable[[Call], Verdict]] = {
    "mknod": _mknod,
    "dd": _dd,
    "ddrescue": _ddrescue,
    "wipefs": _wipefs,
    "fdisk": _fdisk,
    "cfdisk": _fdisk,
    "gdisk": _fdisk,
    "cgdisk": _fdisk,
    "sfdisk": _sfdisk,
    "sgdisk": _sgdisk,
    "parted": _parted,
    "lvm": _lvm,
    "lvresize": _lvresize,
    "lvreduce": _lvresize,
    "lvextend": _lvresize,
    "vgcreate": _vg_with_devices,
    "vgextend": _vg_with_devices,
    "lvconvert": _lvconvert,
    "lvcreate": lambda call: verdict(2, "creates a logical volume"),
    "lvs": lambda call: READ,
    "vgs": lambda call: READ,
    "pvs": lambda call: READ,
    "lvdisplay": lambda call: READ,
    "vgdisplay": lambda call: READ,
    "pvdisplay": lambda call: READ,
    "lvscan": lambda call: READ,
    "vgscan": lambda call: READ,
    "pvscan": lambda call: READ,
    "zfs": _zfs,
    "zpool": _zpool,
    "btrfs": _btrfs,
    "mdadm": _mdadm,
    "cryptsetup": _cryptsetup,
    "tune2fs": _tune,
    "e2label": _tune,
    "exfatlabel": _tune,
    "fatlabel": _tune,
    "swaplabel": _tune,
    "ntfslabel": _tune,
    "xfs_admin": _tune,
    "mount": _mount,
    "swapon": _swapon,
    "losetup": _losetup,
    "grub-install": _grub_install,
    "grub-bios-setup": _grub_install,
    "grub2-install": _grub_install,
    "fsck": _fsck,
    "e2fsck": _fsck,
    "xfs_repair": _fsck,
    "hdparm": _hdparm,
    "smartctl": _smartctl,
    "lvm_import_vdo": _destroys("lvm_import_vdo"),
    "vgremove": _destroys("vgremove"),
    "lvremove": _destroys("lvremove"),
    "pvremove": _destroys("pvremove"),
    "pvcreate": _destroys("pvcreate"),
    "mkswap": _destroys("mkswap"),
    "mke2fs": _destroys("mke2fs"),
}
