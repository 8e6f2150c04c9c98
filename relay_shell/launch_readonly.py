"""Readonly's part of the launch point (adr/0024): the confinement the policy mode asks for, and what is said
when it is not whole. Outside readonly, or where the kernel has no Landlock, `Unconfined` stands in (nothing
under confine/ is imported): nothing is confined, and in readonly the banner, server_info, the metric, the
operating guide and every record say `classifier-only`. Below Landlock ABI 6 readonly is enforced partly: said
at startup, in server_info and the guide, and refused with RELAY_SHELL_READONLY_ENFORCEMENT=required.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from relay_shell.errors import ConfigError
from relay_shell.settings.model import Settings

if TYPE_CHECKING:
    from relay_shell.confine.confinement import Confinement
    from relay_shell.metrics import Metrics

T = TypeVar("T")


class Unconfined:
    """Nothing is confined: the mode is not readonly (`off`), or readonly runs classifier-only here (`reason` says
    why; the banner, server_info, the metric, the operating guide and every record of a tree say so)."""

    abi = 0

    def __init__(self, state: Literal["off", "classifier-only"], reason: str, setting: str) -> None:
        self.not_enforced: list[str] = []  # classifier-only says so as a whole (`reason`)
        self.state = state
        self.reason = reason
        self.setting = setting
        self.label = state

    def run_confined(self, start: Callable[[], T]) -> T:
        return start()

    def run_on_spare(self, start: Callable[[], T], natively: Callable[[Any], T] | None = None) -> T:
        return start()

    def prepare_child(self) -> None:
        pass

    def started_child(self) -> None:
        pass

    def helper_argv(self, argv: list[str]) -> list[str]:
        return argv

    def record_fields(self) -> dict[str, Any]:
        return {"confinement": "classifier-only"} if self.state == "classifier-only" else {}

    def status(self) -> dict[str, Any]:
        return {"readonly": self.label, "setting": self.setting, "reason": self.reason}

    def guide_note(self) -> str:
        if self.state == "off":
            return ""
        return (
            "\n## Readonly on this host\n\nWARNING: readonly is NOT enforced by the kernel here "
            f"({self.reason}). The classifier alone decides what runs: a command it misjudges runs with the "
            "server's full rights. Stay with plain observation commands.\n"
        )


UNCONFINED = Unconfined("off", "not asked for", "auto")  # a launcher made without settings (tests, tools)


def enforced_by(confinement: Confinement | Unconfined) -> str:
    """How readonly is enforced, for the banner and --check-config: `landlock ABI N` (`, partly` below ABI 6) or
    `classifier-only`."""
    return confinement.label + (", partly" if confinement.not_enforced else "")


def readonly_warnings(confinement: Confinement | Unconfined) -> list[str]:
    """Said at startup of a readonly server the kernel enforces only partly (Landlock below ABI 6), and while the
    test suite's simulated ABI is set."""
    if confinement.state != "landlock":
        return []
    from relay_shell.confine.landlock import FULL_ABI, SIMULATED_ABI_VARIABLE, simulated_abi

    warnings = []
    if confinement.not_enforced:
        warnings.append(
            f"WARNING: readonly is only partly enforced by the kernel here (Landlock ABI {confinement.abi}; all of "
            f"it needs ABI {FULL_ABI}): not refused: {'; '.join(confinement.not_enforced)}; the classifier alone "
            "stands there; RELAY_SHELL_READONLY_ENFORCEMENT=required refuses to start instead"
        )
    if simulated_abi() is not None:
        warnings.append(
            f"WARNING: {SIMULATED_ABI_VARIABLE} is set: Landlock is used as ABI {confinement.abi} whatever the kernel "
            "offers (a variable for the test suite only; unset it)"
        )
    return warnings


def start_confinement(settings: Settings, metrics: Metrics) -> Confinement | Unconfined:
    """Readonly mode: every tree confined where the kernel has Landlock, else classifier-only with the reason, or
    (RELAY_SHELL_READONLY_ENFORCEMENT=required) a ConfigError: startup stops with exit 2."""
    mode, setting = settings.policy.policy_mode, settings.policy.readonly_enforcement
    if mode != "readonly":
        metrics.readonly_kernel_enforcement.set(-1)
        return Unconfined("off", f"policy mode {mode}", setting)
    from relay_shell.confine.confinement import ConfinementUnavailable
    from relay_shell.confine.confinement import start_confinement as confine_readonly

    try:
        confinement = confine_readonly(setting, metrics)
    except ConfinementUnavailable as exc:
        if setting == "required":
            raise ConfigError(
                f"RELAY_SHELL_READONLY_ENFORCEMENT=required: readonly cannot be enforced by the kernel here ({exc}); "
                "allowed: auto (readonly runs classifier-only, said at startup and in server_info) or a kernel "
                "with Landlock"
            ) from None
        metrics.readonly_kernel_enforcement.set(0)
        return Unconfined("classifier-only", str(exc), setting)
    if setting == "required" and confinement.not_enforced:
        from relay_shell.confine.landlock import FULL_ABI, KERNEL_OF_ABI

        raise ConfigError(
            f"RELAY_SHELL_READONLY_ENFORCEMENT=required: this kernel's Landlock is ABI {confinement.abi}, and all "
            f"that readonly promises needs ABI {FULL_ABI} (Linux {KERNEL_OF_ABI[FULL_ABI]}); not enforced here: "
            f"{'; '.join(confinement.not_enforced)}; allowed: auto (readonly runs with what ABI {confinement.abi} "
            f"enforces, the rest said at startup and in server_info) or a kernel with Landlock ABI {FULL_ABI}"
        )
    metrics.readonly_kernel_enforcement.set(confinement.abi)
    return confinement
