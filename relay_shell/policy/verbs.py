"""Evidence from the words of a command line, for programs without a rule of their own: help and version
requests, dry runs, and the verb of a sub-command CLI (`aws ec2 delete-volume`, `gcloud compute instances list`,
`az group delete`, `doctl compute droplet delete`, `salt '*' pkg.upgrade`), with the resource it acts on. Cloud
object stores (s3, gsutil, azcopy, rclone, mc, s3cmd) have their own rules here: uploads, syncs with deletion,
recursive deletes.

Unknown programs stay tier 1 unless a verb says otherwise; task runners (make, npm run, rake) get no verb
evidence, since their targets run whatever a file says.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy.calls import Call, Verdict, verdict
from relay_shell.policy.vocabulary import POWER, words

HELP_FLAGS = words("--help -help --usage -? /? /help --help-all --long-help")
VERSION_FLAGS = words("--version -version -V")
DRY_RUN_FLAGS = words(
    "--dry-run --dryrun --dry-run=client --dry-run=server --simulate --what-if -WhatIf --noop --check --preview"
)
_SUBCOMMAND = re.compile(r"^[a-z][a-z0-9]*(?:[-_:.][a-z0-9]+)*$")


def is_help_request(program: str, words_: list[str]) -> bool:
    """`PROG [sub …] --help`, `PROG help [topic]`, `PROG -h`, `PROG --version`, `PROG version`: nothing runs."""
    arguments = words_[1:]
    if not arguments or program in POWER:
        return False
    first, last = arguments[0], arguments[-1]
    plain = all(_SUBCOMMAND.match(word) for word in arguments[:-1])
    if last in HELP_FLAGS or last in VERSION_FLAGS:
        return plain
    if last == "-h":
        return plain
    if first == "help" or first in HELP_FLAGS:
        return True
    if last == "help":
        return all(_SUBCOMMAND.match(word) or word.startswith("/") for word in arguments[:-1])
    return len(arguments) == 1 and first == "version"


def is_dry_run(words_: list[str]) -> bool:
    return any(word in DRY_RUN_FLAGS for word in words_[1:])


# Verbs, by what they do to the resource they name. A word's verb is its first part (`delete-volume`), or the
# last part after a namespace (`pkg.upgrade`, `db:rollback`, `plugin:install`).
_VERB_TIERS: dict[str, int] = {}
for _tier, _names in (
    (
        0,
        "list ls show get describe info status view search find inspect logs log history diff version whoami help"
        " explain top stats tree print cat count check validate verify lint query lookup scan estimate preview"
        " plan outdated audit doctor ping wait watch monitor tail events usage quota read dump exists report summary"
        " compare detect display head browse simulate versions",
    ),
    (
        1,
        "login logout auth authenticate init new generate scaffold build compile pack package bundle pull fetch"
        " download clone checkout run exec invoke serve dev test open edit configure ssh console shell"
        " attach cp copy backup save track",
    ),
    (
        2,
        "create add install uninstall remove rm delete del update upgrade set unset put post apply deploy start stop"
        " restart reload kill enable disable mount unmount umount suspend resume pause unpause reboot shutdown halt"
        " poweroff push publish unpublish upload import restore reset rollback revert rename move mv tag untag label"
        " unlabel detach grant revoke allow deny block unblock lock unlock approve reject cancel send submit migrate"
        " scale resize modify patch replace write register deregister unregister associate disassociate authorize"
        " rotate renew fix clean clear prune purge gc vacuum flush trigger promote demote assign unassign share"
        " unshare transfer merge archive unarchive sync mb rb terminate connect disconnect snapshot deallocate"
        " mutate wizard useradd userdel usermod",
    ),
    (3, "destroy drop wipe erase nuke obliterate shred"),
):
    for _name in _names.split():
        _VERB_TIERS[_name] = _tier

_DELETE_VERBS = words("delete del remove rm terminate purge drop destroy deregister rb")
# What is lost with a delete: data and infrastructure (tier 3). Metadata, single items and resources that can
# be restored for a while (secrets, projects, keys) stay 2.
_DATA_NOUNS = words(
    "instance instances volume volumes disk disks bucket buckets cluster clusters database databases db dbs stack"
    " stacks snapshot snapshots function functions repository repositories repo repos group groups resource-group"
    " droplet droplets vm vms server servers table tables filesystem filesystems file-system share shares namespace"
    " namespaces account storage-account zone hosted-zone image images nodebalancer nodebalancers load-balancer"
    " loadbalancer broker brokers keyspace index indexes domain vault vaults backup backups archive archives app"
    " apps environment environments workspace workspaces container containers pool pools node nodes warehouse"
    " dataset datasets aks eks gke kubernetes webapp functionapp redis cosmosdb postgres mysql sql vmss"
)
# The first word of a long option that says the program changes or deletes something (`--delete-old`,
# `--remove`, `--purge`, `--in-place`, `--uninstall`): evidence for a program nothing else knows.
_CHANGING_OPTIONS = words(
    "delete remove purge drop wipe erase destroy truncate overwrite install uninstall upgrade kill stop restart"
    " enable disable cleanup clean clear reset fix write in apply push publish prune shred"
)
_RECOVERABLE = words("project projects secret secrets key keys")
# CLIs that print a group's help when given only its name (`az vm`, `gcloud compute`).
_GROUP_HELP = words("az gcloud")


def _verb_of(word: str) -> tuple[str, int] | None:
    """The verb in one word of a command path and its tier: the first part that is a verb (`delete-volume`,
    `batch-delete-image`), or after a namespace the last segment (`pkg.upgrade`, `db:rollback`)."""
    if ":" in word or "." in word:
        word = re.split(r"[:.]", word)[-1]
    for part in word.split("-"):
        tier = _VERB_TIERS.get(part)
        if tier is not None:
            return part, tier
    return None


def _command_path(words_: list[str]) -> list[str]:
    """The sub-command words: lower-case identifiers, options skipped, up to the first other word (a path, a URL,
    quoted text), at most five."""
    path: list[str] = []
    for word in words_[1:]:
        if word.startswith("-"):
            continue
        if not _SUBCOMMAND.match(word) or len(path) == 5:
            break
        path.append(word)
    return path


def cli_verdict(call: Call, default: Verdict) -> Verdict:
    """The verb of a sub-command CLI, and for deletes the resource: `aws ec2 delete-volume` is 3."""
    path = _command_path(call.words)
    found = [(match[1], match[0], position) for position, word in enumerate(path) if (match := _verb_of(word))]
    if not found:
        if call.program in _GROUP_HELP and path:
            return verdict(0, f"{call.program} {' '.join(path)} prints the group's help")
        changing = [option for option in call.long if option[2:].split("-", 1)[0] in _CHANGING_OPTIONS]
        if changing and default.tier < 2:
            return verdict(2, f"{call.program} {changing[0]}: an option that changes or deletes")
        return default
    tier, verb, position = max(found, key=lambda item: item[0])
    named = f"{call.program} {' '.join(path)}"
    if path[position].endswith("credentials"):
        return verdict(1, f"{named} writes the client's credentials")
    if tier == 0 and call.value("-o", "--output-file", "--outfile") not in (None, "-", "json", "text", "table", "yaml"):
        return verdict(1, f"{named} writes a file")
    if verb in ("set", "unset", "add") and "config" in path[:position]:
        return verdict(1, f"{named} changes the client's settings")
    if verb not in _DELETE_VERBS:
        return verdict(tier, named)
    if call.has("--recursive", "-r", "-R") or verb in ("destroy", "rb"):
        return verdict(3, f"{named}: a recursive or whole-resource delete")
    parts = re.split(r"[-_]", path[position])
    noun = parts[-1] if len(parts) > 1 else (path[position - 1] if position else "")
    nouns = {noun, noun[:-1] if noun.endswith("s") else noun}
    if nouns & _RECOVERABLE:
        return verdict(2, f"{named} deletes a resource that can be restored for a while")
    if nouns & _DATA_NOUNS:
        return verdict(3, f"{named} deletes data or infrastructure")
    return verdict(2, f"{named} deletes metadata or one item")


# -- object stores ------------------------------------------------------------------------------------------------

_REMOTE = re.compile(
    r"^(?:s3|gs|az|wasb|wasbs|abfs|abfss|oss|r2|b2|swift)://|^https://[\w.-]+\.(?:blob|dfs|file)\.core|^[\w.-]+:"
)


def _copy_tier(call: Call, destination: str) -> Verdict:
    if _REMOTE.match(destination) and not destination.startswith(("http:", "/")):
        return verdict(2, f"{call.program} writes to remote storage")
    return verdict(1, f"{call.program} copies to local files")


def _aws(call: Call) -> Verdict:
    if not call.subcommand:
        return verdict(0, "aws prints its usage")  # no service named: nothing runs (and nothing to index below)
    if call.subcommand == "s3":
        return _s3(call)
    if call.subcommand in ("configure", "sso") and len(call.operands) > 1 and call.operands[1] in ("list", "get"):
        return verdict(0, "aws configure list")
    if call.subcommand in ("configure", "sso", "login"):
        return verdict(1, "aws configure writes the client's settings")
    if call.has_exact("--generate-cli-skeleton", "--dry-run"):
        return verdict(0, "aws prints a skeleton or checks permissions")
    # `aws SERVICE OPERATION`: the service's name (backup, logs, config) is not the verb.
    operation = Call("aws", ["aws", *call.words[call.words.index(call.subcommand) + 1 :]], call.context)
    return cli_verdict(operation, verdict(1, "aws"))


# aws s3 options that are switches; every other option takes a value.
_S3_SWITCHES = words(
    "--recursive --dryrun --delete --quiet --only-show-errors --no-progress --size-only --exact-timestamps"
    " --follow-symlinks --no-follow-symlinks --force --human-readable --summarize --request-payer --no-guess-mime-type"
    " --debug --no-verify-ssl --no-paginate --no-sign-request --ignore-glacier-warnings --force-glacier-transfer"
)


def _s3(call: Call) -> Verdict:
    verb = call.operands[1] if len(call.operands) > 1 else ""
    paths: list[str] = []
    words_ = call.words[3:]
    index = 0
    while index < len(words_):
        word = words_[index]
        if word.startswith("--"):
            index += 1 if word in _S3_SWITCHES or "=" in word else 2
            continue
        paths.append(word)
        index += 1
    if call.has_exact("--dryrun") or verb in ("ls", "presign", ""):
        return verdict(0, "aws s3 lists or simulates")
    if verb == "rb" or (verb == "rm" and call.has("--recursive")):
        return verdict(3, "aws s3 deletes a bucket or every object under a prefix")
    if verb == "sync" and call.has("--delete"):
        return verdict(3, "aws s3 sync --delete deletes in the destination")
    if verb in ("cp", "sync") and paths:
        return _copy_tier(call, paths[-1])
    return verdict(2, f"aws s3 {verb}")


def _gsutil(call: Call) -> Verdict:
    words_ = [word for word in call.words[1:] if not word.startswith("-")]
    verb = words_[0] if words_ else ""
    if verb in ("ls", "cat", "du", "stat", "hash", "version", "help", "") or call.has_exact("-n"):
        return verdict(0, "gsutil reads")
    if verb == "rb" or (verb == "rm" and (call.has("-r", "-R", "-a"))) or (verb == "rsync" and call.has("-d")):
        return verdict(3, "gsutil deletes a bucket, a tree of objects or what the source lacks")
    if verb in ("cp", "rsync", "mv") and len(words_) > 2:
        return _copy_tier(call, words_[-1]) if verb != "mv" else verdict(2, "gsutil mv")
    return verdict(2, f"gsutil {verb}")


def _s3cmd(call: Call) -> Verdict:
    verb = call.subcommand
    if call.has("--configure"):
        return verdict(1, "s3cmd writes the client's settings")
    if verb in ("ls", "la", "info", "du", "") or call.has_exact("-n", "--dry-run"):
        return verdict(0, "s3cmd reads")
    if verb == "rb" or (verb in ("rm", "del") and call.has("-r", "--recursive")) or call.has("--delete-removed"):
        return verdict(3, "s3cmd deletes a bucket or many objects")
    if verb in ("get",) or (verb == "sync" and call.operands[-1:] and not _REMOTE.match(call.operands[-1])):
        return verdict(1, "s3cmd downloads")
    return verdict(2, f"s3cmd {verb}")


def _azcopy(call: Call) -> Verdict:
    verb = call.subcommand
    deleting = call.value("--delete-destination") or ""
    if verb == "sync" and deleting.lower() in ("true", "prompt"):
        return verdict(3, "azcopy sync deletes in the destination")
    if verb in ("remove", "rm"):
        return verdict(3 if call.has("--recursive") else 2, "azcopy deletes")
    if verb in ("copy", "cp", "sync") and len(call.operands) >= 3:
        return _copy_tier(call, call.operands[2])
    if verb in ("list", "jobs", "env", "help", ""):
        return verdict(0, "azcopy reads")
    return verdict(1, f"azcopy {verb}")


def _rclone(call: Call) -> Verdict:
    verb = call.subcommand
    if call.has_exact("-n", "--dry-run") or verb.startswith(
        ("ls", "cat", "size", "about", "check", "tree", "md5", "sha1")
    ):
        return verdict(0, "rclone reads or simulates")
    if verb in ("sync", "delete", "purge", "dedupe", "bisync", "cleanup"):
        return verdict(3, f"rclone {verb} deletes files")
    if verb in ("copy", "copyto", "copyurl") and len(call.operands) >= 3:
        return _copy_tier(call, call.operands[-1])
    if verb in ("config", "version", "help", "listremotes", "authorize", "obscure"):
        return verdict(1 if verb == "config" else 0, f"rclone {verb}")
    return verdict(2, f"rclone {verb}")


def _minio(call: Call) -> Verdict:
    verb = call.subcommand
    if verb in ("ls", "cat", "stat", "du", "find", "tree", "head", "diff", "ping", "ready", "version", "alias", ""):
        return verdict(0, "mc reads")
    if verb == "rb" or (verb == "rm" and call.has("--recursive", "-r")) or (verb == "mirror" and call.has("--remove")):
        return verdict(3, "mc deletes a bucket or many objects")
    return verdict(2, f"mc {verb}")


RULES: dict[str, Callable[[Call], Verdict]] = {
    "aws": _aws,
    "gsutil": _gsutil,
    "s3cmd": _s3cmd,
    "azcopy": _azcopy,
    "rclone": _rclone,
    "mc": _minio,
    "mcli": _minio,
}
