"""Fixtures of the report tests: the log real servers wrote (scenario.py), a real headless Chromium (Debian's
`chromium`, driven by Playwright with the system browser: tests/chromium.py), and `relay-shell audit report` run as a
command.

Screenshots go to SCREENSHOTS: `.artifacts/report/` in the checkout (git ignores it), or the directory named by
RELAY_SHELL_TEST_SCREENSHOTS. Each test's are named after it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.chromium import launch
from tests.conftest import REPO_ROOT
from tests.e2e.report.scenario import Served, serve
from tests.sshd import SshFleet

SCREENSHOTS = Path(os.environ.get("RELAY_SHELL_TEST_SCREENSHOTS") or REPO_ROOT / ".artifacts" / "report")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, fleet: SshFleet) -> Served:
    directory = tmp_path_factory.mktemp("report")
    return anyio.run(serve, directory, fleet)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = launch(playwright)
        yield launched
        launched.close()


@dataclass
class Opened:
    """A report open in the browser, and everything it said and asked for."""

    page: Page
    url: str
    console: list[str] = field(default_factory=list)  # errors and warnings, and uncaught exceptions
    requests: list[str] = field(default_factory=list)

    def screenshot(self, name: str, full_page: bool = False) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        return path

    def assert_quiet(self) -> None:
        """No console error or warning, no uncaught exception, and no request but the file itself."""
        assert self.console == [], self.console
        assert self.requests == [self.url], self.requests


def open_report(browser: Browser, path: Path, javascript: bool = True, fragment: str = "") -> Opened:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, java_script_enabled=javascript)
    page = context.new_page()
    opened = Opened(page, path.resolve().as_uri())
    page.on("console", lambda message: message.type in ("error", "warning") and opened.console.append(message.text))
    page.on("pageerror", lambda error: opened.console.append(f"uncaught: {error}"))
    page.on("request", lambda request: opened.requests.append(request.url))
    page.goto(opened.url + fragment)
    if javascript:
        page.wait_for_selector("body[data-ready]", timeout=30_000)
        assert page.get_attribute("body", "data-ready") == "1", page.inner_text("#t-status")
    return opened


@dataclass(frozen=True)
class Made:
    path: Path
    returncode: int
    stdout: str
    stderr: str


def make_report(output: Path, *logs: Path, options: tuple[str, ...] = ()) -> Made:
    """`relay-shell audit report LOG… OPTIONS -o OUTPUT`, as a command."""
    ran = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "report", *map(str, logs), *options, "-o", str(output)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return Made(output, ran.returncode, ran.stdout, ran.stderr)
