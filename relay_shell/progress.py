"""Progress notifications for long calls, throttled: bytes of output so far, or hosts done out of a total."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from relay_shell.plan import Plan

logger = logging.getLogger("relay_shell")

PROGRESS_INTERVAL = 1.0  # seconds between progress notifications on long calls


class Progress:
    """Throttled progress notifications (bytes so far, or hosts done out of a total); a no-op unless the
    client sent a progress token. Counted steps (hosts) are each reported; byte counts once a second."""

    def __init__(self, report: Callable[[float, float | None, str], Any] | None, plan: Plan) -> None:
        self.send = report
        self.plan = plan  # total and unit are read at each report: a transfer learns its total while running
        self.interval = 0.0 if plan.progress_total is not None else PROGRESS_INTERVAL
        self.next_at = time.monotonic() + self.interval

    async def report(self, produced: int) -> None:
        if self.send is None:
            return
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + self.interval
        total = self.plan.progress_total
        unit = self.plan.progress_unit
        message = f"{produced} bytes of output so far" if total is None else f"{produced} of {total} {unit}"
        try:
            await self.send(float(produced), None if total is None else float(total), message)
        except Exception:  # progress is best effort; a closed stream must not fail the call
            logger.debug("progress notification failed", exc_info=True)
