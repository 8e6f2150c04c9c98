"""Redaction speed and linearity on megabyte inputs (issue 17): realistic command text full of secrets, and
adversarial repetitions of the patterns' own prefixes. Prints MiB/s and, for each input, the time ratio between
4 MiB and 1 MiB: linear time gives ~4 (target <= 5), quadratic time 16.

Usage: .venv/bin/python -m benchmarks.bench_redact
"""

from __future__ import annotations

import time

from benchmarks.common import Options, Row, run_alone
from relay_shell.redaction.redact import redact

MIB = 2**20
RATIO_TARGET = 5.0
REALISTIC = (
    "curl -H 'Authorization: Bearer 0123456789abcdef0123456789abcdef' https://api.example.com/v1/items\n"
    "export DB_PASSWORD=s3cret GITHUB_TOKEN=ghp_a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ\n"
    "psql postgres://app:pw@db:5432/app -c 'select 1'\n"
    "curl -X POST https://hooks.slack.com/services/T01ABCDEF/B02GHIJKL/a1B2c3D4e5F6g7H8i9J0kLmN -d '{}'\n"
    "ls -la /srv/app && git log --oneline 3f2a9c1 | head\n"
)
ADVERSARIAL = [
    "https://hooks.slack.com/services/",
    "relay-shell://inventory/u:p@",
    "Authorization: Digest a=b, ",
    "ConvertTo-SecureString -Force ",
    "password=password=",
    "a" * 64 + "://",
    # Code regions (adr/0003 "Code in a secret's place"): nested substitutions never closed, here-documents.
    "token=$(",
    '"$(',
    "<<E\n$(",
    "$(",
    "`",
    "TOKEN=a$(b)",
    "case $(",
    "'$(",
    "<<-E\n\t$(",
]
# Here-documents announced by the thousand on one line, then their bodies: (announcement, body), each repeated.
ADVERSARIAL_HALVES = [("<<A ", "A\n"), ("<<'A' ", "A\n")]


def _seconds(text: str) -> float:
    started = time.perf_counter()
    redact(text)
    return time.perf_counter() - started


def _text(unit: str | tuple[str, str], size: int) -> str:
    """About `size` characters: the unit repeated, or code then the announcements repeated, a newline, and as
    many bodies."""
    if isinstance(unit, str):
        return unit * (size // len(unit))
    announcement, body = unit
    count = size // (len(announcement) + len(body))
    return "$(x) " + announcement * count + "\n" + body * count


def rows(options: Options) -> list[Row]:
    measured = []
    units: list[tuple[str, str | tuple[str, str]]] = [("realistic", REALISTIC)]
    units += [(repr(unit[:32]), unit) for unit in ADVERSARIAL]
    units += [(f"{halves[0]!r}… then {halves[1]!r}…", halves) for halves in ADVERSARIAL_HALVES]
    for name, unit in units:
        one = min(_seconds(_text(unit, MIB)) for _ in range(3))
        four = min(_seconds(_text(unit, 4 * MIB)) for _ in range(3))
        ratio = four / one if one else 0.0
        passed = ratio <= RATIO_TARGET
        measured.append(Row(f"redaction linear, {name}: 4 MiB / 1 MiB", f"{ratio:.2f}", f"≤ {RATIO_TARGET}", passed))
        print(
            f"{name:<36} 1 MiB {one * 1000:8.1f} ms  {1 / one:7.1f} MiB/s  4 MiB / 1 MiB {ratio:5.2f} "
            f"(target <= {RATIO_TARGET})  {'PASS' if passed else 'FAIL'}"
        )
    return measured


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
