"""The shell tokenizer reads text as sh and bash read it (adr/0025): here-document delimiters and bodies, every
redirection operator, quoting bash and sh read differently, case patterns, [[ ]], arithmetic, assignments."""

from __future__ import annotations

import time

from relay_shell.policy.shell_tokens import tokenize


def commands(text: str) -> list[list[str]]:
    return [command.words for command in tokenize(text, []).commands]


def nested(text: str) -> list[str]:
    found: list[str] = []
    tokenize(text, found)
    return found


def test_here_document_delimiters_are_found_exactly() -> None:
    # quote removal and nothing else: "EOF'" is EOF', -EOF is -EOF, E"O"F is EOF
    assert commands("cat <<\"EOF'\"\nEOF\nx\nEOF'\nls\n") == [["cat"], ["ls"]]
    assert commands("cat << -EOF\nEOF\n-EOF\nls\n") == [["cat"], ["ls"]]
    assert commands('cat <<E"O"F\nEOF\nls\n') == [["cat"], ["ls"]]
    # <<- strips leading tabs; a trailing space is not the delimiter
    assert commands("cat <<-EOF\n\tx\n\tEOF\nls\n") == [["cat"], ["ls"]]
    assert commands("cat <<EOF\nEOF \nls\nEOF\n") == [["cat"]]
    # two on one line, read in order
    tokens = tokenize("cat <<A; cat <<'B'\na\nA\nb\nB\nls\n", [])
    assert [command.heredoc for command in tokens.commands] == ["a\n", "b\n", None]


def test_unquoted_bodies_are_expanded_and_quoted_ones_are_not() -> None:
    assert nested("cat <<EOF\n'$(touch m)' `id`\nEOF\n") == ["touch m", "id"]
    assert nested("cat <<'EOF'\n$(touch m)\nEOF\n") == []
    assert nested("cat <<\\EOF\n$(touch m)\nEOF\n") == []


def test_a_substitution_is_read_by_the_shell_s_rules() -> None:
    # a `)` inside a here-document, a quoted string or a case pattern does not end $(…)
    assert commands("echo $(cat <<'EOF'\n)\nEOF\n); ls") == [["echo", "$(…)"], ["ls"]]
    assert nested('echo $(echo ")"); ls') == ['echo ")"']
    assert nested("x=$(case a in a) echo hi;; esac); ls") == ["case a in a) echo hi;; esac"]


def test_case_patterns_are_not_commands() -> None:
    assert commands("case $x in [wW]) wc ;; *) rm -r d ;; esac") == [
        ["case", "$x", "in"],
        ["wc"],
        ["rm", "-r", "d"],
        ["esac"],
    ]


def test_double_brackets_compare_without_redirecting() -> None:
    tokens = tokenize("[[ $a < $b && -n $c ]] && ls", [])
    assert tokens.commands[0].words == ["[[", "$a", "<", "$b", "&&", "-n", "$c", "]]"]
    assert tokens.commands[0].redirects == []
    assert tokens.commands[1].words == ["ls"]


def test_arithmetic_and_subshells_as_bash_tells_them_apart() -> None:
    tokens = tokenize("(( a[$(touch m)] )); echo $((1 + 2))", [])
    assert tokens.arithmetic == [" a[$(touch m)] ", "1 + 2"]
    assert commands("((ls); (id))") == [["ls"], ["id"]]


def test_every_redirection_operator() -> None:
    def redirects(text: str) -> list[tuple[str, str]]:
        return [pair for command in tokenize(text, []).commands for pair in command.redirects]

    assert redirects("echo x 1<>f") == [("<>", "f")]
    assert redirects("echo x >& f") == [(">&", "f")]
    assert redirects("echo x >&f 2>&1 >&- 3>&1-") == [(">&", "f")]
    assert redirects("echo x &>f &>>g >|h 9>i") == [("&>", "f"), ("&>>", "g"), (">|", "h"), (">", "i")]
    assert redirects("exec {fd}>f") == [(">", "f")]
    assert redirects("cat <<< word") == [("<<<", "word")]
    assert commands("cat <(ls) >(wc)") == [["cat", "/dev/fd/63", "/dev/fd/63"]]
    assert nested("cat <(ls) >(wc)") == ["ls", "wc"]


def test_ansi_c_quoting_is_read_both_ways() -> None:
    tokens = tokenize("$'\\x72\\x6d' -rf d", [])
    assert tokens.commands[0].words == ["rm", "-rf", "d"] and tokens.ansi_c
    posix = tokenize("echo $'\\''; touch m; echo '", [], ansi_c=False)
    assert posix.commands[0].words[0] == "echo" and ["touch", "m"] not in [c.words for c in posix.commands]
    bash = tokenize("echo $'\\''; touch m; echo '", [])
    assert ["touch", "m"] in [command.words for command in bash.commands]


def test_assignments_are_kept_and_only_unquoted_ones_count() -> None:
    tokens = tokenize("A=1 B=$(x) cmd; 'C=2' cmd; while D= read -r x; do :; done", [])
    first, second, loop = tokens.commands[0], tokens.commands[1], tokens.commands[2]
    assert first.words == ["cmd"] and first.assignments == [("A", "1", False), ("B", "$(…)", True)]
    assert second.words == ["C=2", "cmd"] and second.assignments is None
    assert loop.words == ["while", "read", "-r", "x"] and loop.assignments == [("D", "", False)]
    assert tokenize("a=(1 $(ls) 3)", []).commands[0].assignments == [("a", "(1 $(ls) 3)", True)]


def test_an_unclosed_quote_leaves_its_text_to_be_read_as_commands() -> None:
    assert tokenize("echo 'abc", []).unterminated == ["abc"]
    assert tokenize("'; rm -rf d", []).unterminated == ["; rm -rf d"]


def test_failed_arithmetic_scans_stay_linear() -> None:
    started = time.process_time()
    tokenize("((" * 200_000, [])
    tokenize("$((" * 100_000, [])
    assert time.process_time() - started < 10
