"""Rules for package managers (system and language), language tool chains, and formatters and linters that
rewrite files when asked to. Installing, removing and upgrading packages is tier 2; refreshing an index or
building is 1; listing and searching is 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy.calls import READ, Call, Verdict, verdict
from relay_shell.policy.outputs import written
from relay_shell.policy.vocabulary import words

_PACKAGE_READ = words(
    "list ls search show info policy depends rdepends madison provides whatprovides repolist repos outdated doctor"
    " why explain view freeze check inspect help version --version query deplist changelog showpkg stats"
    " list-installed history files contents owner owns audit find info-all repoquery leaves deps uses desc home"
    " docs bugs repo ping whoami prefix root bin fund config-get sbom diff find-dupes licenses ll la"
)
_PACKAGE_TIER_1 = words(
    "makecache refresh-index download source fetch init new create pack wheel run run-script test start"
    " restart-script exec x dlx login logout adduser star unstar link config build compile lock bundle venv"
)
_PACKAGE_WRITES = words("install i add remove uninstall un rm purge upgrade update erase delete reinstall downgrade")
# Package managers whose "update" refreshes the index only (the others' update upgrades packages).
_INDEX_UPDATE = words("apt apt-get aptitude apk brew pkg port opkg nala pkcon")


def _package_manager(call: Call) -> Verdict:
    sub = call.subcommand
    program = call.program
    if program in ("apt", "apt-get", "aptitude", "nala") and call.has_exact(
        "-s", "--simulate", "--dry-run", "--just-print"
    ):
        return verdict(0, "simulates a package change")
    if sub in _PACKAGE_READ and not (
        program in ("npm", "pnpm", "yarn", "bun") and sub == "audit" and "fix" in call.operands
    ):
        if program in ("npm", "pnpm", "yarn", "uv", "poetry") and sub == "version" and len(call.operands) > 1:
            return verdict(1, f"{program} version bumps the version")
        return READ
    if sub == "update" and program in _INDEX_UPDATE and len(call.operands) == 1:
        return verdict(1, f"{program} update refreshes the package index")
    if sub in ("cache", "config") and len(call.operands) > 1:
        action = call.operands[1]
        if action in ("list", "ls", "get", "show", "verify", "dir", "info", "path"):
            return READ
        if sub == "config" or action in ("add",):
            return verdict(1, f"{program} config {action}")
        return verdict(2, f"{program} cache {action} deletes cached packages")
    if len(call.operands) > 1 and call.operands[1] in _PACKAGE_READ | {"hash"} and sub not in _PACKAGE_WRITES:
        return verdict(0, f"{program} {sub} {call.operands[1]} reads")
    if call.has_exact("--dry-run", "--check") and sub not in ("build", "run"):
        return verdict(0, f"{program} {sub} only checks")
    if sub in _PACKAGE_TIER_1 and not (program in ("npm", "pnpm", "yarn", "bun") and sub == "link" and call.has("-g")):
        return verdict(1, f"{program} {sub}")
    if not sub:
        return READ if program in ("npm", "pip", "pip3", "brew", "gem", "apt", "dnf", "yum") else verdict(1, program)
    return verdict(2, f"{program} {sub} changes installed packages")


def _pacman(call: Call) -> Verdict:
    letters = set()
    for word in call.words[1:]:
        if word.startswith("-") and not word.startswith("--"):
            letters |= set(word[1:])
    long = call.long.keys()
    if letters & {"Q", "F", "T"} or long & {"--query", "--files", "--deptest", "--help", "--version"}:
        return verdict(0, "queries the package database")
    if letters & {"S", "R", "U"} and letters & {"p", "s", "i", "l", "g"} and not letters & {"y", "u", "c"}:
        return verdict(0, "prints what would change or searches")
    if letters & {"h", "V"}:
        return READ
    if letters == {"S", "y"}:
        return verdict(1, "refreshes the package databases")
    return verdict(2, f"{call.program} changes installed packages")


def _dpkg(call: Call) -> Verdict:
    if call.has("-i", "--install", "-r", "--remove", "-P", "--purge", "--configure", "--unpack", "--set-selections"):
        return verdict(2, "dpkg changes installed packages")
    if call.has("-x", "--extract", "-X", "--vextract", "-b", "--build"):
        return verdict(1, "dpkg unpacks or builds a package file")
    return verdict(0, "dpkg queries packages")


_RPM_MACRO_SHELL = re.compile(r"%\(([^()]{0,4096}(?:\([^()]{0,4096}\)[^()]{0,4096}){0,8})\)")


def _rpm(call: Call) -> Verdict:
    """rpm: queries and verification read; macro text (`--eval`, `-E`, `--define`, `-D`) runs the shell commands
    of its `%(…)` and the Lua of its `%{lua:…}`; `--pipe CMD` runs CMD; `--rcfile`/`--macros` load macros nobody
    sees; everything else changes packages."""
    words_ = call.words
    macros = [words_[i + 1] for i, word in enumerate(words_[:-1]) if word in ("--eval", "-E", "--define", "-D")]
    macros += [word.split("=", 1)[1] for word in words_ if word.startswith(("--eval=", "--define="))]
    shell = [match.group(1) for text in macros for match in _RPM_MACRO_SHELL.finditer(text)]
    shell += [words_[i + 1] for i, word in enumerate(words_[:-1]) if word == "--pipe"]
    if any("%{lua:" in text or ("%[" in text and "lua" in text) for text in macros):
        return Verdict(2, "rpm macro text runs Lua code", shell=tuple(shell))
    if call.has("--rcfile", "--macros", "--load"):
        return Verdict(1, "rpm loads macros from a file that is not seen", shell=tuple(shell))
    if call.has("--initdb", "--rebuilddb", "--import", "--setperms", "--setugids", "--restore"):
        return verdict(2, "rpm changes its database or installed files")
    if call.has_exact("-q", "--query", "-V", "--verify", "-K", "--checksig", "--eval", "--showrc", "--querytags"):
        return Verdict(0, "rpm queries packages", shell=tuple(shell))
    if macros and not call.has("-i", "--install", "-U", "--upgrade", "-F", "--freshen", "-e", "--erase"):
        return Verdict(0, "rpm expands macros", shell=tuple(shell))
    return verdict(2, "rpm changes installed packages")


def _pip(call: Call) -> Verdict:
    sub = call.subcommand
    if sub in ("download", "wheel", "lock", "hash"):
        return verdict(1, f"pip {sub}")
    if sub in ("install", "uninstall") and call.has_exact("--dry-run"):
        # resolving a source package runs its build code (setup.py) even in a dry run
        return verdict(1 if sub == "install" else 0, "pip dry run")
    return _package_manager(call)


def _cargo(call: Call) -> Verdict:
    sub = call.subcommand
    if sub in ("install", "uninstall", "publish", "yank", "owner", "login", "logout"):
        return verdict(2 if sub not in ("login", "logout") else 1, f"cargo {sub}")
    if sub in ("fix", "fmt", "clippy") and not call.has_exact("--check", "--dry-run"):
        fixes = sub != "clippy" or call.has("--fix")
        return verdict(2, f"cargo {sub} rewrites sources in place") if fixes else READ
    if sub in ("fmt", "tree", "metadata", "search", "locate-project", "version", "help", "verify-project", "pkgid"):
        return READ
    return verdict(1, f"cargo {sub}")


def _go(call: Call) -> Verdict:
    sub = call.subcommand
    if sub in ("version", "env", "list", "doc", "vet", "help") and not (sub == "env" and call.has("-w", "-u")):
        return READ
    if (
        sub in ("install",)
        or (sub == "env" and call.has("-w", "-u"))
        or (sub == "clean" and call.has("-cache", "-modcache"))
    ):
        return verdict(2, f"go {sub}")
    if sub == "fmt":
        return verdict(2, "go fmt rewrites sources in place")
    return verdict(1, f"go {sub}")


def _paccache(call: Call) -> Verdict:
    if call.has("-r", "--remove", "-m", "--move"):
        return verdict(2, "paccache removes cached packages")
    return verdict(0, "paccache lists what it would remove")


def _rustup(call: Call) -> Verdict:
    sub = call.subcommand
    action = call.operands[1] if len(call.operands) > 1 else ""
    if sub in ("", "show", "check", "which", "doc", "help") or action in ("list", "show"):
        return READ
    if sub in ("default", "set", "override") or action in ("default", "set", "unset"):
        return verdict(1, f"rustup {sub} changes the toolchain settings")
    return verdict(2, f"rustup {sub} installs or removes toolchains")


def _make(call: Call) -> Verdict:
    """make reads its makefile whatever it is asked: `$(shell …)` runs while it is read, and `+` lines and
    `$(MAKE)` lines run even under -n, -q or -p. So no make is read-only (1 at least)."""
    if "install" in call.operands or "uninstall" in call.operands:
        return verdict(2, "make install changes the system")
    if call.has("-n", "--dry-run", "--just-print", "--recon", "-q", "--question", "-p", "--print-data-base"):
        return verdict(1, "make reads its makefile, whose $(shell …) runs even in a dry run")
    return verdict(1, "make runs a build")


# Formatters and fixers: (options that make them write files in place, whether they write by default, options
# that make them only check).
_FORMATTERS: dict[str, tuple[frozenset[str], bool, frozenset[str]]] = {
    "black": (frozenset(), True, words("--check --diff")),
    "isort": (frozenset(), True, words("--check --check-only -c --diff --show-files")),
    "rustfmt": (frozenset(), True, words("--check")),
    "scalafmt": (frozenset(), True, words("--test --list --check")),
    "swiftformat": (frozenset(), True, words("--lint --dryrun")),
    "prettier": (words("--write -w"), False, frozenset()),
    "gofmt": (words("-w"), False, frozenset()),
    "gofumpt": (words("-w"), False, frozenset()),
    "goimports": (words("-w"), False, frozenset()),
    "shfmt": (words("-w --write"), False, frozenset()),
    "clang-format": (words("-i"), False, frozenset()),
    "autopep8": (words("-i --in-place"), False, frozenset()),
    "autoflake": (words("-i --in-place"), False, frozenset()),
    "yapf": (words("-i --in-place"), False, frozenset()),
    "eslint": (words("--fix"), False, frozenset()),
    "rubocop": (
        words("-a -A --auto-correct --autocorrect --auto-correct-all --autocorrect-all -x --fix-layout"),
        False,
        frozenset(),
    ),
    "standard": (words("--fix"), False, frozenset()),
    "stylelint": (words("--fix"), False, frozenset()),
    "markdownlint": (words("--fix"), False, frozenset()),
    "ktlint": (words("-F --format"), False, frozenset()),
    "codespell": (words("-w --write-changes"), False, frozenset()),
    "sg": (words("-U --update-all"), False, frozenset()),
    "ast-grep": (words("-U --update-all"), False, frozenset()),
    "comby": (words("-i -in-place"), False, frozenset()),
    "jpegoptim": (frozenset(), True, words("--stdout -n --noaction")),
    "optipng": (frozenset(), True, words("-simulate")),
    "mogrify": (frozenset(), True, frozenset()),
    "jhead": (words("-autorot -norot -de -di -dx -dt -purejpg -du -mkexif -ts -ta -da -cl -te"), False, frozenset()),
    "exiv2": (words("-d rm -M mo -k"), False, frozenset()),
    "strip-nondeterminism": (frozenset(), True, words("--help")),
    "ruff": (words("--fix format"), False, words("--check --diff")),
}


def _dos2unix(call: Call) -> Verdict:
    """dos2unix converts its files in place (2) unless -i/--info only reports; -n/--newfile IN OUT (and -c
    pairs after it) writes each OUT, a new file (1) or one of the inputs (2)."""
    if call.has_exact("-i", "--info", "-h", "--help", "-V", "--version", "-L", "--license"):
        return verdict(0, f"{call.program} only reports")
    words_ = call.words
    found = [verdict(0, f"{call.program} converts nothing")]
    new_file = False
    pending: list[str] = []
    for word in words_[1:]:
        if word in ("-n", "--newfile"):
            new_file = True
        elif word in ("-o", "--oldfile"):
            new_file = False
        elif not word.startswith("-") or word == "-":
            if not new_file:
                found.append(verdict(2, f"{call.program} converts files in place"))
                continue
            pending.append(word)
            if len(pending) == 2:
                found.append(written(call.program, pending[1], [pending[0]]))
                pending = []
    return max(found, key=lambda item: item.tier)


def _formatter(call: Call) -> Verdict:
    writes, by_default, checks = _FORMATTERS[call.program]
    present = set(call.words[1:])
    if present & checks:
        return verdict(0, f"{call.program} only checks")
    if by_default or present & writes or any(word.split("=", 1)[0] in writes for word in call.words[1:]):
        return verdict(2, f"{call.program} rewrites files in place")
    return verdict(0, f"{call.program} prints its result")


_PACKAGE_MANAGERS = words(
    "apt apt-get aptitude nala dnf dnf4 dnf5 yum microdnf zypper apk brew port pkg opkg snap flatpak emerge"
    " xbps-install eopkg nix-env conda mamba micromamba pipx npm pnpm yarn bun gem composer tlmgr pkcon urpmi"
    " upgradepkg installpkg removepkg swupd yay paru aurman trizen pamac pikaur gup upt cpan cpanm pear luarocks"
    " opam cabal stack nimble raco dotnet choco winget scoop mas uv poetry pdm hatch rye pixi"
)
RULES: dict[str, Callable[[Call], Verdict]] = {name: _package_manager for name in _PACKAGE_MANAGERS}
RULES.update({name: _pacman for name in ("pacman", "yay", "paru", "pikaur", "trizen", "aurman", "powerpill")})
RULES.update({name: _formatter for name in _FORMATTERS})
RULES.update(dict.fromkeys(("dos2unix", "unix2dos", "mac2unix", "unix2mac"), _dos2unix))
RULES.update(
    {
        "dpkg": _dpkg,
        "rpm": _rpm,
        "pip": _pip,
        "pip3": _pip,
        "cargo": _cargo,
        "go": _go,
        "make": _make,
        "gmake": _make,
        "paccache": _paccache,
        "rustup": _rustup,
    }
)
