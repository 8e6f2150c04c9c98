"""SQL, Redis and MongoDB text, and the database clients that run it (`psql -c`, `mysql -e`, `sqlite3 db 'SQL'`,
SQL on stdin or in a here-document, `redis-cli FLUSHALL`, `mongosh --eval`).

DROP DATABASE/SCHEMA/TABLE, TRUNCATE, and DELETE or UPDATE without WHERE are tier 3; other writes 2; reads 0; a
statement we do not know is 1. Statements are split on `;` outside quotes and comments in one forward scan.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy.calls import Call, Verdict, verdict
from relay_shell.policy.command_languages import client_commands
from relay_shell.policy.verbs import cli_verdict
from relay_shell.policy.vocabulary import words

_READ = words("select show describe desc explain values table use pragma begin start commit rollback savepoint release")
_READ |= words(
    "set listen unlisten fetch close declare with \\d \\dt \\l \\c \\dn \\df \\dv \\du \\x \\q .tables .schema"
)
_READ |= words(".databases .indexes .headers .mode .quit .exit .help \\conninfo \\timing \\? \\h help status")
_WRITE = words(
    "insert update delete create alter grant revoke replace merge upsert load rename comment refresh call do execute"
    " import install copy source \\i \\ir \\include .read .import .restore lock cluster reindex vacuum analyze"
    " attach detach optimize repair kill shutdown flush purge reset"
)
_DESTROYING_DROPS = words("database schema table tables tablespace owned keyspace collection")
# Characters that neither quote, comment nor end a statement: skipped in one step.
_PLAIN = re.compile(r"[^'\"`\-#/$;\n\\.\s]+")
_WORD = re.compile(r"[\\.]?[A-Za-z_][A-Za-z_0-9]*")
_WHERE = re.compile(r"\bwhere\b", re.IGNORECASE)
_DROP_COLUMN = re.compile(r"\bdrop\s{1,8}(?:column\b|constraint\b)?", re.IGNORECASE)


def statements(text: str) -> list[str]:
    """Split on `;` outside quotes, comments and dollar-quoted bodies, comments left out. Linear: the index only
    moves forward and every character is copied at most once."""
    parts: list[str] = []
    pieces: list[str] = []  # the current statement, comments left out
    start = index = 0  # text[start:index] is the current piece
    length = len(text)
    line_command: bool | None = None  # a psql `\d` or sqlite `.tables` line: it ends at the newline
    while index < length:
        char = text[index]
        if line_command is None and not char.isspace():
            line_command = char in "\\."
        plain = _PLAIN.match(text, index)
        if plain is not None:
            index = plain.end()
            continue
        if char in "'\"`":
            end = text.find(char, index + 1)
            index = length if end < 0 else end + 1
            continue
        comment_end = -1
        if (char == "-" and text.startswith("--", index)) or char == "#":
            comment_end = text.find("\n", index)
            comment_end = length if comment_end < 0 else comment_end
        elif char == "/" and text.startswith("/*", index):
            comment_end = text.find("*/", index + 2)
            comment_end = length if comment_end < 0 else comment_end + 2
        if comment_end >= 0:
            pieces.append(text[start:index])
            start = index = comment_end
            continue
        if char == "$" and text.startswith("$$", index):
            end = text.find("$$", index + 2)
            index = length if end < 0 else end + 2
            continue
        if char == ";" or (char == "\n" and line_command):
            pieces.append(text[start:index])
            parts.append("".join(pieces))
            pieces = []
            start = index + 1
            line_command = None
        index += 1
    pieces.append(text[start:])
    parts.append("".join(pieces))
    return [part for part in (part.strip() for part in parts) if part]


def statement_tier(statement: str) -> tuple[int, str]:
    lowered = statement.lower()
    found = _WORD.findall(lowered[:200])
    if not found:
        return 0, "empty statement"
    keyword = found[0]
    second = found[1] if len(found) > 1 else ""
    if keyword == "explain" and "analyze" in found[1:3]:
        rest = lowered.split("analyze", 1)[1]
        return statement_tier(rest) if rest.strip() else (0, "explain")
    if keyword == "drop":
        if second in _DESTROYING_DROPS or (second == "if" and "exists" in found[2:3]):
            return 3, "SQL DROP destroys a database, schema or table"
        return 2, f"SQL DROP {second.upper()}"
    if keyword == "truncate":
        return 3, "SQL TRUNCATE empties a table"
    if keyword in ("delete", "update") and not _WHERE.search(lowered):
        return 3, f"SQL {keyword.upper()} without WHERE changes every row"
    if keyword == "alter" and _DROP_COLUMN.search(lowered):
        return 3, "SQL ALTER … DROP destroys a column's data"
    if keyword == "with":
        writes = [word for word in found if word in ("insert", "update", "delete", "merge")]
        return (2, "SQL WITH … writes") if writes else (0, "SQL query")
    if keyword == "select" and " into " in lowered and " from " in lowered:
        return 2, "SQL SELECT INTO creates a table"
    if keyword == "pragma" and "=" in lowered:
        return 2, "PRAGMA changes the database"
    if keyword == "set" and second in ("global", "persist"):
        return 2, "SET GLOBAL changes the server"
    if keyword == "copy":
        return (0, "COPY to stdout") if " to stdout" in lowered else (2, "COPY writes a table or a file")
    if keyword in _READ:
        return 0, "SQL read"
    if keyword in _WRITE:
        return 2, f"SQL {keyword.upper()} writes the database"
    return 1, f"SQL {keyword.upper()}"


def sql_tier(text: str) -> tuple[int, str]:
    best = (0, "SQL read")
    for statement in statements(text):
        found = statement_tier(statement)
        if found[0] > best[0]:
            best = found
            if best[0] == 3:
                break
    return best


_REDIS_READ = words(
    "get mget keys scan info ping exists ttl pttl type strlen hget hgetall hkeys hvals hlen hexists lrange llen"
    " lindex smembers scard sismember zrange zrangebyscore zcard zscore dbsize time echo monitor slowlog memory"
    " object xrange xlen xinfo pubsub subscribe psubscribe randomkey lastsave role help command"
)


def redis_tier(text: str) -> tuple[int, str]:
    best = (0, "Redis read")
    for line in text.splitlines() or [text]:
        command = line.split()[:1]
        if not command:
            continue
        name = command[0].lower()
        if name in ("flushall", "flushdb"):
            return 3, f"Redis {name.upper()} deletes every key"
        tier = 0 if name in _REDIS_READ else 2
        if tier > best[0]:
            best = (tier, f"Redis {name.upper()} writes")
    return best


_MONGO_DESTROY = re.compile(r"\.(?:dropDatabase|drop)\s{0,8}\(|\.(?:deleteMany|remove)\s{0,8}\(\s{0,8}\{\s{0,8}\}")
_MONGO_WRITE = re.compile(
    r"\.(?:insert\w*+|update\w*+|delete\w*+|remove|replaceOne|findOneAnd\w++|createCollection|createIndex\w*+|dropIndex\w*+"
    r"|renameCollection|bulkWrite|createUser|dropUser|grant\w*+|revoke\w*+|shutdownServer|aggregate)\s{0,8}\("
)


def mongo_tier(text: str) -> tuple[int, str]:
    if _MONGO_DESTROY.search(text):
        return 3, "MongoDB drop or delete of every document"
    if _MONGO_WRITE.search(text):
        return 2, "MongoDB write"
    return 0, "MongoDB read"


# Where each client takes SQL on its command line.
_SQL_OPTIONS = words("-c --command -e --execute -q --query -Q --sql")
_FILE_OPTIONS = words("-f --file -i --input --init-file --source")


def _database_client(call: Call) -> Verdict:
    sql = [call.value(option) for option in _SQL_OPTIONS if call.value(option)]
    if call.program == "trdsql" and call.operands:
        sql.append(call.operands[-1])
    elif call.program in ("sqlite3", "sqlite", "duckdb", "cockroach") and len(call.operands) >= 2:
        sql += [word for word in call.operands[1:] if " " in word or word.endswith(";") or word.startswith(".")]
    sql += [value for option in ("-cmd",) if (value := call.value(option))]
    best = verdict(1, f"{call.program}: interactive database session")
    if any(call.value(option) is not None for option in _FILE_OPTIONS if option != "-i" or call.program != "mysql"):
        best = verdict(2, f"{call.program} runs SQL from a file")
    elif sql:
        best = verdict(0, "SQL read")
    for text in sql:
        tier, reason = sql_tier(text or "")
        if tier > best.tier or (best.tier == 0 and tier):
            best = verdict(tier, reason)
    shell = tuple(command for text in sql for command in client_commands(text or ""))
    if shell:
        return Verdict(max(2, best.tier), f"{call.program} runs shell commands (.shell, system)", shell)
    return best


def _redis_cli(call: Call) -> Verdict:
    index = 1
    words_ = call.words
    valued = ("-h", "-p", "-a", "-n", "-u", "-s", "-r", "-i", "--user", "--pass", "--rdb", "-x", "--tls-cert")
    while index < len(words_) and words_[index].startswith("-"):
        index += 2 if words_[index] in valued else 1
    if call.has_exact("--scan", "--bigkeys", "--memkeys", "--stat", "--latency", "--hotkeys"):
        return verdict(0, "redis-cli reads")
    if index >= len(words_):
        return verdict(1, "redis-cli: interactive session")
    tier, reason = redis_tier(" ".join(words_[index:]))
    known = words_[index].lower() in _REDIS_READ or tier
    return verdict(tier, reason) if known else verdict(1, f"redis-cli {words_[index]}")


def _mongo_shell(call: Call) -> Verdict:
    script = call.value("--eval")
    if script is None:
        return verdict(2 if call.operands and call.operands[-1].endswith(".js") else 1, f"{call.program} session")
    tier, reason = mongo_tier(script)
    return verdict(tier, reason)


def _mongorestore(call: Call) -> Verdict:
    if call.has("--drop"):
        return verdict(3, "mongorestore --drop drops collections first")
    return verdict(0 if call.has_exact("--dryRun") else 2, "mongorestore writes into a database")


def _pg_restore(call: Call) -> Verdict:
    if call.has_exact("-l", "--list"):
        return verdict(0, "lists an archive")
    if call.has("-c", "--clean"):
        return verdict(3, "pg_restore --clean drops objects first")
    return verdict(1 if call.value("-f", "--file") else 2, "pg_restore")


def _bq(call: Call) -> Verdict:
    if call.subcommand == "query":
        return max(
            (verdict(*sql_tier(text)) for text in call.operands[1:]),
            key=lambda found: found.tier,
            default=verdict(1, "bq query"),
        )
    return cli_verdict(call, verdict(1, "bq"))


def _dump(call: Call) -> Verdict:
    output = call.value("-f", "--file", "-r", "--result-file", "-o", "--out")
    return verdict(1 if output or call.program == "mongodump" else 0, f"{call.program} dumps a database")


RULES: dict[str, Callable[[Call], Verdict]] = {
    name: _database_client
    for name in (
        "psql",
        "mysql",
        "mariadb",
        "sqlite3",
        "sqlite",
        "clickhouse-client",
        "clickhouse",
        "sqlcmd",
        "cqlsh",
        "duckdb",
        "mycli",
        "pgcli",
        "usql",
        "isql",
        "snowsql",
        "trdsql",
        "cockroach",
    )
}
RULES.update(
    {
        "bq": _bq,
        "redis-cli": _redis_cli,
        "valkey-cli": _redis_cli,
        "mongo": _mongo_shell,
        "mongosh": _mongo_shell,
        "mongorestore": _mongorestore,
        "pg_restore": _pg_restore,
        "pg_dump": _dump,
        "pg_dumpall": _dump,
        "mysqldump": _dump,
        "mariadb-dump": _dump,
        "mongodump": _dump,
        "mongoexport": _dump,
    }
)
