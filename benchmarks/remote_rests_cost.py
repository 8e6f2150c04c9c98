"""What reading every rest of a remote terminal's line costs in false alarms (adr/0026 Round 7): each command of
the labelled sets and of the tldr corpus typed as one line at a remote prompt, its rests counted as the policy
counts them (sessions/reading.split_findings on policy/shared_rests.counted_rest_findings: tier 2 and above in guarded,
tier 1 and above where no kernel confines, which readonly on a remote host is), a rest's program found on the
remote host when a rule or the vocabulary knows it (attack 5, W3-PATH; beside it, the count with this server's
PATH alone, as before). Prints the share of admissible lines that would be refused.

Usage: python -m benchmarks.remote_rests_cost"""

from __future__ import annotations

from benchmarks.bench_policy import FRESH, LABELLED, corpus_commands, load_labels, tier_of
from relay_shell.policy.shared_rests import counted_rest_findings


def refused_by_a_rest(command: str, least_tier: int, elsewhere: bool = True) -> bool:
    counted = counted_rest_findings(command, least_tier, elsewhere)
    return counted is None or bool(counted)  # None: too long to read at every rest, tier 2


def main() -> None:
    labelled = [item.command for item in load_labels(LABELLED) + load_labels(FRESH)]
    for name, commands in (("labelled set", labelled), ("tldr corpus", corpus_commands())):
        tiers = {command: tier_of(command) for command in commands}
        admissible = [command for command in commands if tiers[command] <= 1]
        read_only = [command for command in commands if tiers[command] == 0]
        for where, elsewhere in (("a remote host", True), ("this server's PATH only", False)):
            guarded = sum(refused_by_a_rest(command, 2, elsewhere) for command in admissible)
            readonly = sum(refused_by_a_rest(command, 1, elsewhere) for command in read_only)
            print(
                f"{name}, {where}: guarded, {guarded} of {len(admissible)} admissible lines refused "
                f"({100 * guarded / len(admissible):.1f}%); readonly, {readonly} of {len(read_only)} tier-0 lines "
                f"refused ({100 * readonly / len(read_only):.1f}%)"
            )


if __name__ == "__main__":
    main()
