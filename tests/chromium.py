"""Debian's headless Chromium (`/usr/bin/chromium`), driven by Playwright with the system browser: Playwright's own
browser download is never used (it cannot work on these machines). For the audit report's tests and benchmark."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, Playwright

CHROMIUM = "/usr/bin/chromium"
# What works here (/work/shared/testing.md): no sandbox (root), no GPU, and nothing that makes the browser itself
# reach the network. Playwright adds --headless and a fresh --user-data-dir (a new profile) for every launch.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch(playwright: Playwright) -> Browser:
    assert Path(CHROMIUM).exists(), "Debian's chromium is not installed (scripts/test.sh installs it)"
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
