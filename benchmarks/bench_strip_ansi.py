"""Escape stripping on a session's output vs a plain copy of the same bytes (issue 15 item 5).

Every send strips the recent output (the line a confirmation shows) and every wake-up of a wait strips the new
output before matching: on text without escape codes that must cost about a copy (≤ 3×), and with escape codes
the scan must skip ahead to the next escape byte (≤ 5×).
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

from benchmarks.common import Options, Row, run_alone
from relay_shell.sessions.ansi import strip_ansi

# A REPL's output: plain text, CRLF line ends.
PLAIN = b"".join(f"{i}*{i}\r\n{i * i}\r\n>>> ".encode() for i in range(50_000))
COLOURED = b"\x1b[32m" + PLAIN


def fastest(function: Callable[[], object]) -> float:
    return min(timeit.repeat(function, number=3, repeat=9)) / 3


def rows(options: Options) -> list[Row]:
    measured = []
    for label, data, target in (("plain", PLAIN, 3.0), ("coloured", COLOURED, 5.0)):
        copy = fastest(lambda data=data: data.replace(b"\r\n", b"\n"))  # type: ignore[misc]
        stripped = fastest(lambda data=data: strip_ansi(data))  # type: ignore[misc]
        ratio = stripped / copy
        met = ratio <= target
        measured.append(Row(f"strip_ansi {label} vs a copy", f"{ratio:.2f}×", f"≤ {target:g}×", met))
        print(
            f"strip_ansi {label} {len(data) / 1e6:.1f} MB: {stripped * 1e3:.2f} ms vs copy {copy * 1e3:.2f} ms, "
            f"ratio {ratio:.2f} (target ≤ {target:g}) {'OK' if met else 'MISSED'}"
        )
    return measured


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
