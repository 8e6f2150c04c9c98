"""A real systemd-journald for tests, without systemd as PID 1 and without touching the host's journal.

`systemd-journald` (Debian's systemd package) runs on its own in a private mount namespace (`unshare --mount`)
whose /run/systemd and /run/log are fresh tmpfs mounts: its native socket and its journal files exist only there,
and the test reaches them through /proc/PID/root (`socket_path`, `entries()`; a socket bound to a path is reached
from any network namespace). A private network namespace too (`--net`): the kernel's audit netlink exists only in
the host's, so this journald cannot subscribe to or change the host's kernel audit settings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

JOURNALD = "/lib/systemd/systemd-journald"
SCRIPT = (
    "mount -t tmpfs tmpfs /run/systemd && mkdir -p /run/systemd/journal && "
    "mount -t tmpfs tmpfs /run/log && mkdir -p /run/log/journal && exec " + JOURNALD
)


class Journald:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def socket_path(self) -> str:
        assert self.process is not None
        return f"/proc/{self.process.pid}/root/run/systemd/journal/socket"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--net", "--propagation", "private", "sh", "-c", SCRIPT],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "journald.stderr", "ab"),
            # Its own messages to its stderr, not to the host's kernel log.
            env={**os.environ, "SYSTEMD_LOG_TARGET": "console"},
        )
        deadline = time.monotonic() + 10
        while not Path(self.socket_path).exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                errors = (self.root / "journald.stderr").read_text(errors="replace")
                raise RuntimeError(f"systemd-journald did not start: {errors[-2000:]}")
            time.sleep(0.02)

    def entries(self, **match: str) -> list[dict[str, Any]]:
        """The journal's entries (every field in full), those whose fields equal `match` (e.g. SYSLOG_IDENTIFIER)."""
        assert self.process is not None
        directories = list(Path(f"/proc/{self.process.pid}/root/run/log/journal").glob("*"))
        filters = [f"{name}={value}" for name, value in match.items()]
        entries = []
        for directory in directories:
            done = subprocess.run(
                ["journalctl", "-D", str(directory), "--all", "-o", "json", "--no-pager", *filters],
                capture_output=True,
                timeout=60,
            )
            entries += [json.loads(line) for line in done.stdout.splitlines() if line.startswith(b"{")]
        return entries

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=10)
        self.process = None

    def __enter__(self) -> Journald:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
