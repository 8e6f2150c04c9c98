"""relay_shell.redaction: which secrets disappear (and which names stay), what ordinary text is left alone,
redact_value on JSON-like values, idempotence, and linear time on adversarial megabytes."""

from __future__ import annotations

import random
import time

import pytest

from relay_shell.redaction.redact import REDACTED, redact, redact_value

# Provider tokens are assembled at run time so this file does not itself look like it leaks credentials to
# secret scanners. Each has the real shape (prefix, alphabet, length).
ALNUM = "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ"  # 36 characters
HEX = "0123456789abcdef"
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SESSION_KEY_ID = "ASIA" + "Q3EGRWQ7ZXAMPLE1"
GITHUB_CLASSIC = "ghp_" + ALNUM
GITHUB_FINE_GRAINED = "github_pat_" + "11ABCDEFG0" + ALNUM + "_" + ALNUM[:22]
GITLAB = "glpat-" + ALNUM[:20]
SLACK = "xoxb-" + "1234567890-0987654321-" + ALNUM[:24]
STRIPE = "sk_live_" + ALNUM[:24]
STRIPE_TEST = "sk_test_" + ALNUM[:24]
STRIPE_RESTRICTED = "rk_live_" + ALNUM[:24]
OPENAI = "sk-proj-" + ALNUM + ALNUM[:12]
OPENAI_LEGACY = "sk-" + ALNUM + ALNUM[:12]
ANTHROPIC = "sk-ant-api03-" + ALNUM + ALNUM + "-" + ALNUM[:20] + "AA"
GOOGLE = "AIza" + "SyA" + ALNUM[:32]
JWT = (
    "eyJ"
    + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    + ".eyJ"
    + "zdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
NPM = "npm_" + ALNUM
PYPI = "pypi-" + "AgEIcHlwaS5vcmc" + ALNUM + ALNUM
HUGGING_FACE = "hf_" + ALNUM[:34]
SENDGRID = "SG." + ALNUM[:22] + "." + ALNUM + ALNUM[:7]
TWILIO = "SK" + HEX * 2
DIGITALOCEAN = "dop_v1_" + HEX * 4
PROVIDER_TOKENS = [
    AWS_KEY_ID,
    AWS_SESSION_KEY_ID,
    GITHUB_CLASSIC,
    "gho_" + ALNUM,
    "ghu_" + ALNUM,
    "ghs_" + ALNUM,
    "ghr_" + ALNUM,
    GITHUB_FINE_GRAINED,
    GITLAB,
    SLACK,
    STRIPE,
    STRIPE_TEST,
    STRIPE_RESTRICTED,
    OPENAI,
    OPENAI_LEGACY,
    ANTHROPIC,
    GOOGLE,
    JWT,
    NPM,
    PYPI,
    HUGGING_FACE,
    SENDGRID,
    TWILIO,
    DIGITALOCEAN,
]

# (text, secrets that must be absent from the output, text that must still be present)
SECRET_CASES = [
    # KEY=value and key: value, compound names
    ("PASSWORD=hunter2 ./run", "hunter2", ("PASSWORD=", "./run")),
    ("DB_PASSWORD=hunter2 ./run", "hunter2", "DB_PASSWORD="),
    ("MYSQL_ROOT_PASSWORD=s3cr3t docker-entrypoint.sh mysqld", "s3cr3t", ("MYSQL_ROOT_PASSWORD=", "mysqld")),
    ("PGPASSWORD=pgs3cret psql -h db", "pgs3cret", ("PGPASSWORD=", "psql -h db")),
    ("api_key: abc123xyz", "abc123xyz", "api_key: "),
    ("apiKey=abc123xyz", "abc123xyz", "apiKey="),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY aws s3 ls", "wJalrXUtnFEMI", "aws s3 ls"),
    ("client_secret=cs-0123abc", "cs-0123abc", "client_secret="),
    ("GITHUB_TOKEN=gt-0123abc git push", "gt-0123abc", ("GITHUB_TOKEN=", "git push")),
    ("auth_token=at-123 access_token=at-456 refresh_token=rt-789", ("at-123", "at-456", "rt-789"), "refresh_token="),
    ("passwd=pw-000", "pw-000", "passwd="),
    ("curl 'https://x.example/login?user=bob&pwd=pw-111'", "pw-111", ("user=bob", "pwd=")),
    ("private_key=pk-222 credentials=cred-333", ("pk-222", "cred-333"), ("private_key=", "credentials=")),
    ("curl -H 'x-api-key: xak-444' https://api.example", "xak-444", "x-api-key: "),
    ("MYSQL_PWD=mpw-555 mysql", "mpw-555", "MYSQL_PWD="),
    ("DB_PASS=dbp-666", "dbp-666", "DB_PASS="),
    ('PASSWORD="a b c" ./run', "a b c", ('PASSWORD="', "./run")),
    ("PASSWORD='a b c' ./run", "a b c", "PASSWORD='"),
    ("export TOKEN=tok-777", "tok-777", "export TOKEN="),
    # adr/0003 "Code in a secret's place": an unquoted `$(openssl rand …)` is code the shell runs and is kept
    # (tests/unit/test_redact_code.py); in single quotes it is data, a secret's text.
    ("export SECRET_KEY='$(openssl rand -hex 32)'", "openssl rand", "SECRET_KEY="),
    ("curl 'https://api.example/v1?token=qt-888&api_key=qk-999&page=2'", ("qt-888", "qk-999"), "&page=2"),
    ("spring.datasource.password=sp-1", "sp-1", "spring.datasource.password="),
    ("kubectl create secret generic db --from-literal=password=kl-1", "kl-1", "--from-literal=password="),
    ("docker run -e API_TOKEN=dr-1 img", "dr-1", ("API_TOKEN=", " img")),
    ("Server=db;User Id=sa;Password=P@ss-1;Encrypt=true", "P@ss-1", ("Password=", ";Encrypt=true")),
    ("AccountName=a;AccountKey=abc/def+ghi==;EndpointSuffix=core.windows.net", "abc/def+ghi==", "AccountKey="),
    ("SharedAccessSignature=sv=2020-08-04&sig=sasSig123%3D", "sasSig123", "SharedAccessSignature="),
    ("token: ${{ secrets.DEPLOY_TOKEN }}", "secrets.DEPLOY_TOKEN", "token: "),
    ("db:\n  user: app\n  password: yp-123\n  host: db\n", "yp-123", ("user: app", "password: ", "host: db")),
    ("password = 'py-123'", "py-123", "password = "),
    ("'password' => 'php-123',", "php-123", "'password' => "),
    # JSON, including JSON inside a shell string
    ('{"password": "hunter2", "user": "bob"}', "hunter2", ('"password": ', '"user": "bob"')),
    ('{"apiKey":"ak\\"q-123","n":1}', "q-123", ('"apiKey":', '"n":1')),
    ("{'secret': 'sec-1'}", "sec-1", "'secret': "),
    ('curl -d "{\\"password\\": \\"hunter2\\"}" http://x', "hunter2", ('\\"password\\": ', "http://x")),
    ('{"client_secret":"cs-9","grant_type":"client_credentials"}', "cs-9", '"grant_type":"client_credentials"'),
    # other config shapes
    ("<password>mvn-1</password>", "mvn-1", "<password>"),
    ("machine api.heroku.com login me password hk-1", "hk-1", "login me password "),
    ("machine h\n  login me\n  password nrc-1\n", "nrc-1", "password "),
    ("git config --global github.token gc-1", "gc-1", "github.token "),
    ("npm config set //registry.npmjs.org/:_authToken npmc-1", "npmc-1", "_authToken "),
    ("aws configure set aws_secret_access_key awsc-1", "awsc-1", "aws_secret_access_key "),
    ("redis-cli CONFIG SET requirepass rcs-1", "rcs-1", "requirepass "),
    # Authorization headers and bearer tokens
    ("curl -H 'Authorization: Bearer abcdef0123456789xyz' http://h:9", "abcdef0123456789xyz", "Authorization: Bearer "),
    ('curl -H "Authorization: Basic dXNlcjpwYXNz" x', "dXNlcjpwYXNz", "Authorization: Basic "),
    ("Authorization: token gh-tok-1", "gh-tok-1", "Authorization: token "),
    ("Proxy-Authorization: Basic Zm9vOmJhcg==", "Zm9vOmJhcg==", "Proxy-Authorization: Basic "),
    ('{"Authorization": "Bearer jb-1"}', "jb-1", '"Authorization": "Bearer '),
    ("authorization: sk-live-raw-1", "sk-live-raw-1", "authorization: "),
    ("wget --header='Authorization: Bearer wg-1' https://x", "wg-1", "Authorization: Bearer "),
    ("use Bearer sbt-0123456789 to call", "sbt-0123456789", ("Bearer ", "to call")),
    ("curl -H 'PRIVATE-TOKEN: glt-1' https://gitlab", "glt-1", "PRIVATE-TOKEN: "),
    # CLI flags
    ("app --password pf-1 --verbose", "pf-1", ("--password ", "--verbose")),
    ("app --password=pf-2", "pf-2", "--password="),
    ("app --token tf-1", "tf-1", "--token "),
    ("app --api-key akf-1", "akf-1", "--api-key "),
    ("app --secret sf-1", "sf-1", "--secret "),
    ("app --client-secret csf-1", "csf-1", "--client-secret "),
    ("app --access-token atf-1", "atf-1", "--access-token "),
    ("app --auth-token authf-1", "authf-1", "--auth-token "),
    ("gpg --passphrase 'pp f-1' --batch", "pp f-1", ("--passphrase ", "--batch")),
    ("keytool -list -storepass ks-1 -keypass kp-1", ("ks-1", "kp-1"), ("-storepass ", "-keypass ")),
    ("openssl rsa -in k.pem -passin pass:os-1 -out k2.pem", "os-1", ("-passin ", "-out k2.pem")),
    # tool options
    ("mysql -u root -pmy-s3cret db", "my-s3cret", ("-u root -p", " db")),
    ("mysql -u root -p my-s3cret", "my-s3cret", "mysql -u root -p "),
    ("mysqldump -uroot -pdump-1 app > app.sql", "dump-1", ("-uroot", "app > app.sql")),
    ("mariadb -p'quoted pw' app", "quoted pw", ("mariadb -p", " app")),
    ("/usr/bin/mysqladmin -pabs-1 status", "abs-1", "status"),
    ("sshpass -p ssh-pw-1 ssh -p 2222 host", "ssh-pw-1", ("sshpass -p ", "ssh -p 2222 host")),
    ("redis-cli -a rd-1 ping", "rd-1", ("redis-cli -a ", " ping")),
    ("curl -u admin:cu-1 https://x", "cu-1", ("curl -u admin:", "https://x")),
    ("curl --user 'admin:cu-2' https://x", "cu-2", "--user 'admin:"),
    ("docker login -u me -p dl-1 ghcr.io", "dl-1", ("-u me -p ", "ghcr.io")),
    ("ldapsearch -x -D cn=admin -w ld-1 -b dc=example", "ld-1", ("-w ", "-b dc=example")),
    ("true && mysql -h db -pchain-1; ls -p", "chain-1", "; ls -p"),
    # credentials in URLs
    ("git clone https://user:gh-pw-1@github.com/o/r.git", "gh-pw-1", ("https://user:", "@github.com/o/r.git")),
    ("git clone https://x-access-token:xat-1@github.com/o/r", "xat-1", ("x-access-token:", "@github.com/o/r")),
    ("psql postgres://app:pg-1@db:5432/app", "pg-1", ("postgres://app:", "@db:5432/app")),
    ("DATABASE_URL=mysql://root:my-1@127.0.0.1/app", "my-1", ("DATABASE_URL=mysql://root:", "@127.0.0.1/app")),
    ("redis-cli -u redis://:rds-1@cache:6379/0", "rds-1", ("redis://:", "@cache:6379/0")),
    ("amqp://guest:amq-1@rabbit:5672/vhost", "amq-1", "amqp://guest:"),
    ("mongodb+srv://u:p@ss-1@cluster0.example.net/db", "p@ss-1", ("mongodb+srv://u:", "@cluster0.example.net/db")),
    ('{"url": "https://u:json-1@h/x"}', "json-1", '"url": "https://u:'),
    # more shapes seen in agent commands
    ("SSHPASS=sp-env-1 sshpass -e ssh h", "sp-env-1", ("SSHPASS=", "sshpass -e ssh h")),
    ("openssl enc -aes-256-cbc -k ok-1 -in f", "ok-1", ("-k ", "-in f")),
    ("gh secret set DEPLOY_TOKEN --body gh-body-1", "gh-body-1", ("DEPLOY_TOKEN", "--body ")),
    ("az login -u me -p az-1", "az-1", "-u me -p "),
    ("curl -uuser:cu-3 https://x", "cu-3", "-uuser:"),
    ('echo "token: tk-echo-1" && ls', "tk-echo-1", ('"token: ', '" && ls')),
    ('["--opt", "password=arr-1", "x"]', "arr-1", ('"password=', '", "x"]')),
    ('{"password": " lead-1"}', "lead-1", '"password": '),
    ("ansible-playbook site.yml -e ansible_become_pass=abp-1", "abp-1", "ansible_become_pass="),
    ("helm upgrade app ./chart --set auth.password=hp-1 --wait", "hp-1", ("auth.password=", "--wait")),
    ("psql 'host=db user=app password=lib-1 dbname=app'", "lib-1", ("user=app", "dbname=app")),
    ("terraform apply -var 'db_password=tf-1'", "tf-1", "db_password="),
]

# Ordinary text that must come back unchanged.
NOT_SECRETS = [
    "cat /etc/passwd",
    "grep -ri password .",
    "grep -rn token src/*.py",
    "passwd alice",
    'echo "forgot your password?"',
    "echo 'Enter your password:'",
    "ls -p",
    "ssh -p 2222 host",
    "tar -czpf x.tgz dir",
    "python token.py",
    "token.py:12: unexpected indent",
    "x = get_token()",
    "cat password_reset.html",
    "sort -k2 file",
    "git show 3f786850e387550fdab836ed7e6dc881de23001b",
    "echo 550e8400-e29b-41d4-a716-446655440000",
    "echo aGVsbG8gd29ybGQsIHRoaXMgaXMgb3JkaW5hcnkgYmFzZTY0Cg== | base64 -d",
    "the Authorization header is required",
    "Authorization failed for user bob",
    "the bearer of this letter",
    "max_tokens=1024 tokenizer=bert-base num_tokens: 12",
    "PWD=/tmp OLDPWD=/home/me",
    "PASSWORD_FILE=/run/secrets/db TOKEN_URL=https://auth.example/token",
    "app --token-file /var/run/token --password-stdin",
    "docker login --password-stdin -u me registry.example",
    "ansible-playbook --ask-pass site.yml",
    "mysql -u root -p -h db.internal",
    "export PASSWORD",
    "echo $GITHUB_TOKEN",
    "if password == expected: pass",
    "ssh git@github.com",
    "git clone git@github.com:org/repo.git",
    "curl http://localhost:8080/api/v1/token",
    "kubectl get secrets -n prod",
    "kubectl create secret generic db --from-file=./creds",
    "docker pull registry.example/token-service:1.2",
    "set -euo pipefail",
    "redis-cli ping",
    "curl -u alice https://x",
    "ps -u root; docker run -u 1000:1000 img",
    "git log --author=alice --key=value",
    "apt-get install -y mysql-client",
    "sk-learn AKIA ghp_ eyJ",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n",
    "ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no host",
    "aws secretsmanager get-secret-value --secret-id prod/db",
    'git commit -m "auth: handle expired sessions"',
    "openssl s_client -connect example.com:443 -key client.key -cert client.crt",
    "PGPASSFILE=~/.pgpass psql -h db",
    "bypass=true compass=north",
    "find / -name '*.key' -o -name 'secrets.yaml'",
    "",
]

PEM_BODY = "MIIEowIBAAKCAQEA7bq98n6Fq1xZ\nq3FJkLmNoPqRsTuVwXyZa1B2c3D4\n"


def as_tuple(value: str | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else value


@pytest.mark.parametrize(("text", "secrets", "kept"), SECRET_CASES)
def test_secret_is_redacted_and_name_kept(
    text: str, secrets: str | tuple[str, ...], kept: str | tuple[str, ...]
) -> None:
    redacted = redact(text)
    for secret in as_tuple(secrets):
        assert secret not in redacted, redacted
    for name in as_tuple(kept):
        assert name in redacted, redacted
    assert REDACTED in redacted


@pytest.mark.parametrize("token", PROVIDER_TOKENS)
def test_provider_token_is_redacted_anywhere(token: str) -> None:
    for text in (token, f"use {token} to push", f"'{token}'", f"KEY={token}", f"x,{token};"):
        redacted = redact(text)
        assert token not in redacted
        assert REDACTED in redacted


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DB_PASSWORD=hunter2", "DB_PASSWORD=[REDACTED]"),
        ("cmd --token abc", "cmd --token [REDACTED]"),
        ("Authorization: Bearer abc", "Authorization: Bearer [REDACTED]"),
        ("https://user:pw@host/", "https://user:[REDACTED]@host/"),
        ('{"password": "hunter2"}', '{"password": "[REDACTED]"}'),
        ('PASSWORD=""', 'PASSWORD=""'),
        ("mysql -pS3cret db", "mysql -p[REDACTED] db"),
        ("curl -u me:pw url", "curl -u me:[REDACTED] url"),
        ("echo TOKEN=abc; echo done", "echo TOKEN=[REDACTED]; echo done"),
        (f"key {AWS_KEY_ID} end", "key [REDACTED] end"),
    ],
)
def test_exact_output(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "kind", ["RSA PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "PRIVATE KEY"]
)
def test_private_key_block_is_redacted(kind: str) -> None:
    text = f"cat > id <<'EOF'\n-----BEGIN {kind}-----\n{PEM_BODY}-----END {kind}-----\nEOF\nchmod 600 id"
    assert redact(text) == "cat > id <<'EOF'\n[REDACTED PRIVATE KEY]\nEOF\nchmod 600 id"


def test_private_key_in_json_string_and_unterminated_key() -> None:
    escaped_body = PEM_BODY.replace("\n", "\\n")
    service_account = (
        '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n'
        + escaped_body
        + '-----END PRIVATE KEY-----\\n", "client_email": "a@b.iam"}'
    )
    redacted = redact(service_account)
    assert "MIIEowIBAAKCAQEA" not in redacted
    assert '"private_key": ' in redacted and '"client_email": "a@b.iam"' in redacted

    unterminated = f"echo start\n-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}echo more"
    assert redact(unterminated) == "echo start\n[REDACTED PRIVATE KEY]"


def test_pgp_and_putty_private_keys() -> None:
    pgp = f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PEM_BODY}-----END PGP PRIVATE KEY BLOCK-----\nok"
    assert redact(pgp) == "[REDACTED PRIVATE KEY]\nok"
    putty = (
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPublic-Lines: 1\nAAAAC3NzaC1lZDI1NTE5\n"
        "Private-Lines: 1\nAAAAIPrivatePart123\nPrivate-MAC: 0123abcd\nnext"
    )
    assert redact(putty) == "[REDACTED PRIVATE KEY]\nnext"


@pytest.mark.parametrize(("text", "secrets", "kept"), SECRET_CASES)
def test_secret_is_redacted_inside_a_script(
    text: str, secrets: str | tuple[str, ...], kept: str | tuple[str, ...]
) -> None:
    redacted = redact(f"set -e\ncd /srv/app && {text}\necho done | tee -a log")
    for secret in as_tuple(secrets):
        assert secret not in redacted, redacted
    assert redacted.startswith("set -e\ncd /srv/app && ")
    assert redacted.endswith("\necho done | tee -a log")


IDEMPOTENCE_INPUTS = [text for text, _, _ in SECRET_CASES] + NOT_SECRETS + PROVIDER_TOKENS


@pytest.mark.parametrize("text", IDEMPOTENCE_INPUTS)
def test_redact_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


def test_redact_is_idempotent_on_mixed_scripts() -> None:
    rng = random.Random(20240601)  # fixed seed: the same scripts every run
    separators = [" ", "; ", "\n", " && ", " | ", ", ", '"', "'", "=", ":"]
    for _ in range(3000):
        script = "".join(rng.choice(IDEMPOTENCE_INPUTS) + rng.choice(separators) for _ in range(rng.randint(1, 5)))
        once = redact(script)
        assert redact(once) == once, script


def test_redact_value_nested() -> None:
    arguments = {
        "command": "curl -H 'Authorization: Bearer abcdef0123456789xyz' http://h",
        "env": {"DB_PASSWORD": "hunter2-very-secret", "PWD": "/tmp", "HOME": "/root", "API_TOKEN": None},
        "headers": {"Authorization": "Basic dXNlcjpwYXNz", "Accept": "application/json"},
        "steps": [{"run": "export TOKEN=tok-1"}, "plain", 3, 1.5, True, None],
        "timeout": 60,
        "merge_stderr": False,
    }
    redacted = redact_value(arguments)
    assert redacted == {
        "command": "curl -H 'Authorization: Bearer [REDACTED]' http://h",
        "env": {"DB_PASSWORD": REDACTED, "PWD": "/tmp", "HOME": "/root", "API_TOKEN": None},
        "headers": {"Authorization": REDACTED, "Accept": "application/json"},
        "steps": [{"run": "export TOKEN=[REDACTED]"}, "plain", 3, 1.5, True, None],
        "timeout": 60,
        "merge_stderr": False,
    }
    assert arguments["env"]["DB_PASSWORD"] == "hunter2-very-secret"  # type: ignore[index]  # input untouched
    assert redact_value(redacted) == redacted


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("s", "s"),
        (7, 7),
        (None, None),
        ({"password": 1234}, {"password": REDACTED}),
        ({"secrets": {"a": "b"}}, {"secrets": REDACTED}),
        ({"max_tokens": 100, "token_file": "/run/t"}, {"max_tokens": 100, "token_file": "/run/t"}),
        (["mysql", "-u", "root", "-p", "x1"], ["mysql", "-u", "root", "-p", REDACTED]),
        (["mysql", "-uroot", "-psecret1", "db"], ["mysql", "-uroot", "-p" + REDACTED, "db"]),
        (["/usr/bin/curl", "-u", "me:pw1", "https://x"], ["/usr/bin/curl", "-u", "me:" + REDACTED, "https://x"]),
        (["app", "--password", "x1", "--verbose"], ["app", "--password", REDACTED, "--verbose"]),
        (["app", "--password-stdin", "registry"], ["app", "--password-stdin", "registry"]),
        (["docker", "login", "-p", "x1"], ["docker", "login", "-p", REDACTED]),
        (["sshpass", "-p", "x1", "ssh", "-p", "22", "h"], ["sshpass", "-p", REDACTED, "ssh", "-p", "22", "h"]),
        (["ssh", "-p", "22", "h"], ["ssh", "-p", "22", "h"]),
        (["openssl", "s_client", "-key", "k.pem"], ["openssl", "s_client", "-key", "k.pem"]),
        (["openssl", "enc", "-k", "x1"], ["openssl", "enc", "-k", REDACTED]),
        (["env", "TOKEN=x1", "cmd"], ["env", "TOKEN=[REDACTED]", "cmd"]),
    ],
)
def test_redact_value_cases(value: object, expected: object) -> None:
    assert redact_value(value) == expected
    assert redact_value(expected) == expected


# --------------------------------------------------------------------------------------------------------------
# Linear time. Each unit is repeated to 1 MiB; quadratic behaviour would make the 1 MiB / 128 KiB ratio ~64.
# --------------------------------------------------------------------------------------------------------------

ADVERSARIAL_UNITS = [
    "a",
    "=",
    " ",
    "password",
    "passwordpassword=",
    "password ",
    "--password ",
    "--password x ",
    "eyJ",
    "eyJaaaaaaaaa.",
    "-----BEGIN RSA PRIVATE KEY-----",
    "PuTTY-User-Key-File-2:",
    "https://",
    "://",
    "a:b@",
    "x://a:",
    '"password":"',
    "PASSWORD='",
    "token=$(",
    "AKIA",
    "sk-",
    "SG.",
    "Authorization: ",
    "Bearer ",
    "Bearer 1",
    "a=b ",
    "a_token=b&",
    "mysql -p ",
    "mysql ",
    "curl -u a:b ",
    "set ",
    "config set token ",
    "<password>",
    "<a>",
    "login a password b\n",
    "password x\n",
    "'",
    '"',
    "\\",
    "-p",
    "A" * 15 + "a",
    "openssl -key ",
    "sshpass -p x ",
    "gh secret set x --body ",
    "mysql;",
    "password:'",
    "a'b'",
    "(",
]
MIB = 1 << 20


def best_of_five(text: str) -> float:
    """This thread's CPU time, not the wall clock: on a loaded machine (two test workers, other jobs) the wall clock
    measures the scheduler, and linearity is about the work done."""
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        redact(text)
        best = min(best, time.thread_time() - start)
    return best


@pytest.mark.parametrize("unit", ADVERSARIAL_UNITS)
def test_linear_time_on_adversarial_input(unit: str) -> None:
    big = (unit * (MIB // len(unit) + 1))[:MIB]
    small = big[: MIB // 8]
    small_time = best_of_five(small)
    big_time = best_of_five(big)
    assert big_time < 2.0, f"{unit!r}: {big_time:.2f}s for 1 MiB"
    # The floor keeps timer noise on very fast inputs from looking like growth.
    assert big_time / max(small_time, 1e-3) < 20, f"{unit!r}: {small_time:.4f}s -> {big_time:.4f}s"


def test_texts_left_unchanged_are_remembered_and_secrets_are_not() -> None:
    # The per-call shortcut (issue 15 item 5): a short text redaction left as it was is not redacted again, and
    # a text a pass changed (a secret) is never kept in memory for it. Both give what the full passes give.
    from relay_shell.redaction import redact as module

    plain = "session_id s-0123456789ab ^>>> "
    secret = f"export GITHUB_TOKEN={GITHUB_CLASSIC}"
    assert redact(plain) == plain
    assert plain in module._UNCHANGED
    assert redact(plain) == module._redact_all(plain) == plain
    redacted = redact(secret)
    assert GITHUB_CLASSIC not in redacted and redacted == module._redact_all(secret)
    assert secret not in module._UNCHANGED and redacted not in module._UNCHANGED
    long_plain = "x " * 200  # over the remembered length: redacted in full every time
    assert redact(long_plain) == long_plain and long_plain not in module._UNCHANGED
    for index in range(module._UNCHANGED_MAX_ENTRIES + 10):  # bounded, whatever the calls
        redact(f"plain text {index}")
    assert len(module._UNCHANGED) <= module._UNCHANGED_MAX_ENTRIES
    # A value that is a secret only by its place in an argv looks plain on its own: it is not kept either.
    masked = module.redact_value(["mysql", "-u", "root", "-p", "hunter2-argv", "-pattached-pw", "db"])
    assert masked == ["mysql", "-u", "root", "-p", "[REDACTED]", "-p[REDACTED]", "db"]
    assert "hunter2-argv" not in module._UNCHANGED and "-pattached-pw" not in module._UNCHANGED
    assert "root" in module._UNCHANGED
