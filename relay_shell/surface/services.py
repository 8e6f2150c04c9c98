"""What the tool functions use besides their arguments: the server's services, made once by the server
(server.py) and passed to every call by the call router (surface/router.py), never reached through a global."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay_shell.launch import Launcher
    from relay_shell.offhost.setup import OffHost
    from relay_shell.outputs import OutputStore
    from relay_shell.runner.pipeline import Runner
    from relay_shell.sessions.jobs import JobTable
    from relay_shell.sessions.registry import SessionRegistry
    from relay_shell.settings.model import Settings
    from relay_shell.ssh.access import SshAccess
    from relay_shell.surface.runbook_access import RunbookAccess


@dataclass
class Services:
    settings: Settings
    runner: Runner  # THE audited path: every tool function makes one call into it
    sessions: SessionRegistry  # PTY sessions, local and remote
    jobs: JobTable  # commands that outlived their call's yield_after (adr/0028)
    outputs: OutputStore  # cut results, kept in full for a while (adr/0028)
    ssh: SshAccess  # the SSH side, built on the first SSH call
    launcher: Launcher  # containment and the exec trace: every process tree of a call or session starts here
    runbooks: RunbookAccess
    offhost: OffHost | None = None  # shipping and signed checkpoints (adr/0020), when configured
    metrics_port: int | None = None  # the metrics listener's port, once the command line started it
