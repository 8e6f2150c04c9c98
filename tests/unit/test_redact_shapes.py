"""Redaction, table-driven (issue 17): secret shapes by family (provider prefixes, URL userinfo, webhook paths,
auth headers, CLI flags, env keys and values, JSON/YAML bodies, PowerShell, resource URIs), look-alikes that
must stay visible (commit hashes, UUIDs, checksums, digests), the env overlay's keys, and linear time on 1 MiB
inputs. The speed itself is measured in benchmarks/bench_redact.py."""

from __future__ import annotations

import time

import pytest

from relay_shell.redaction.redact import redact, redact_value

# Tokens are assembled at run time so this file does not look like a credential leak to secret scanners.
ALNUM = "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ"
HEX = "0123456789abcdef"
GITHUB = "ghp_" + ALNUM
SLACK_PATH = "T0" + "1ABCDEF/B0" + "2GHIJKL/" + ALNUM[:24]
DISCORD_TOKEN = ALNUM + "-" + ALNUM[:30]
DIGEST_RESPONSE = HEX * 2
SIGNATURE = HEX * 4

# (text, the secret that must disappear)
SECRETS: list[tuple[str, str]] = [
    # provider prefixes
    ("export GH=" + GITHUB, GITHUB),
    ("git clone https://x-access-token:" + GITHUB + "@github.com/o/r", GITHUB),
    ("aws configure set aws_access_key_id " + "AKIA" + "IOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
    ("key ASIA" + "Q3EGRWQ7ZXAMPLE1 used", "Q3EGRWQ7ZXAMPLE1"),
    ("token github_pat_11ABCDEFG0" + ALNUM + "_" + ALNUM[:22], ALNUM[:22]),
    ("glpat-" + ALNUM[:20] + " in ci", ALNUM[:20]),
    ("xoxb-1234567890-0987654321-" + ALNUM[:24], ALNUM[:24]),
    ("stripe sk_live_" + ALNUM[:24], ALNUM[:24]),
    ("rk_test_" + ALNUM[:24], ALNUM[:24]),
    ("OPENAI sk-proj-" + ALNUM + ALNUM[:12], ALNUM + ALNUM[:12]),
    ("sk-ant-api03-" + ALNUM + ALNUM + "-" + ALNUM[:20] + "AA", ALNUM[:20] + "AA"),
    ("maps AIza" + "SyA" + ALNUM[:32], ALNUM[:32]),
    ("npm_" + ALNUM, ALNUM),
    ("pypi-AgEIcHlwaS5vcmc" + ALNUM + ALNUM, ALNUM + ALNUM),
    ("hf_" + ALNUM[:34], ALNUM[:34]),
    ("SG." + ALNUM[:22] + "." + ALNUM + ALNUM[:7], ALNUM + ALNUM[:7]),
    ("dop_v1_" + HEX * 4, HEX * 4),
    ("vault hvs." + ALNUM[:24], ALNUM[:24]),
    ("shpat_" + HEX * 2, HEX * 2),
    # URL userinfo
    ("psql postgres://app:pgS3cret@db:5432/app", "pgS3cret"),
    ("mysql://root:myS3cret@127.0.0.1/db", "myS3cret"),
    ("redis://:redisS3cret@cache:6379/0", "redisS3cret"),
    ("amqp://guest:amqpS3cret@mq//", "amqpS3cret"),
    ("mongodb+srv://u:mongoS3cret@cluster0.example.net/db", "mongoS3cret"),
    ("curl https://bob:httpS3cret@example.com/x", "httpS3cret"),
    ("ftp://anon:ftpS3cret@files.example.com/pub", "ftpS3cret"),
    # credentials in a resource URI's path
    ("relay-shell://inventory/deploy:invS3cret@web1", "invS3cret"),
    ("relay-shell://inventory/deploy%3AencS3cret%40web1", "encS3cret"),
    ("https://example.com/repo/user:pathS3cret@host/x", "pathS3cret"),
    # webhook URLs whose path is the secret
    ("curl -X POST https://hooks.slack.com/services/" + SLACK_PATH + " -d '{}'", ALNUM[:24]),
    ("https://hooks.slack.com/workflows/" + SLACK_PATH, ALNUM[:24]),
    ("https://hooks.slack.com/triggers/" + SLACK_PATH, ALNUM[:24]),
    ("https://discord.com/api/webhooks/123456789012345678/" + DISCORD_TOKEN, DISCORD_TOKEN),
    ("https://discordapp.com/api/webhooks/123456789012345678/" + DISCORD_TOKEN, DISCORD_TOKEN),
    ("https://canary.discord.com/api/v10/webhooks/123456789012345678/" + DISCORD_TOKEN, DISCORD_TOKEN),
    ("https://contoso.webhook.office.com/webhookb2/" + ALNUM + "@x/IncomingWebhook/" + HEX * 2, HEX * 2),
    ("https://outlook.office.com/webhook/" + ALNUM + "/IncomingWebhook/" + HEX * 2, HEX * 2),
    ("https://chat.googleapis.com/v1/spaces/AAAA/messages?key=" + ALNUM + "&token=" + HEX * 2, HEX * 2),
    ("https://hooks.zapier.com/hooks/catch/123456/" + ALNUM[:10] + "/", ALNUM[:10]),
    ("https://maker.ifttt.com/trigger/door/with/key/" + ALNUM[:22], ALNUM[:22]),
    ("https://chat.example.com/hooks/" + ALNUM[:26], ALNUM[:26]),
    # auth headers
    ("curl -H 'Authorization: Bearer " + HEX * 2 + "' https://api", HEX * 2),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    (
        'curl -H \'Authorization: Digest username="bob", realm="r", nonce="n", response="' + DIGEST_RESPONSE + "\"'",
        DIGEST_RESPONSE,
    ),
    ('{"Authorization": "Digest username=\\"bob\\", response=\\"' + DIGEST_RESPONSE + '\\""}', DIGEST_RESPONSE),
    (
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=" + SIGNATURE,
        SIGNATURE,
    ),
    ("Proxy-Authorization: Basic cHJveHk6c2VjcmV0", "cHJveHk6c2VjcmV0"),
    ("Authorization: token " + HEX * 2, HEX * 2),
    ('{"headers": {"Authorization": "Bearer ' + HEX * 2 + '"}}', HEX * 2),
    # CLI flags
    ("mysql -u root -pmyPassw0rd db", "myPassw0rd"),
    ("sshpass -p sshS3cret ssh -p 2222 host", "sshS3cret"),
    ("redis-cli -a redisPw0rd ping", "redisPw0rd"),
    ("curl -u alice:curlS3cret https://x", "curlS3cret"),
    ("curl --oauth2-bearer oauthT0ken" + HEX + " https://api", "oauthT0ken" + HEX),
    ("curl --oauth2-bearer=oauthT0ken" + HEX + " https://api", "oauthT0ken" + HEX),
    ("app --bearer bearerT0ken", "bearerT0ken"),
    ("docker login -u me -p dockerS3cret registry", "dockerS3cret"),
    ("app --password flagS3cret --verbose", "flagS3cret"),
    ("app --token=flagT0ken", "flagT0ken"),
    ("app --api-key apiS3cret", "apiS3cret"),
    ("app --client-secret csS3cret", "csS3cret"),
    ("ldapsearch -x -w ldapS3cret -b dc=x", "ldapS3cret"),
    ("zip -P zipS3cret out.zip f", "zipS3cret"),
    ("ssh-keygen -N keyS3cret -f id", "keyS3cret"),
    ("openssl enc -aes256 -k encS3cret -in f", "encS3cret"),
    # env keys and values
    ("DB_PASSWORD=envS3cret ./run", "envS3cret"),
    ("export API_KEY=envApiKey1", "envApiKey1"),
    ("MYSQL_PWD=pwdS3cret mysql", "pwdS3cret"),
    ("env GITHUB_TOKEN=ghEnvT0ken gh pr list", "ghEnvT0ken"),
    # JSON / YAML bodies
    ('{"password": "jsonS3cret", "user": "bob"}', "jsonS3cret"),
    ('{"client_secret":"jsonCs1"}', "jsonCs1"),
    ("password: yamlS3cret\nuser: bob", "yamlS3cret"),
    ("  api_token: yamlT0ken", "yamlT0ken"),
    ("<password>xmlS3cret</password>", "xmlS3cret"),
    # PowerShell and Windows
    ("$pw = ConvertTo-SecureString 'psS3cret!' -AsPlainText -Force", "psS3cret!"),
    ('ConvertTo-SecureString -String "psS3cret2" -AsPlainText -Force', "psS3cret2"),
    ("ConvertTo-SecureString -AsPlainText -Force -String psS3cret3", "psS3cret3"),
    ("$env:API_TOKEN = 'psEnvT0ken'", "psEnvT0ken"),
    ("New-LocalUser bob -Password psPassw0rd", "psPassw0rd"),
    ("net user alice winS3cret /add", "winS3cret"),
    # private keys
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXk"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "MIIEpAIBAAKCAQEA"),
    ("machine api.example.com login bob password netrcS3cret", "netrcS3cret"),
]

LOOK_ALIKES = [
    "git show 3f2a9c1e5b7d4e8f9a0b1c2d3e4f5a6b7c8d9e0f",
    "git log --oneline 3f2a9c1",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  release.tar.gz",
    "sha256sum -c SHA256SUMS",
    "md5: d41d8cd98f00b204e9800998ecf8427e",
    "docker pull nginx@sha256:0d17b565c37bcbd895e9d92315a05c1c3c9a29f762b011a10c54a66cd53c9b31",
    "docker pull https://registry.example.com/app:1.2@sha256:abcd",
    "ssh-keygen -lf ~/.ssh/id_ed25519.pub",
    "mysql -p -h db appdb",
    "ssh -p 2222 deploy@web1",
    "curl -u alice https://example.com",
    "https://user@example.com/path",
    "git@github.com:org/repo.git",
    "postgres://db.example.com:5432/app",
    "https://example.com/hooks/short",
    "https://hooks.example.com/page",
    "https://discord.com/channels/123456789/987654321",
    "curl https://hooks.slack.com",
    "kubectl get secret app-tls -o yaml",
    "aws secretsmanager get-secret-value --secret-id prod/db",
    "generate max_tokens=100 tokenizer=bert",
    "pytest -k test_password_reset",
    "app --password-file /run/secrets/db",
    "PASSWORD_FILE=/run/secrets/db ./run",
    "app --no-password --ask-pass",
    "export TOKEN_URL=https://auth.example.com/token",
    "the bearer of this letter",
    "bearer: the courier who brought it",
    "curl --oauth2-bearer-file /run/secrets/t https://api",
    "Authorization header missing in the request",
    "echo $PASSWORD",
    "PWD=/tmp OLDPWD=/home/bob",
    "ConvertTo-SecureString $plain -AsPlainText -Force",
    "Get-Credential -UserName bob",
    "net user alice",
    "net user alice /delete",
    "chown bob:staff /srv/app",
    "relay-shell://inventory/web1",
    "relay-shell://inventory/deploy@web1",
    "X-Request-Id: 7f3a9c2e",
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_secret_shapes_are_redacted(text: str, secret: str) -> None:
    redacted = redact(text)
    assert secret not in redacted, redacted
    assert "[REDACTED" in redacted
    assert redact(redacted) == redacted  # idempotent


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_stay_visible(text: str) -> None:
    assert redact(text) == text


def test_the_tables_are_large() -> None:
    assert len(SECRETS) >= 60
    assert len(LOOK_ALIKES) >= 30


def test_an_env_overlay_key_that_is_a_token_is_redacted_and_no_entry_is_lost() -> None:
    overlay = {GITHUB: "1", "PLAIN": "2", "npm_" + ALNUM: "3"}
    redacted = redact_value({"env": overlay})
    assert isinstance(redacted, dict)
    env = redacted["env"]
    assert GITHUB not in str(env) and "npm_" + ALNUM not in str(env)
    assert len(env) == 3 and env["PLAIN"] == "2"


def test_an_oauth2_bearer_in_an_argv_is_redacted() -> None:
    argv = redact_value({"argv": ["curl", "--oauth2-bearer", "oauthT0ken" + HEX, "https://api"]})
    assert argv == {"argv": ["curl", "--oauth2-bearer", "[REDACTED]", "https://api"]}


def test_the_names_around_the_secret_stay() -> None:
    assert redact("https://hooks.slack.com/services/" + SLACK_PATH) == "https://hooks.slack.com/services/[REDACTED]"
    assert redact("relay-shell://inventory/deploy:x@web1") == "relay-shell://inventory/deploy:[REDACTED]@web1"
    assert redact('Authorization: Digest username="b", response="c"') == "Authorization: Digest [REDACTED]"
    assert redact("ConvertTo-SecureString 'pw' -AsPlainText") == "ConvertTo-SecureString '[REDACTED]' -AsPlainText"


@pytest.mark.parametrize(
    "unit",
    [
        "https://hooks.slack.com/services/",
        "https://a.b/hooks/" + "a" * 30,
        "relay-shell://inventory/" + "u:p@" * 3,
        "x://h/" + "a:b%40" * 4,
        "Authorization: Digest " + "a=b, " * 5,
        'Authorization: Digest a="' + "\\" * 3,
        "ConvertTo-SecureString -Force -AsPlainText ",
        "net user a b /add ",
        "/hooks/" + "webhooks/" * 3,
    ],
)
def test_megabyte_inputs_stay_linear(unit: str) -> None:
    # A guard against quadratic behaviour (minutes), with a wide margin; the real speed is in the benchmark.
    text = unit * (2**20 // len(unit))
    started = time.process_time()
    redact(text)
    redact_value({"env": {text[:4096]: text}})
    assert time.process_time() - started < 20
