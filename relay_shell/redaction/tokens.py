"""Credentials recognised by their form wherever they appear: provider token formats (AWS, GitHub, GitLab, Slack,
Stripe, OpenAI, Google, JWT, …), bare bearer tokens, and Authorization headers (HTTP dumps, curl -H, JSON header
maps), whose scheme is kept so the log says what kind of credential it was."""

from __future__ import annotations

from relay_shell.redaction.pattern_compiler import compile_pattern
from relay_shell.redaction.values import REDACTED, keep_code

# One alternation, bounded on both sides by "not a token character": an attempt starts only at the start
# of a run, each alternative is a fixed prefix plus a possessive or fixed-length run (JWT and SendGrid span
# at most three dot-separated runs), and nothing after a run can make it retry: linear. The right-hand
# boundary also guarantees that a replacement never exposes the start of another token (idempotence).
_PROVIDER_TOKEN = compile_pattern(
    r"(?<![A-Za-z0-9_-])(?:"
    r"A(?:KIA|SIA)[A-Z0-9]{16}"  # AWS access key id
    r"|gh[pousr]_[A-Za-z0-9]{30,}+"  # GitHub classic, OAuth, user-to-server, server-to-server, refresh
    r"|github_pat_[A-Za-z0-9_]{30,}+"  # GitHub fine-grained
    r"|glpat-[A-Za-z0-9_-]{20,}+"  # GitLab personal access token
    r"|xox[abprs]-[A-Za-z0-9-]{10,}+"  # Slack
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}+"  # Stripe secret and restricted keys
    r"|sk-[A-Za-z0-9_-]{20,}+"  # OpenAI (sk-, sk-proj-) and Anthropic (sk-ant-)
    r"|AIza[A-Za-z0-9_-]{35}"  # Google API key
    r"|eyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+"  # JWT (header.payload.signature)
    r"|npm_[A-Za-z0-9]{30,}+"  # npm
    r"|pypi-[A-Za-z0-9_-]{40,}+"  # PyPI
    r"|hf_[A-Za-z0-9]{30,}+"  # Hugging Face
    r"|SG\.[A-Za-z0-9_-]{16,}+\.[A-Za-z0-9_-]{16,}+"  # SendGrid
    r"|SK[0-9a-f]{32}"  # Twilio API key
    r"|do[opr]_v1_[a-f0-9]{64}"  # DigitalOcean
    r"|hv[sb]\.[A-Za-z0-9_-]{20,}+"  # HashiCorp Vault
    r"|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"  # Shopify
    r")(?![A-Za-z0-9_-])"
)

# A bearer token outside an Authorization header. Needs a digit (within the token: the lazy scan stops
# at the token's end) and 8+ characters, so "the bearer of this letter" is prose.
_BEARER_TOKEN = compile_pattern(r"(?i)(?<![\w-])(bearer[ \t]++)(?=[\w.~+/=-]*?[0-9])[\w.~+/=-]{8,}+")


def redact_provider_tokens(text: str) -> str:
    text = _PROVIDER_TOKEN.sub(REDACTED, text)
    if "bearer" not in text.lower():
        return text
    return _BEARER_TOKEN.sub(lambda match: f"{match.group(1)}{REDACTED}", text)


# Anchored at the literal header name (lookbehind: not inside a longer word); the separator is bounded;
# the scheme is kept so the log says what kind of credential it was. The credential is one possessive
# token with nothing after it, so an attempt cannot fail after scanning. Needs ':' or '=': "Authorization"
# in prose is left alone.
# Schemes with comma-separated parameters (`Digest username="u", response="…"`, `AWS4-HMAC-SHA256 Credential=…,
# Signature=…`): the whole list is the credential. Each parameter starts with a name and '=', its value is quoted
# (JSON-escaped quotes too) or a run without separators; every loop is possessive, so the list is read once.
_AUTHORIZATION_PARAMETERS = (
    r"(?:[\w-]++=(?:\"(?:[^\"\\\n]|\\.)*+\"?|\\\"(?:[^\"\\\n]|\\[^\"\n])*+(?:\\\")?|[^\s,\"'\\=][^\s,\"'\\]*+)"
    r"(?:[ \t]*+,[ \t]*+(?=[\w-]++=))?)+"
)
_AUTHORIZATION_HEADER = compile_pattern(
    r"(?i)(?<![\w-])((?:proxy-)?authorization\\?[\"']?[ \t]*+[:=][ \t]*+\\?[\"']?"
    r"(?:(?:bearer|basic|digest|token|negotiate|ntlm|bot|oauth|apikey|aws4-hmac-sha256|sso-key|ssws|jwt|key|hoba"
    r"|mutual|vapid|scram-sha-256|scram-sha-1)[ \t]++)?)"
    r"(" + _AUTHORIZATION_PARAMETERS + r"|[^\s\"'\\]++)"
)


def redact_authorization_headers(text: str) -> str:
    if "authorization" not in text.lower():  # substring search is far cheaper than a regex scan
        return text
    return _AUTHORIZATION_HEADER.sub(lambda match: f"{match.group(1)}{keep_code(match.group(2))}", text)
