"""Choosing the containment at startup (`RELAY_SHELL_CONTAINMENT`, adr/0015): `auto` takes a threaded cgroup v2
subtree where the server may manage one, else the child subreaper with the marker; an explicit choice that cannot
work here stops startup (ContainmentUnavailable, with the reason). The cgroup setup runs in a thread while the
command line imports the server (ContainmentStart)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading

from relay_shell.containment.cgroup import INSTANCE_PREFIX, CgroupError, CgroupTree, locate
from relay_shell.containment.units import Containment, Setting, instance_of_this_process

_PR_SET_CHILD_SUBREAPER = 36
SPARE_UNITS = 16  # unit cgroups made ahead (cgroup mode): a burst of calls within TIDY_DELAY uses them


class ContainmentUnavailable(Exception):
    """The containment asked for cannot work here; the message says why."""


def start_containment(setting: Setting, scope: str) -> Containment:
    """Choose the containment: `auto` takes a cgroup where the server may manage one, else the subreaper;
    ContainmentUnavailable when the one asked for explicitly cannot work (with the reason)."""
    return ContainmentStart(setting, scope).result()


class ContainmentStart:
    """start_containment in two halves. The cgroup tree's setup runs in a thread from the moment this is made:
    moving the server into its instance directory (cgroup.procs) waits in the kernel for an RCU grace period
    (~10 ms, containment/cgroup.py), time the server spends importing meanwhile (cli.serve). `result()` waits
    for it and finishes on the calling thread (the marker in the environment, the filler thread, the
    subreaper), so the server runs nothing before its containment is in place: no child is spawned before."""

    def __init__(self, setting: Setting, scope: str) -> None:
        self.setting = setting
        self.scope = scope
        self.tree: CgroupTree | None = None
        self.cgroup_problem: str | None = None
        self.failure: BaseException | None = None  # an unexpected error of the thread, raised by result()
        self.thread: threading.Thread | None = None
        if setting in ("auto", "cgroup"):
            self.thread = threading.Thread(target=self._prepare_tree, name="relay-shell-containment", daemon=True)
            self.thread.start()

    def _prepare_tree(self) -> None:
        try:
            tree = CgroupTree(locate(), f"{INSTANCE_PREFIX}{self.scope}-{instance_of_this_process()}")
            tree.setup()
            tree.spare_target = SPARE_UNITS  # the first spares, made here too (start_filler keeps them)
            tree.tidy()
            self.tree = tree
        except (CgroupError, OSError) as exc:
            self.cgroup_problem = str(exc)
        except BaseException as exc:  # handed to result(), which raises it on the calling thread
            self.failure = exc

    def cancel(self) -> None:
        """The server will not serve (it failed before `result()`): undo what the thread made — back to the
        server's own cgroup, the spares and the instance directory removed."""
        if self.thread is not None:
            self.thread.join()
        if self.tree is not None:
            with contextlib.suppress(OSError):  # the failure that brought us here is the one to report
                self.tree.step_out()  # also removes the spares
                self.tree.remove(self.tree.directory)
            self.tree = None

    def result(self) -> Containment:
        if self.thread is not None:
            self.thread.join()
        if self.failure is not None:
            raise self.failure
        setting, scope, tree = self.setting, self.scope, self.tree
        if setting == "off":
            return Containment("off", "RELAY_SHELL_CONTAINMENT=off: process groups only", scope)
        if setting == "cgroup" and tree is None:
            raise ContainmentUnavailable(f"no cgroup v2 this server may manage: {self.cgroup_problem}")
        if tree is not None:
            tree.start_filler(SPARE_UNITS)
            chosen = "asked for" if setting == "cgroup" else "auto"
            reason = f"{chosen}: a threaded cgroup v2 per unit under {tree.directory}"
            problem = become_subreaper()
            if problem is not None:  # the cgroup still holds every unit; only orphans that left it go to init
                reason += f" (not a child subreaper: {problem})"
            containment = Containment("cgroup", reason, scope, tree)
            containment.subreaper = problem is None
            return containment
        problem = become_subreaper()
        if problem is not None:
            raise ContainmentUnavailable(f"cannot become a child subreaper: {problem}")
        if setting == "subreaper":
            reason = "asked for: child subreaper + RELAY_SHELL_UNIT marker"
        else:
            reason = f"auto: no cgroup ({self.cgroup_problem}); child subreaper + RELAY_SHELL_UNIT marker"
        containment = Containment("subreaper", reason, scope)
        containment.subreaper = True
        return containment


def become_subreaper() -> str | None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return os.strerror(ctypes.get_errno())
    return None
