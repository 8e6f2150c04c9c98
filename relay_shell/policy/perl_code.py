"""perl's command line and `-e` code, read as perl reads them (perlrun, perlop's "Gory details of parsing quoted
constructs"): switches bundled in one word, the code of every `-e`/`-E`, and then the code itself lexed into
strings, regular expressions, here-documents, variables and the names it calls, so that a call is found however it
is spelled (`open my $f, q{>}, q{F}`, `readpipe`, `qx{…}`, backquotes, `CORE::system`, `&{"sys"."tem"}`) and text
in a string is not mistaken for a call.

The code is 0 only when every name it calls is one perl provides that reads, prints or computes (or a sub it
defines), it opens files only to read them, and `-n`/`-p` read only files (a file name `cmd|` runs cmd: perl's
two-argument open). A call that runs a command is 2 with the command classified; one that changes files or
processes 2 (a new file 1); code built at run time (string `eval`, `&{…}`, `->$name`, `(?{…})`, `s///ee`) 2; a
name the reader does not know, a module not known to be harmless, or code it cannot see (a script file, `-x`,
`require`, `do FILE`) 1. Where perl's own guess between a regex and a division depends on what a name is, the
reader takes the division: that reads more of the text as code, never less.
"""

from __future__ import annotations

import re
import shlex

from relay_shell.policy.calls import Verdict
from relay_shell.policy.perl_lexer import Lexed, lex_perl
from relay_shell.policy.vocabulary import words

# perlfunc's functions and perlsyn's keywords that only read, print or compute (and the standard file handles).
_PURE = words(
    "print printf say sprintf length substr index rindex lc uc lcfirst ucfirst chomp chop chr ord hex oct abs int"
    " sqrt sin cos atan2 exp log rand srand join split reverse sort map grep keys values each delete exists defined"
    " undef scalar wantarray ref bless die warn exit push pop shift unshift splice local my our state return last"
    " next redo if unless else elsif while until for foreach do eval sub package BEGIN END INIT CHECK UNITCHECK"
    " use no x lt gt le ge eq ne cmp and or not xor pack unpack time times localtime gmtime sleep pos quotemeta"
    " study vec caller __FILE__ __LINE__ __PACKAGE__ __SUB__ STDIN STDOUT STDERR ARGV DATA ENV INC getc read"
    " readline eof close seek tell binmode fileno select opendir readdir closedir rewinddir telldir seekdir stat"
    " lstat glob chdir getpwnam getpwuid getpwent getgrnam getgrgid getgrent getlogin gethostbyname"
    " gethostbyaddr getprotobyname getservbyname getppid getpgrp getpriority fc lock prototype sprintf exists"
    " wait waitpid format_name qw q qq m qr s tr y sum sum0 min max minstr maxstr first any all none uniq"
    " shuffle reduce Dumper floor ceil strftime encode decode encode_json decode_json to_json from_json basename"
    " dirname fileparse getcwd cwd abs_path hires gettimeofday usleep looks_like_number blessed reftype"
    " dualvar weaken croak carp confess cluck pairs pairkeys pairvalues product"
)
# Modules whose import changes nothing outside the program (their dangerous functions are named calls anyway).
_SAFE_MODULES = words(
    "strict warnings utf8 feature integer bytes lib constant vars open locale bigint bignum bigrat List::Util"
    " Scalar::Util Data::Dumper POSIX Time::HiRes Time::Local Time::Piece Getopt::Long Getopt::Std JSON::PP JSON"
    " MIME::Base64 Digest::MD5 Digest::SHA Encode Text::Wrap Text::Tabs Term::ANSIColor File::Basename File::Spec"
    " Cwd Carp English Math::BigInt Math::BigFloat Math::Trig Text::ParseWords Text::Abbrev Unicode::Normalize"
    " Storable IO::Handle FindBin"
)
_RUNS = words("system exec readpipe qx")
_CHANGES = words(
    "unlink rename rmdir chmod chown chroot link symlink truncate utime kill syscall setpgrp setpriority dbmopen"
    " dump rmtree remove_tree make_path mkpath move mv copy cp remove creat mkfifo setuid setgid store nstore"
    " lock_store lock_nstore write_file"
)
_CREATES = words("mkdir fork pipe socket socketpair connect send tempfile tempdir")
_LISTENS = words("bind listen accept")
_DYNAMIC = words("require do evalbytes")
_SWITCH_VALUES = frozenset("eEIMmixdDCF")  # letters that take the rest of the word (or, for e/E/I, the next)
_WRITE_MODE = re.compile(r"\s*(\+?[<>]|>>|\|-|-\||\|)")


def perl_verdict(words_: list[str]) -> Verdict:
    """perl's switches, the code of its -e/-E, and the files -n/-p open."""
    codes: list[str] = []
    modules: list[str] = []
    worst = [(0, "perl prints")]
    loops = False
    position = 1
    while position < len(words_):
        word = words_[position]
        if word == "--" or not word.startswith("-") or word == "-":
            position += word == "--"
            break
        position += 1
        index = 1
        while index < len(word):
            letter = word[index]
            rest = word[index + 1 :]
            if letter in "eE":
                value = rest if rest else (words_[position] if position < len(words_) else "")
                position += 0 if rest else 1
                codes.append(value)
                break
            if letter in "Mm":
                module = rest if rest else (words_[position] if position < len(words_) else "")
                position += 0 if rest else 1
                modules.append(module.lstrip("-").split("=", 1)[0].split(" ", 1)[0])
                break
            if letter == "d":
                worst.append((2, "perl -d runs the debugger, which runs commands from its input (or PERL5DB)"))
                break
            if letter in "xS":
                worst.append((1, f"perl -{letter} runs a script that cannot be seen"))
                break
            if letter in "np":
                loops = True
            if letter in "l0":  # -l[octal], -0[digits]: only digits are theirs, the bundle goes on
                index += 1
                while index < len(word) and (word[index].isdigit() or (letter == "0" and word[index] in "xX")):
                    index += 1
                continue
            if letter in _SWITCH_VALUES:
                if letter == "I" and not rest:
                    position += 1
                break
            index += 1
    operands = words_[position:]
    if not codes:
        if operands or not any(letter in "vhV" for word in words_[1:2] for letter in word):
            worst.append((1, "perl runs a script that cannot be seen"))
        return _verdict(worst, [], [])
    for module in modules:
        if module not in _SAFE_MODULES:
            worst.append((1, f"perl loads module {module}"))
    lexed = lex_perl("\n".join(codes))
    shell: list[str] = []
    writes: list[str] = []
    worst += _code_findings(lexed, shell, writes)
    if loops or lexed.reads_argv:
        worst += _argv_files(operands, shell, writes)
    return _verdict(worst, shell, writes)


def _verdict(worst: list[tuple[int, str]], shell: list[str], writes: list[str]) -> Verdict:
    tier, reason = max(worst, key=lambda item: item[0])
    commands = tuple(("tee", path) for path in writes)
    return Verdict(tier, reason, shell=tuple(shell), commands=commands)


def _code_findings(lexed: Lexed, shell: list[str], writes: list[str]) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    if lexed.unreadable:
        found.append((2, f"perl code {lexed.unreadable}: cannot classify"))
    for text in lexed.commands:
        shell.append(text)
        found.append((2, "perl code runs commands"))
    if lexed.dynamic_commands:
        found.append((3, "perl code runs a command built at run time: only known at run time (adr/0025)"))
    defined = set(lexed.subs)
    for name, arguments in lexed.calls:
        short = name.rsplit("::", 1)[-1]
        if name.startswith("CORE::GLOBAL::"):
            found.append((2, "perl code overrides a builtin"))
        elif short in _RUNS:
            literal = _literal_argument(arguments)
            if literal is None and (not arguments or arguments[0] == "?"):
                found.append((3, "perl code runs a command built at run time: only known at run time (adr/0025)"))
            else:
                found.append((2, "perl code runs commands"))
            if literal is not None:
                shell.append(literal)
        elif short in ("rmtree", "remove_tree"):
            target = _literal_argument(arguments)
            found.append((2 if target else 3, "perl code deletes a directory tree"))
            if target:
                shell.append("rm -rf " + shlex.quote(target))
        elif short == "open" or short == "sysopen":
            found.append(_open(short, arguments, shell, writes))
        elif short in _CHANGES:
            found.append((2, f"perl code changes files or processes ({short})"))
        elif short in _LISTENS:
            found.append((2, f"perl code serves a network port ({short})"))
        elif short in _CREATES:
            found.append((1, f"perl code creates things ({short})"))
        elif short in _DYNAMIC and not (arguments and arguments[0] == "{"):
            found.append((1, f"perl code loads code that cannot be seen ({short})"))
        elif short == "eval" and (not arguments or arguments[0] != "{"):
            found.append((2, "perl code evaluates a string as code"))
        elif short not in _PURE and short not in defined and name not in defined:
            found.append((1, f"perl code calls {name}, which the classifier does not know"))
    for module in lexed.modules:
        if module not in _SAFE_MODULES:
            found.append((1, f"perl code loads module {module}"))
    if lexed.sets_in_place:
        found.append((2, "perl code turns on in-place editing ($^I)"))
    return found


def _literal_argument(arguments: list[str]) -> str | None:
    """The command of system/exec/readpipe: a literal string (its text; a list's words joined), or the text of an
    interpolating one as written (its `$name`s stay, so the command word is still read)."""
    if not arguments or arguments[0] == "?" or arguments[0] == "{":
        return None
    if all(argument[:1] == "'" for argument in arguments) and len(arguments) > 1:
        return " ".join(argument[1:] for argument in arguments)
    return arguments[0][1:]


def _open(name: str, arguments: list[str], shell: list[str], writes: list[str]) -> tuple[int, str]:
    """open's mode and target, two- and three-argument forms: a write, a pipe to or from a command, or a read.
    Arguments are "'text" (a literal), '"text' (interpolated, as written) or "?"."""
    if name == "sysopen":
        flags = " ".join(arguments[2:3])
        if flags and all(flag.strip() in ("O_RDONLY", "0") for flag in flags.split("|")):
            return 0, "perl code reads a file"
        return 2, "perl code opens a file to write it"
    if len(arguments) < 2 or arguments[1] == "?":
        return 2, "perl code opens a file named at run time (a pipe or a write)"
    mode, literal = arguments[1][1:], arguments[1][0] == "'"
    if len(arguments) >= 3:  # three-argument open: the mode alone, then the path or the command
        if not literal:
            return 2, "perl code opens a file in a mode chosen at run time"
        target = arguments[2][1:] if arguments[2][0] == "'" else None
        if "|" in mode:
            if target is not None:
                shell.append(" ".join(item[1:] for item in arguments[2:] if item[0] == "'"))
            return 2, "perl code opens a pipe to or from a command"
        if ">" in mode or "+" in mode:
            if target is None:
                return 1, "perl code writes a file named at run time"
            writes.append(target)
            return 1, "perl code writes a file"
        return 0, "perl code reads a file"
    stripped = mode.strip()
    if stripped.startswith("<") and not stripped.startswith("<&") and "|" not in stripped:
        return 0, "perl code reads a file"
    if not literal:
        return 2, "perl code opens a file named at run time (a pipe or a write)"
    if stripped.endswith("|") or stripped.startswith("|") or stripped.startswith(("-|", "|-")):
        shell.append(stripped.strip("|-").strip())
        return 2, "perl code opens a pipe to or from a command"
    matched = _WRITE_MODE.match(mode)
    if matched and (">" in matched.group(1) or "+" in matched.group(1)):
        writes.append(mode[matched.end() :].strip())
        return 1, "perl code writes a file"
    return 0, "perl code reads a file"


def _argv_files(operands: list[str], shell: list[str], writes: list[str]) -> list[tuple[int, str]]:
    """-n, -p and `<>` open each argument with two-argument open: `cmd|` runs cmd, `>F` writes F."""
    found: list[tuple[int, str]] = []
    for operand in operands:
        stripped = operand.strip()
        if stripped.endswith("|") or stripped.startswith("|"):
            shell.append(stripped.strip("|").strip())
            found.append((2, "perl's <> runs a command named as a file (cmd|)"))
        elif stripped.startswith((">", "+<", "+>")):
            writes.append(stripped.lstrip("+<>").strip())
            found.append((1, "perl's <> writes a file named >FILE"))
        elif "$" in operand or "`" in operand:
            found.append((1, "perl's <> opens a file named at run time (a name ending in | runs a command)"))
    return found
