"""Whether a name (a variable, a JSON key, a flag) names a secret: strongly (DB_PASSWORD, apiKey), weakly
(pwd, auth, sig) or not at all (PASSWORD_FILE, --no-password). Linear in the name.
"""

from __future__ import annotations

import functools
import re

# Searched in the lower-cased name, so compounds match: DB_PASSWORD, MYSQL_ROOT_PASSWORD, PGPASSWORD,
# client_secret, GITHUB_TOKEN, apiKey, x-api-key, AWS_SECRET_ACCESS_KEY. `token` but not `tokens`,
# `tokenizer`, `tokenise` (max_tokens is a number, not a secret). Alternatives of literals with bounded
# optional separators: constant work per start position.
_SECRET_WORD = re.compile(
    r"password|passwd|passphrase|secret|credential|token(?!s|i[sz])|masterauth"
    r"|(?:api|access|private|account|auth|signing|master|encryption|session|client|license|shared[_.-]?access)"
    r"[_.-]?key"
)
# fmt: off
# Short words that name a secret only as a whole segment of the name: MYSQL_PWD, DB_PASS, --pw, `auth`
# (docker config.json), `sig` (Azure SAS), openssl's -passin/-passout, curl's --oauth2-bearer. As substrings
# they are everywhere, and even as a whole name they are weak evidence (`auth: handle expiry` is a commit
# message, `the bearer: a courier` prose).
_WEAK_SECRET_SEGMENTS = frozenset(
    {"pwd", "pw", "pass", "passin", "passout", "auth", "sig", "signature", "creds", "bearer"}
)
# A segment ending in "pass" is a password (SSHPASS, storepass, keypass, requirepass), except these words.
_PASS_WORDS = frozenset({"bypass", "compass", "encompass", "overpass", "underpass", "trespass", "surpass"})
# A name ending like this names *where* a secret is or what kind it is, not the secret itself:
# PASSWORD_FILE, --password-stdin, secretName, TOKEN_URL, token_type, --password-command,
# `-o PasswordAuthentication=no`.
_NOT_SECRET_LAST_SEGMENTS = frozenset(
    {"file", "files", "path", "dir", "stdin", "fd", "prompt", "cmd", "command", "helper", "url", "uri",
     "endpoint", "name", "ref", "type", "length", "len", "ttl", "expiry", "expires", "policy", "hint",
     "authentication", "env", "var"}  # `secret_env`, `PASSWORD_VAR`: the name of a variable, not its value
)
# --no-password, --ask-pass, --ask-become-pass are switches without a value.
_NOT_SECRET_FIRST_SEGMENTS = frozenset({"no", "ask"})
# `token.py:12:` (compiler or grep output) is a file name followed by a line number.
_FILE_EXTENSIONS = frozenset(
    {"py", "pyc", "js", "mjs", "ts", "tsx", "jsx", "go", "rs", "rb", "java", "kt", "c", "h", "cc", "cpp", "cs",
     "php", "sh", "bash", "txt", "md", "rst", "html", "htm", "css", "json", "yaml", "yml", "toml", "ini", "cfg",
     "conf", "xml", "log", "lock", "pem", "key", "crt", "csv", "sql", "tmpl", "j2", "tf"}
)
# fmt: on
# The shell's own working-directory variables are not passwords (env output, `PWD=/tmp cmd`).
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
# Header names whose whole value is a credential when they are dict keys ({"Authorization": "Basic …"}).
SECRET_HEADER_NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
# Splits NAME_LIKE_THIS, nameLikeThis, APIKey, --name-like-this into words. Each alternative consumes at
# least one character and backtracks at most one (the uppercase run before a lowercase letter): linear.
_NAME_SEGMENT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
NOT_SECRET, WEAK, STRONG = 0, 1, 2


@functools.lru_cache(maxsize=4096)  # argument and variable names repeat on every call
def secret_name_strength(name: str) -> int:
    """STRONG for names that say "secret" (DB_PASSWORD, apiKey), WEAK for short ones (pwd, auth, sig)."""
    if name in _NOT_SECRET_NAMES:
        return NOT_SECRET
    stem, dot, extension = name.rpartition(".")
    if dot and stem and extension.lower() in _FILE_EXTENSIONS:
        return NOT_SECRET
    segments = [segment.lower() for segment in _NAME_SEGMENT.findall(name)]
    if not segments or segments[-1] in _NOT_SECRET_LAST_SEGMENTS or segments[0] in _NOT_SECRET_FIRST_SEGMENTS:
        return NOT_SECRET
    if _SECRET_WORD.search(name.lower()) is not None:
        return STRONG
    if any(segment.endswith("pass") and len(segment) > 4 and segment not in _PASS_WORDS for segment in segments):
        return STRONG
    if any(segment in _WEAK_SECRET_SEGMENTS for segment in segments):
        return WEAK
    return NOT_SECRET


def is_secret_name(name: str) -> bool:
    return secret_name_strength(name) != NOT_SECRET
