"""GNU long-option abbreviations (getopt_long reads any unambiguous prefix: `--out=F` is `--output=F`) classify
like the full spelling; wrapper options that take an optional value or none do not swallow the command word;
dc reading its program from stdin is classified (final review F1, F2, F3)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from relay_shell.plan import Subject
from relay_shell.policy.classify import classify
from relay_shell.policy.output_options import SPECS
from relay_shell.policy.vocabulary import WRAPPER_OPERANDS, WRAPPERS
from relay_shell.policy.wrappers import _FLOCK_KNOWN, _INLINE_OPTIONS, _KNOWN, _OPERAND_KNOWN


def tier(command: str, stdin: str | None = None) -> int:
    return classify(Subject(command=command, stdin=stdin)).tier


# The review's F1 table (each checked against the real tool there): abbreviation, full spelling, full tier.
ABBREVIATED = [
    ("env --sp='touch /tmp/x'", "env --split-string='touch /tmp/x'", 1),
    ("env --sp='rm -rf /'", "env --split-string='rm -rf /'", 3),
    ("sed --e='1e touch /tmp/x' f", "sed --expression='1e touch /tmp/x' f", 1),
    ("sed --exp '1e rm -rf /' f", "sed --expression '1e rm -rf /' f", 3),
    ("sort --o=/etc/shadow f", "sort --output=/etc/shadow f", 3),
    ("sort --out=/etc/shadow f", "sort --output=/etc/shadow f", 3),
    ("sort --out /etc/shadow f", "sort --output /etc/shadow f", 3),
    ("sort --compress-prog='touch /tmp/x' -S1 f", "sort --compress-program='touch /tmp/x' -S1 f", 1),
    ("man --pag='touch /tmp/x' ls", "man --pager='touch /tmp/x' ls", 1),
    ("shuf --out=/etc/passwd f", "shuf --output=/etc/passwd f", 3),
    ("sdiff --out=/etc/passwd a b", "sdiff --output=/etc/passwd a b", 3),
    ("dc --exp='!rm -rf /'", "dc --expression='!rm -rf /'", 3),
    ("su --comm='rm -rf /'", "su --command='rm -rf /'", 3),
    ("script --com='rm -rf /'", "script --command='rm -rf /'", 3),
    ("sudo --us bob -- rm -rf /", "sudo --user bob -- rm -rf /", 3),
    ("sudo --us=bob rm -rf /", "sudo --user=bob rm -rf /", 3),
    ("runuser --us bob rm -rf /", "runuser --user bob rm -rf /", 3),
    ("flock --com 'rm -rf /' /tmp/lock", "flock --command 'rm -rf /' /tmp/lock", 3),
    ("flock /tmp/lock --comm 'rm -rf /'", "flock /tmp/lock --command 'rm -rf /'", 3),
    ("timeout --sig KILL 5 rm -rf /", "timeout --signal KILL 5 rm -rf /", 3),
    ("nice --adj 5 rm -rf /", "nice --adjustment 5 rm -rf /", 3),
    ("sed --in s/a/b/ f", "sed --in-place s/a/b/ f", 2),
    ("sed --in-pl=.bak s/a/b/ f", "sed --in-place=.bak s/a/b/ f", 1),
    ("uniq --skip-f 1 in out", "uniq --skip-fields 1 in out", 1),
]


@pytest.mark.parametrize(("abbreviated", "full", "expected"), ABBREVIATED)
def test_an_abbreviated_long_option_classifies_like_the_full_name(abbreviated: str, full: str, expected: int) -> None:
    assert tier(full) == expected, full
    assert tier(abbreviated) == expected, abbreviated


def test_an_ambiguous_abbreviation_takes_the_worst_reading() -> None:
    # getopt rejects `--s` for sort (--sort, --stable, --output?) : over-classifying it costs nothing. For su,
    # `--s` is --shell or --session-command: the value is classified as the command it may be.
    assert tier("su --s='rm -rf /'") == 3
    assert tier("sdiff --o=/etc/passwd a b") == 3


def test_go_style_programs_get_no_abbreviations() -> None:
    # Go's flag package has no abbreviations: `-o` is one option, `-out` another (an unknown one).
    assert SPECS["httpx"].single_dash and not SPECS["httpx"].known


def _unique_prefixes(name: str, known: frozenset[str]) -> list[str]:
    """Every prefix of `name` of three or more characters that no other known long name starts with."""
    return [
        name[:length]
        for length in range(3, len(name))
        if not any(other != name and other.startswith(name[:length]) for other in known)
    ]


def _spec_cases() -> list[tuple[str, str]]:
    cases = []
    for program, spec in SPECS.items():
        if spec.single_dash:
            continue
        for name in sorted(spec.known & (spec.outputs | spec.runs)):
            value = "/etc/passwd" if name in spec.outputs else "'rm -rf /'"
            if (program, name) == ("ugrep", "--filter"):
                value = "'txt:rm -rf /'"  # ugrep's filters are EXTENSIONS:COMMAND
            for prefix in _unique_prefixes(name, spec.known):
                cases.append((f"{program} {prefix}={value} input", f"{program} {name}={value} input"))
    return cases


SPEC_CASES = _spec_cases()


def test_the_property_cases_cover_the_tables() -> None:
    assert len(SPEC_CASES) > 100
    assert ("sort --o=/etc/passwd input", "sort --output=/etc/passwd input") in SPEC_CASES


@pytest.mark.parametrize(("abbreviated", "full"), SPEC_CASES)
def test_every_unique_prefix_of_an_output_or_command_option_classifies_like_the_full_name(
    abbreviated: str, full: str
) -> None:
    expected = tier(full)
    assert expected >= 1, full  # writes /etc/passwd or runs `rm -rf /`: the property compares something
    assert tier(abbreviated) == expected, abbreviated


def _wrapper_cases() -> list[tuple[str, str]]:
    cases = []
    for program, values in WRAPPERS.items():
        known = _KNOWN[program]
        for name in sorted(known & values - _INLINE_OPTIONS.get(program, frozenset())):
            for prefix in _unique_prefixes(name, known):
                cases.append((f"{program} {prefix}=x rm -rf /", f"{program} {name}=x rm -rf /"))
        for name in sorted(_INLINE_OPTIONS.get(program, frozenset()) & known):
            for prefix in _unique_prefixes(name, known):
                cases.append((f"{program} {prefix}='rm -rf /'", f"{program} {name}='rm -rf /'"))
    for program, (values, _operands) in WRAPPER_OPERANDS.items():
        known = _FLOCK_KNOWN if program == "flock" else _OPERAND_KNOWN[program]
        for name in sorted(known & values):
            for prefix in _unique_prefixes(name, known):
                cases.append((f"{program} {prefix}=x 5 rm -rf /", f"{program} {name}=x 5 rm -rf /"))
    return cases


WRAPPER_CASES = _wrapper_cases()


@pytest.mark.parametrize(("abbreviated", "full"), WRAPPER_CASES)
def test_every_unique_prefix_of_a_wrapper_option_classifies_like_the_full_name(abbreviated: str, full: str) -> None:
    assert tier(full) == 3, full
    assert tier(abbreviated) == 3, abbreviated


@pytest.mark.parametrize(
    "command",
    [
        "env --block-signal sh -c 'rm -rf /'",
        "env --block-signal rm -rf /",
        "env --default-signal sh -c 'rm -rf /'",
        "env --ignore-signal rm -rf /",
        "env --ignore-sig rm -rf /",
        "faketime -f +1d rm -rf /",
        "faketime -f '+1d' sh -c 'rm -rf /'",
        "faketime -f -m '+1d' rm -rf /",
        "xargs --eof rm -rf",
        "nsenter -t 1 -W /tmp rm -rf /",
        "strace --output /tmp/trace rm -rf /",
        # The safety net: a word an option took as its value that names a program is classified as the command.
        "timeout -s sh -c 'rm -rf /' 5",
        "ionice -c sh -c 'rm -rf /'",
    ],
)
def test_a_wrapper_option_does_not_swallow_the_command(command: str) -> None:
    assert tier(command) == 3, command


def test_the_safety_net_does_not_raise_a_value_that_is_no_program() -> None:
    assert tier("timeout -s KILL 5 ls") == 0
    assert tier("nice -n 10 ls") == 0
    assert tier("sudo -u bob ls") == 2  # privilege escalation, as without the net
    # What is left after the value names a program: the reading as written stands (tldr's example).
    assert tier("systemd-inhibit --what shutdown sleep 5") == 0


@pytest.mark.parametrize(
    ("command", "stdin", "expected"),
    [
        ("dc", "!rm -rf /", 3),
        ("dc -", "!rm -rf /", 3),
        ("dc -f -", "1 2 + p\n!rm -rf /\n", 3),
        ("dc", "2 3 + p", 0),
        ("dc -e '2 p'", "!rm -rf /", 0),  # with -e and no `-`, dc does not read stdin
        ("echo '!rm -rf /' | dc", None, 3),
        ("printf '!rm -rf /\\n' | dc -", None, 3),
        ("echo '2 3 + p' | dc", None, 0),
        ("cat prog.dc | dc", None, 1),
        ("dc <<< '!rm -rf /'", None, 3),
        ("dc <<EOF\n!rm -rf /\nEOF", None, 3),
        ("sudo dc", "!rm -rf /", 3),
    ],
)
def test_dc_reading_its_program_from_stdin_is_classified(command: str, stdin: str | None, expected: int) -> None:
    assert tier(command, stdin) == expected, command


# Per-program rules (rm, chmod, git, docker, ...) read their dangerous long options by any unambiguous prefix too
# (getopt_long and git's parse-options accept one): before, `git clean --forc` was rated 0 and passed readonly.
PROGRAM_RULES = [
    ("rm --rec /srv/x", "rm --recursive /srv/x"),
    ("rm --recur --no-pres /", "rm --recursive --no-preserve-root /"),
    ("chmod --rec 777 /", "chmod --recursive 777 /"),
    ("chown --recu bob /etc", "chown --recursive bob /etc"),
    ("git push --forc origin main", "git push --force origin main"),
    ("git push --force-with origin main", "git push --force-with-lease origin main"),
    ("git push --mirr backup", "git push --mirror backup"),
    ("git clean --forc", "git clean --force"),
    ("git clean --forc -d -x", "git clean --force -d -x"),
    ("git branch --dele --forc topic", "git branch --delete --force topic"),
    ("git reset --har HEAD~3", "git reset --hard HEAD~3"),
    ("docker rm --vol web", "docker rm --volumes web"),
    ("iptables --flu", "iptables --flush"),
    ("userdel --rem bob", "userdel --remove bob"),
    ("dpkg --pur nginx", "dpkg --purge nginx"),
    ("cp --forc a /etc/passwd", "cp --force a /etc/passwd"),
    ("sysctl --wri vm.swappiness=1", "sysctl --write vm.swappiness=1"),
]


@pytest.mark.parametrize(("abbreviated", "full"), PROGRAM_RULES)
def test_a_per_program_rule_reads_an_abbreviated_long_option_like_the_full_name(abbreviated: str, full: str) -> None:
    assert tier(full) >= 1, full  # the full spelling is a write, so the case says something
    assert tier(abbreviated) == tier(full), abbreviated


# A safety option (dry run, help, list) lowers a tier only when written in full: an abbreviation may stand for
# another option of the program (getopt takes an exact name first), so it must not lower the tier.
SAFETY_SPELLINGS = [
    ("git clean --force --dry", "git clean --force"),
    ("apt-get --simul install nginx", "apt-get install nginx"),
    ("make --just-pr install", "make install"),
    ("shutdown --he now", "shutdown now"),
    ("cp --force --no-clob a /etc/passwd", "cp --force a /etc/passwd"),
    ("wipefs --all --no-a /dev/sdb", "wipefs --all /dev/sdb"),
]


@pytest.mark.parametrize(("abbreviated", "unsafe"), SAFETY_SPELLINGS)
def test_an_abbreviated_safety_option_does_not_lower_the_tier(abbreviated: str, unsafe: str) -> None:
    assert tier(abbreviated) == tier(unsafe), abbreviated


def test_the_abbreviations_in_the_table_are_real(tmp_path: Path) -> None:
    # The real tools take them: rm and chmod (getopt_long) and git (parse-options) act on the abbreviation.
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    subprocess.run(["chmod", "--rec", "700", str(tree)], check=True)
    assert (tree / "sub").stat().st_mode & 0o777 == 0o700
    subprocess.run(["rm", "--rec", str(tree)], check=True)
    assert not tree.exists()
    repository = tmp_path / "repository"
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    (repository / "untracked").write_text("x")
    subprocess.run(["git", "-C", str(repository), "clean", "--forc", "-q"], check=True)
    assert not (repository / "untracked").exists()
