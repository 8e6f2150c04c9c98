"""Read-only programs that write when told to: to an output file (`sort -o F`, `sort --output=F`, `shuf -o F`,
`uniq IN OUT`, `less -o F` / `-O F` / `--log-file=F`, `tree -o F`, `xxd IN OUT`, `sdiff -o F`) or onto their input
in place (`yq -i`, `mlr -I`). Without that they print, tier 0 (vocabulary.READ_ONLY). A new output file is 1
(the rubric's `> out.txt`), output onto one of the inputs is an in-place rewrite without a backup (2, as
`sed -i`), and onto a system, login or critical file or a device what programs.writes_onto says (2 or 3).
"""

from __future__ import annotations

from collections.abc import Callable

from relay_shell.policy.calls import READ, Call, Verdict, parse_options, read_options, verdict
from relay_shell.policy.programs import writes_onto
from relay_shell.policy.vocabulary import words

_NOT_A_FILE = frozenset(["-", "/dev/stdout", "/dev/stderr", "/dev/null", "/dev/tty"])

# program -> (the options that name the output file, every option that takes a value), so that a value is not
# read as flags (`sort -to` sorts on the separator "o"; it writes nothing).
_OUTPUT_OPTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "sort": (
        words("-o --output"),
        words(
            "-o --output -k --key -t --field-separator -S --buffer-size -T --temporary-directory --parallel"
            " --batch-size --compress-program --files0-from --random-source"
        ),
    ),
    "shuf": (words("-o --output"), words("-o --output -n --head-count -i --input-range --random-source")),
    "less": (
        words("-o -O --log-file --LOG-FILE"),
        words(
            "-o -O --log-file --LOG-FILE -b --buffers -h --max-back-scroll -j --jump-target -k --lesskey-file"
            " -p --pattern -P --prompt -t --tag -T --tag-file -x --tabs -y --max-forw-scroll -z --window -# --shift"
            " -D --color"
        ),
    ),
    "tree": (words("-o"), words("-o -L -P -I -H -T --filelimit --timefmt --charset --sort")),
    "sdiff": (words("-o --output"), words("-o --output -w --width -I --ignore-matching-lines --diff-program")),
}
_UNIQ_VALUES = words("-f --skip-fields -s --skip-chars -w --check-chars")
# xxd's long options have one dash (-cols 8); a value may also be attached (-c8).
_XXD_VALUES = words("-c -cols -g -groupsize -l -len -o -offset -s -seek -n -name")
_YQ_VALUES = words("-o --output-format -p --input-format -I --indent --expression --from-file --front-matter")


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


def _output_option(call: Call) -> Verdict:
    output_options, value_options = _OUTPUT_OPTIONS[call.program]
    options, operands = read_options(call.words, value_options)
    outputs = [value for name, value in options if name in output_options and value is not None]
    if not outputs:
        return READ
    return max((written(call.program, path, operands) for path in outputs), key=lambda found: found.tier)


def _uniq(call: Call) -> Verdict:
    """uniq [OPTION]... [INPUT [OUTPUT]]: a second operand is the file the result is written to."""
    _options, operands = read_options(call.words, _UNIQ_VALUES)
    return written("uniq", operands[1], operands[:1]) if len(operands) >= 2 else READ


def _xxd(call: Call) -> Verdict:
    """xxd [options] [infile [outfile]] (also with -r): a second operand is written."""
    operands: list[str] = []
    position = 1
    arguments = call.words
    while position < len(arguments):
        word = arguments[position]
        if word.startswith("-") and len(word) > 1:
            position += 2 if word in _XXD_VALUES else 1
            continue
        operands.append(word)
        position += 1
    return written("xxd", operands[1], operands[:1]) if len(operands) >= 2 else READ


def _yq(call: Call) -> Verdict:
    position = 1
    while position < len(call.words):
        if not call.words[position].startswith("-") or call.words[position] in ("-", "--"):
            position += 1
            continue
        options, position = parse_options(call.words, position, _YQ_VALUES)
        if any(name in ("-i", "--inplace", "--in-place") for name, _value in options):
            return verdict(2, "yq edits files in place without a backup")
    return READ


def _mlr(call: Call) -> Verdict:
    if "-I" in call.words[1:]:
        return verdict(2, f"{call.program} -I edits files in place without a backup")
    return READ


RULES: dict[str, Callable[[Call], Verdict]] = {
    **dict.fromkeys(_OUTPUT_OPTIONS, _output_option),
    "uniq": _uniq,
    "xxd": _xxd,
    "yq": _yq,
    "mlr": _mlr,
    "miller": _mlr,
}
