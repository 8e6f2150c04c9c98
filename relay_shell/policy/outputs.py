"""Read-only programs that write, change or run something when told to. Without such an option they print or
compute, tier 0 (read_only.py: the tier-0 list, with why). One table (output_options.py) says, per program,
which options name a file it writes (`sort -o F`, `nmap -oX F`, `info -o F`, `ss -D F`, `hwinfo --log F`), which
write or change something (`ss -K` closes sockets, `lastlog -C`, `sensors -s`, `pip-audit --fix`, `semgrep
--autofix`, with the tier), which give a command line the program runs (`sort --compress-program`, `rg --pre`,
`man -P`, `feh --action`: that text is classified as shell text, like a find -exec command), and which
sub-commands act (`trivy server`, `vale sync`). Programs whose operands or own language write or run (`uniq IN
OUT`, `xxd IN OUT`, `yq -i`, `mlr -I`/`tee`/`system()`, `nmap -oX`/`--script`, `vnstat --remove`, less's `+!CMD`,
`pidstat -e`) have small rules of their own below; sed, dc, awk and the shell builtins that keep a command for
later are in `scripts.py` and `awk_code.py`.

Tiers (the rubric, adr/0004): a new output file is 1 (`> out.txt`), output onto one of the inputs is an in-place
rewrite without a backup (2, as `sed -i`), onto a system, login or critical file or a device what
files.writes_onto says (2 or 3).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy.calls import READ, Call, Option, Verdict, long_names, read_options, verdict
from relay_shell.policy.files import writes_onto
from relay_shell.policy.network import listener
from relay_shell.policy.output_options import SPECS, Spec
from relay_shell.policy.vocabulary import words

_NOT_A_FILE = frozenset(["-", "/dev/stdout", "/dev/stderr", "/dev/null", "/dev/tty"])


def written(program: str, path: str, inputs: list[str]) -> Verdict:
    """What writing the program's output to `path` is: nothing (stdout), a new file, its own input, a system file."""
    if path in _NOT_A_FILE:
        return READ
    onto = writes_onto(path, f"{program} writes its output")
    if onto is not None:
        return onto
    if path in inputs:
        return verdict(2, f"{program} rewrites its input {path} in place, without a backup")
    return verdict(1, f"{program} writes its output to {path}")


def single_dash_options(arguments: list[str], values: frozenset[str]) -> tuple[list[Option], list[str]]:
    """Go-style options (`-name value`, `-name=value`, `--name value`): each word is one option, never a bundle."""
    options: list[Option] = []
    operands: list[str] = []
    position = 1
    while position < len(arguments):
        word = arguments[position]
        if word == "--":
            operands += arguments[position + 1 :]
            break
        if not word.startswith("-") or word == "-":
            operands.append(word)
            position += 1
            continue
        name, equals, value = word.partition("=")
        if equals:
            options.append((name, value))
            position += 1
        elif name in values:
            options.append((name, arguments[position + 1] if position + 1 < len(arguments) else None))
            position += 2
        else:
            options.append((name, None))
            position += 1
    return options, operands


def spec_verdict(call: Call, spec: Spec) -> Verdict:
    """The worst thing the options and sub-command do; the command lines they give are classified in turn."""
    if spec.single_dash:
        options, operands = single_dash_options(call.words, spec.values)
    else:
        options, operands = read_options(call.words, spec.values, spec.optional, spec.known)
    found = [READ]
    commands: list[str] = []
    for name, value in options:
        if name in spec.outputs and value:
            found.append(written(call.program, value, operands))
        elif name in spec.acts:
            tier, what = spec.acts[name]
            found.append(verdict(tier, f"{call.program} {name} {what}"))
        if name in spec.runs and value:
            commands += _command_texts(call.program, name, value)
    verb = operands[0] if operands else ""
    for key in (" ".join(operands[:2]), verb):
        if key in spec.verbs:
            tier, what = spec.verbs[key]
            found.append(verdict(tier, f"{call.program} {key} {what}"))
            break
    worst = max(found, key=lambda item: item.tier)
    if commands:
        reason = worst.reason if worst.tier else f"{call.program} runs a command it is given"
        return Verdict(worst.tier, reason, shell=tuple(commands))
    return worst


# Command text as the program is given it: feh's `;[title]cmd`, ugrep's `ext,ext:cmd,...`; sort's compressor is
# run as a filter (stdin to stdout), so a known compressor there writes nothing.
_COMPRESSORS = words("gzip pigz bzip2 pbzip2 lbzip2 xz pixz lz4 lzop zstd pzstd lzma brotli")


def _command_texts(program: str, name: str, value: str) -> list[str]:
    if program == "feh":
        return [re.sub(r"^;?(?:\[[^\]]{0,200}\])?", "", value)]
    if program == "ugrep" and name == "--filter":
        return [part.split(":", 1)[1] for part in value.split(",") if ":" in part]
    if program == "sort" and value.rsplit("/", 1)[-1] in _COMPRESSORS:
        return []
    return [value]


def _specified(call: Call) -> Verdict:
    return spec_verdict(call, SPECS[call.program])


_UNIQ_VALUES = words("-f --skip-fields -s --skip-chars -w --check-chars")
_UNIQ_KNOWN = long_names(_UNIQ_VALUES)
# xxd's long options have one dash (-cols 8); a value may also be attached (-c8).
_XXD_VALUES = words("-c -cols -g -groupsize -l -len -o -offset -s -seek -n -name")
_YQ_VALUES = words(
    "-o --output-format -p --input-format -I --indent --expression --from-file --front-matter -s --split-exp"
)


def _uniq(call: Call) -> Verdict:
    """uniq [OPTION]... [INPUT [OUTPUT]]: a second operand is the file the result is written to."""
    _options, operands = read_options(call.words, _UNIQ_VALUES, frozenset(), _UNIQ_KNOWN)
    return written("uniq", operands[1], operands[:1]) if len(operands) >= 2 else READ


def _xxd(call: Call) -> Verdict:
    """xxd [options] [infile [outfile]] (also with -r): a second operand is written."""
    _options, operands = single_dash_options(call.words, _XXD_VALUES)
    return written("xxd", operands[1], operands[:1]) if len(operands) >= 2 else READ


def _yq(call: Call) -> Verdict:
    """yq -i / xq -i (--inplace, --in-place) edit their files in place. (Go flags: no abbreviations.)"""
    options, _operands = read_options(call.words, _YQ_VALUES)
    if any(name in ("-i", "--inplace", "--in-place") for name, _value in options):
        return verdict(2, f"{call.program} edits files in place without a backup")
    if any(name in ("-s", "--split-exp") for name, _value in options):
        return verdict(1, f"{call.program} --split-exp writes each document to a file")
    return READ


_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def commands_in_code(code: str, callers: tuple[str, ...]) -> list[tuple[str, str]]:
    """The string literals of awk-like code that name a command line, with how it is used: ("call", text) for
    `system("text")` (or another of `callers`), ("pipe", text) for output piped to it (`print | "text"`), ("read",
    text) for `"text" | getline`. Linear: each literal is matched once and only a few characters around it looked at."""
    found: list[tuple[str, str]] = []
    for match in _STRING.finditer(code):
        text = match.group()[1:-1]
        before = code[max(0, match.start() - 24) : match.start()].rstrip()
        after = code[match.end() : match.end() + 24].lstrip()
        if before.endswith("(") and before[:-1].rstrip().endswith(callers):
            found.append(("call", text))
        elif before.endswith(("|", "|&")):
            found.append(("pipe", text))
        elif after.startswith("|") and after[1:].lstrip("&").lstrip().startswith("getline"):
            found.append(("read", text))
    return found


# Miller's DSL writes to a file with `tee > F, $*` / `emit > F, @x` / `print > F, ...` and runs commands with
# `system("...")`, `exec("cmd", [...])` and output piped to them (`tee | "cmd", $*`).
_MLR_WRITES = re.compile(r"\b(?:tee|emit[1fp]?|printn?|eprintn?|dump|edump)\s{0,8}>")


def _mlr(call: Call) -> Verdict:
    """mlr -I edits in place; the verbs `tee FILE` and `split` write files; its DSL can write files and run
    commands (the command text is classified)."""
    commands: list[str] = []
    found = READ
    if "-I" in call.words[1:]:
        found = verdict(2, f"{call.program} -I edits files in place without a backup")
    elif "tee" in call.words[1:] or "split" in call.words[1:]:
        found = verdict(1, f"{call.program} tee/split writes files")
    for word in call.words[1:]:
        if found.tier < 1 and _MLR_WRITES.search(word):
            found = verdict(1, f"{call.program} writes its output to a file")
        for use, text in commands_in_code(word, ("system", "exec", "os_type_run")):
            commands.append(f": | {text}" if use == "pipe" else text)
    return Verdict(found.tier, found.reason, shell=tuple(commands)) if commands else found


_NMAP_VALUES = words(
    "-oN -oX -oS -oG -oA -oM -oH --resume --script --script-args --script-args-file --stylesheet -p -iL -iR"
    " --exclude --excludefile -e -S -D -g --source-port --data-length --ttl --max-retries --host-timeout"
    " --scan-delay --max-scan-delay --min-rate --max-rate --datadir --servicedb --versiondb --script-help"
    " --script-timeout --top-ports --port-ratio --version-intensity --mtu --data --data-string --proxies"
    " --spoofmac --dns-servers --ip-options --exclude-ports --min-hostgroup --max-hostgroup --min-parallelism"
    " --max-parallelism --min-rtt-timeout --max-rtt-timeout --initial-rtt-timeout"
)
_NMAP_OUTPUTS = words("-oN -oX -oS -oG -oA -oM -oH")
# Script categories and scripts that act on the target (log in by brute force, crash it, exploit it, upload to it,
# run commands on it) rather than read from it.
_NMAP_ACTING = words(
    "all brute dos exploit fuzzer intrusive vuln malware http-put smb-psexec http-slowloris smb-flood"
    " ftp-vsftpd-backdoor http-shellshock ms-sql-xp-cmdshell http-vuln-cve2014-3704 jdwp-exec jdwp-inject"
    " smb-vuln-ms10-054 smb-vuln-regsvc-dos"
)


def _nmap(call: Call) -> Verdict:
    """nmap -oN/-oX/-oS/-oG/-oA FILE write reports (1); --resume continues a scan into its report files (1);
    --script-updatedb rewrites the script database (2); --script with a category or script that attacks the
    target (brute, dos, exploit, intrusive, vuln, ...) changes it (2), with a script file runs code (1)."""
    options, operands = single_dash_options(call.words, _NMAP_VALUES)
    found = [READ]
    for name, value in options:
        if name in _NMAP_OUTPUTS and value:
            found.append(written("nmap", value, operands))
        elif name == "--resume":
            found.append(verdict(1, "nmap --resume continues a scan into its report files"))
        elif name == "--script-updatedb":
            found.append(verdict(2, "nmap --script-updatedb rewrites the script database"))
        elif name == "--script" and value:
            found.append(_nmap_scripts(value))
    return max(found, key=lambda item: item.tier)


def _nmap_scripts(expression: str) -> Verdict:
    tokens = re.findall(r"[^\s,()]+", expression)
    for index, token in enumerate(tokens):
        negated = index > 0 and tokens[index - 1] == "not"
        name = token.lstrip("+")
        if not negated and (name in _NMAP_ACTING or name.endswith(("-brute", "-dos", "-flood"))):
            return verdict(2, f"nmap --script {name} acts on the target")
    if any(token.endswith((".nse", ".lua")) or "/" in token for token in tokens):
        return verdict(1, "nmap runs script code from a file")
    return READ


_VNSTAT_VALUES = words("-i --iface -l --live -q --query -d --days -m --months -y --years --config --dbdir --alias")
_VNSTAT_REMOVES = words("--remove --delete -r --reset --cleartop --rebuildtotal --importdb")
_VNSTAT_CHANGES = words("--add --create --rename --setalias --alias -u --update --sync --enable --disable --force")


def _vnstat(call: Call) -> Verdict:
    """vnstat --remove/--delete/--reset deletes an interface's traffic history (2); --add, --rename, --setalias,
    -u, --enable/--disable change its database (2 as well: the daemon's state)."""
    # vnstat's options are words, not bundles: -tr is the traffic rate, -hg the hourly graph.
    options, _operands = single_dash_options(call.words, _VNSTAT_VALUES)
    names = {name for name, _value in options}
    if names & _VNSTAT_REMOVES:
        return verdict(2, "vnstat deletes or resets traffic history")
    if names & _VNSTAT_CHANGES - {"--force"}:
        return verdict(2, "vnstat changes its interface database")
    return READ


def _csvclean(call: Call) -> Verdict:
    """csvkit before 2.0 writes FILE_out.csv and FILE_err.csv next to its input unless -n (--dry-run)."""
    operands = [word for word in call.words[1:] if not word.startswith("-")]
    if operands and not call.has_exact("-n", "--dry-run"):
        return verdict(1, "csvclean writes FILE_out.csv and FILE_err.csv (csvkit before 2.0)")
    return READ


def _sar(call: Call) -> Verdict:
    """sar -o FILE saves its readings (1); `-o` followed by an interval writes the daily file under /var/log/sa."""
    value = call.value("-o")
    if value is None:
        return READ
    if value == "" or value.isdigit():
        return verdict(2, "sar -o writes the daily data file under /var/log/sa")
    return written("sar", value, [])


def _systemd_analyze(call: Call) -> Verdict:
    """systemd-analyze log-level / log-target / service-watchdogs show a setting, and set it given a value."""
    operands = call.operands
    if operands[:1] and operands[0] in ("log-level", "log-target", "service-watchdogs") and len(operands) > 1:
        return verdict(2, f"systemd-analyze {operands[0]} changes the service manager's settings")
    return spec_verdict(call, SPECS["systemd-analyze"])


def _syft(call: Call) -> Verdict:
    """syft -o FORMAT=FILE (and the older --file FILE) writes the SBOM to FILE; -o FORMAT prints it."""
    options, operands = read_options(call.words, words("-o --output --file -c --config --scope --exclude"))
    files = [value.split("=", 1)[1] for name, value in options if name in ("-o", "--output") and value and "=" in value]
    files += [value for name, value in options if name == "--file" and value]
    return max([READ, *(written("syft", path, operands) for path in files)], key=lambda item: item.tier)


def _vlc(call: Call) -> Verdict:
    """vlc's http or telnet interface is a listener other hosts can reach (2)."""
    interfaces = {call.value(name) or "" for name in ("-I", "--intf", "--extraintf")}
    if any(interface.split(",")[0] in ("http", "telnet") for interface in interfaces if interface):
        return listener(call)
    return spec_verdict(call, SPECS["vlc"])


def _less(call: Call) -> Verdict:
    """less: its options (outputs, lesskey files), and `+CMD` initial commands run as typed: `!CMD` and `|mCMD`
    run a shell command, `v` an editor, `s FILE` saves the input to FILE."""
    found = spec_verdict(call, SPECS["less"])
    shell = list(found.shell)
    worst = found
    for word in call.words[1:]:
        if not word.startswith("+") or word.startswith("+-"):
            continue
        command = word.lstrip("+")
        if command.startswith("!"):
            shell.append(command[1:])
        elif command.startswith("|"):
            shell.append(command[2:])
        elif command.startswith("v"):
            worst = max(worst, verdict(1, "less +v runs an editor"), key=lambda item: item.tier)
        elif command.startswith("s") and command[1:].strip():
            worst = max(worst, written("less", command[1:].strip(), []), key=lambda item: item.tier)
    return Verdict(worst.tier, worst.reason, shell=tuple(shell)) if shell else worst


def _pidstat(call: Call) -> Verdict:
    """pidstat -e PROGRAM ARGS… runs the program to watch it."""
    if "-e" in call.words:
        program = call.words[call.words.index("-e") + 1 :]
        return Verdict(0, "pidstat -e runs a program", commands=(tuple(program),)) if program else READ
    return READ


RULES: dict[str, Callable[[Call], Verdict]] = {
    **dict.fromkeys(SPECS, _specified),
    **dict.fromkeys(("less", "zless", "bzless", "xzless", "lzless"), _less),
    "pidstat": _pidstat,
    "uniq": _uniq,
    "xxd": _xxd,
    "yq": _yq,
    "xq": _yq,
    "mlr": _mlr,
    "miller": _mlr,
    "nmap": _nmap,
    "vnstat": _vnstat,
    "csvclean": _csvclean,
    "sar": _sar,
    "systemd-analyze": _systemd_analyze,
    "vlc": _vlc,
    "syft": _syft,
}
