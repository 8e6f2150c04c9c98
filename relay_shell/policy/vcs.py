"""Rules for version control: git (and git-compatible dolt and yadm) with the git-extras commands. Rewriting or
deleting shared history (force pushes, deleting remote branches, removing paths from all of history, cleaning
untracked directories) is tier 3; discarding local work is 2; commits, branches and rebases are 1.
"""

from __future__ import annotations

from collections.abc import Callable

from relay_shell.policy.calls import READ, Call, Verdict, names_files, read_options, verdict
from relay_shell.policy.git_config import config_verdict
from relay_shell.policy.vocabulary import words

# -- git ----------------------------------------------------------------------------------------------------------

_GIT_READ = words(
    "status log diff show blame grep describe shortlog reflog ls-files ls-tree ls-remote rev-parse rev-list"
    " cat-file count-objects help version whatchanged cherry show-branch show-ref name-rev merge-base diff-files"
    " diff-index diff-tree check-ignore check-attr check-ref-format var for-each-ref range-diff fsck"
    " verify-commit verify-tag verify-pack get-tar-commit-id hash-object symbolic-ref standup effort"
    " summary info count authors fame sizer"
)
# git-extras and friends: what they do to history.
_GIT_EXTRAS = {
    "reset-file": 2,
    "clear": 3,
    "clear-soft": 3,
    "delete-branch": 3,
    "delete-tag": 2,
    "delete-merged-branches": 2,
    "delete-submodule": 2,
    "obliterate": 3,
    "rename-branch": 2,
    "force-clone": 2,
    "undo": 1,
    "squash": 1,
    "psykorebase": 1,
}


_GIT_GLOBAL_VALUES = frozenset(
    ["-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"]
)
# Sub-command options whose value is a command git runs (through the shell, or on the other end of a local URL).
_GIT_COMMAND_OPTIONS = {
    "ls-remote": ("--upload-pack", "-u"),
    "fetch": ("--upload-pack",),
    "pull": ("--upload-pack",),
    "clone": ("--upload-pack", "-u"),
    "push": ("--receive-pack", "--exec"),
    "archive": ("--exec",),
    "rebase": ("--exec", "-x"),
    "difftool": ("--extcmd", "-x"),
    "send-email": ("--smtp-server", "--to-cmd", "--cc-cmd", "--header-cmd"),
}
# Sub-commands that run a program or a command line of their own.
_GIT_RUNNING = {"difftool": 1, "mergetool": 1, "web--browse": 1, "instaweb": 2, "daemon": 2}


def _git(call: Call) -> Verdict:
    """Global options first (`-c KEY=VALUE` and `--config-env` are configuration, read by git_config), then the
    sub-command's rule, then what its options and URLs run."""
    words = call.words
    index = 1
    found: list[Verdict] = []
    while index < len(words) and words[index].startswith("-"):
        word = words[index]
        name, equals, attached = word.partition("=")
        takes_next = not equals and word in _GIT_GLOBAL_VALUES
        value = attached if equals else (words[index + 1] if takes_next and index + 1 < len(words) else "")
        setting = value if word == "-c" else word[2:] if word.startswith("-c") and not word.startswith("--") else None
        if setting is not None:
            key, has_value, setting_value = setting.partition("=")
            found.append(config_verdict(key, setting_value if has_value else "true"))
        elif name == "--config-env":
            key, _eq, variable = value.partition("=")
            found.append(config_verdict(key, "$" + variable))
        elif name == "--exec-path" and equals:
            found.append(verdict(2, f"git runs its programs from {attached}"))
        index += 2 if takes_next else 1
    if index >= len(words):
        return _worst([READ, *found])
    inner = Call("git", ["git", *words[index:]], call.context)
    found.append(_git_subcommand(inner, words[index]))
    found += _git_commands(inner, words[index])
    return _worst(found)


def _git_subcommand(inner: Call, sub: str) -> Verdict:
    rule = _GIT_RULES.get(sub)
    if rule is not None:
        return rule(inner)
    if sub in _GIT_RUNNING:
        if inner.has_exact("--tool-help", "-h", "--help"):
            return verdict(0, f"git {sub} lists its tools")
        return verdict(_GIT_RUNNING[sub], f"git {sub} runs programs")
    if sub == "help" and inner.has("-w", "--web"):
        return verdict(1, "git help --web runs a browser")
    if sub in _GIT_READ_WRITING:
        found = _GIT_READ_WRITING[sub](inner)
        if found is not None:
            return found
    if sub in _GIT_READ:
        return verdict(1 if inner.value("-o", "--output") else 0, f"git {sub} reads the repository")
    if sub in _GIT_EXTRAS:
        return verdict(_GIT_EXTRAS[sub], f"git {sub}")
    return verdict(1, f"git {sub}")


def _git_commands(inner: Call, sub: str) -> list[Verdict]:
    """What a sub-command's options, configuration and URLs run: `--upload-pack=CMD`, `rebase -x CMD`, `grep -OCMD`,
    `bisect run CMD…`, `submodule foreach CMD`, `clone -c KEY=VALUE`, an `ext::` URL."""
    found: list[Verdict] = []
    words = inner.words
    for option in _GIT_COMMAND_OPTIONS.get(sub, ()):
        value = inner.value(option)
        if value:
            found.append(Verdict(1, f"git {sub} {option} runs a command", shell=(value,)))
    for word in words[2:] if sub == "grep" else ():
        # -O[PAGER] / --open-files-in-pager[=PAGER]: the pager only ever attached (without it, git's own pager)
        if (word.startswith("-O") and len(word) > 2) or word.startswith("--open-files-in-pager="):
            pager = word[2:] if word.startswith("-O") else word.split("=", 1)[1]
            found.append(Verdict(0, "git grep -O runs a pager", shell=(pager,)))
    if sub == "bisect" and inner.operands[1:2] == ["run"]:
        found.append(Verdict(1, "git bisect run runs a command", commands=(tuple(inner.operands[2:]),)))
    if sub == "submodule" and "foreach" in words:
        found.append(
            Verdict(1, "git submodule foreach runs a command", shell=(" ".join(words[words.index("foreach") + 1 :]),))
        )
    if sub in ("clone", "init", "submodule"):
        for position, word in enumerate(words[:-1]):
            if word in ("-c", "--config"):
                key, _eq, value = words[position + 1].partition("=")
                found.append(config_verdict(key, value))
        if inner.value("--template") is not None:
            found.append(verdict(1, f"git {sub} --template copies hooks that cannot be seen"))
    for word in words[2:]:
        if "ext::" in word:
            found.append(config_verdict("remote.url", word[word.index("ext::") :]))
    return found


def _worst(found: list[Verdict]) -> Verdict:
    worst = max(found, key=lambda item: item.tier)
    shell = tuple(text for item in found for text in item.shell)
    commands = tuple(argv for item in found for argv in item.commands)
    if not shell and not commands:
        return worst
    return Verdict(worst.tier, worst.reason, shell=shell, commands=commands)


def _git_push(call: Call) -> Verdict:
    refs = call.operands[1:]
    if call.has("-f", "--force", "--force-with-lease", "--force-if-includes", "--mirror") or any(
        ref.startswith("+") for ref in refs
    ):
        return verdict(3, "git force push rewrites remote history")
    if call.has("-d", "--delete", "--prune") or any(ref.startswith(":") for ref in refs):
        return verdict(3, "git push deletes remote branches")
    return verdict(2, "git push changes a remote")


def _git_branch(call: Call) -> Verdict:
    if call.has("-D") or (call.has("-d", "--delete") and call.has("-f", "--force")):
        return verdict(2, "git branch -D deletes an unmerged branch")
    if call.has("--edit-description"):
        return verdict(1, "git branch --edit-description runs an editor and writes the configuration")
    if call.has_exact("-f", "--force") and len(call.operands) > 2:
        return verdict(2, "git branch -f moves an existing branch (its commits can be lost)")
    if call.has("-d", "--delete", "-m", "-M", "--move", "-c", "-C", "--copy", "-u", "--set-upstream-to"):
        return verdict(1, "git branch renames or deletes a merged branch")
    listing = call.has_exact(
        "-a", "-r", "-l", "--list", "-v", "--contains", "--merged", "--no-merged", "--show-current"
    )
    if len(call.operands) > 1 and not listing:
        return verdict(1, "git branch creates a branch")
    return READ


def _git_tag(call: Call) -> Verdict:
    if call.has("-d", "--delete"):
        return verdict(2, "git tag -d deletes a tag")
    if len(call.operands) > 1 and not call.has_exact("-l", "--list", "-n", "--contains", "-v", "--verify"):
        return verdict(1, "git tag creates a tag")
    return READ


def _looks_like_path(word: str) -> bool:
    return word in (".", ":/") or word.startswith(("/", "./", "../", ":/")) or names_files(word)


def _git_checkout(call: Call) -> Verdict:
    words = call.words
    if ("--" in words[2:] and words.index("--", 2) + 1 < len(words)) or call.has("-f", "--force"):
        return verdict(2, "git checkout overwrites working-tree files")
    if call.has("-b", "-B", "-t", "--track", "--orphan"):
        return verdict(1, "git checkout switches branches")
    if any(_looks_like_path(word) for word in call.operands[1:]):
        return verdict(2, "git checkout discards changes to files")
    return verdict(1, "git checkout switches branches")


def _git_restore(call: Call) -> Verdict:
    if call.has_exact("-S", "--staged") and not call.has("-W", "--worktree"):
        return verdict(1, "git restore --staged unstages")
    return verdict(2, "git restore discards changes")


def _git_switch(call: Call) -> Verdict:
    if call.has("-f", "--force", "--discard-changes"):
        return verdict(2, "git switch --discard-changes discards local changes")
    return verdict(1, "git switch switches branches")


def _git_worktree(call: Call) -> Verdict:
    action = call.operands[1] if len(call.operands) > 1 else ""
    if action in ("list", ""):
        return READ
    if action == "remove" and call.has("-f", "--force"):
        return verdict(3, "git worktree remove --force deletes a worktree with its uncommitted and untracked files")
    return verdict(1, f"git worktree {action}")


def _git_reset(call: Call) -> Verdict:
    if call.has("--hard", "--merge", "--keep"):
        return verdict(2, "git reset --hard discards work")
    return verdict(1, "git reset moves HEAD or unstages")


def _git_clean(call: Call) -> Verdict:
    if call.has_exact("-n", "--dry-run"):
        return verdict(0, "git clean dry run")
    if call.has("-f", "--force") and call.has("-d"):
        return verdict(3, "git clean -d deletes untracked directories")
    if call.has("-f", "--force", "-i", "--interactive"):
        return verdict(2, "git clean deletes untracked files")
    return verdict(0, "git clean without -f does nothing")


def _git_stash(call: Call) -> Verdict:
    action = call.operands[1] if len(call.operands) > 1 else ""
    if action in ("list", "show"):
        return READ
    if action in ("drop", "clear"):
        return verdict(2, f"git stash {action} deletes stashed work")
    return verdict(1, "git stash")


def _git_rm(call: Call) -> Verdict:
    if call.has_exact("--cached"):
        return verdict(1, "git rm --cached untracks files")
    if call.has_exact("-n", "--dry-run"):
        return verdict(0, "git rm dry run")
    return verdict(2, "git rm deletes tracked files")


def _git_filter_branch(call: Call) -> Verdict:
    # The filters are shell text run on every commit: `--tree-filter 'rm -rf folder'` deletes a tree from history.
    filters = [
        call.words[index + 1]
        for index, word in enumerate(call.words[:-1])
        if word.endswith("-filter") and word.startswith("--")
    ]
    return Verdict(2, "git filter-branch rewrites history", shell=tuple(filters))


def _git_filter_repo(call: Call) -> Verdict:
    if any(option in call.long for option in ("--path", "--path-glob", "--path-regex", "--strip-blobs-bigger-than")):
        return verdict(3, "git filter-repo removes paths from all of history")
    return verdict(2, "git filter-repo rewrites history")


_GIT_CONFIG_VALUES = frozenset(["-f", "--file", "--blob", "--type", "--default", "--comment", "--value"])


def _git_reflog(call: Call) -> Verdict | None:
    if call.operands[1:2] and call.operands[1] in ("expire", "delete", "drop"):
        return verdict(2, f"git reflog {call.operands[1]} discards reflog entries (their commits can then be pruned)")
    return None


def _git_symbolic_ref(call: Call) -> Verdict | None:
    if call.has("-d", "--delete"):
        return verdict(2, "git symbolic-ref -d deletes a reference")
    _options, operands = read_options(call.words[1:], frozenset(["-m"]))
    if len(operands) >= 2:
        return verdict(1, "git symbolic-ref points a reference elsewhere")
    return None


def _git_fsck(call: Call) -> Verdict | None:
    return verdict(1, "git fsck --lost-found writes .git/lost-found") if call.has("--lost-found") else None


# Sub-commands that read, unless an option or operand makes them write.
_GIT_READ_WRITING: dict[str, Callable[[Call], Verdict | None]] = {
    "reflog": _git_reflog,
    "symbolic-ref": _git_symbolic_ref,
    "fsck": _git_fsck,
}
_CONFIG_WRITES = ("--unset", "--unset-all", "--remove-section", "--rename-section", "--replace-all", "--add")
_CONFIG_VERBS = frozenset(["set", "unset", "rename-section", "remove-section", "edit"])


def _git_config(call: Call) -> Verdict:
    if call.has(*_CONFIG_WRITES) or (call.operands[1:2] and call.operands[1] in _CONFIG_VERBS):
        return verdict(1, "git config changes the configuration")
    if call.has_exact(
        "-l", "--list", "--get", "--get-all", "--get-regexp", "--get-urlmatch", "-e", "--edit"
    ) and not call.has("-e", "--edit"):
        return READ
    _options, operands = read_options(call.words[1:], _GIT_CONFIG_VALUES)
    if len(operands) < 2:
        return READ
    # The value set is configuration git reads later: a command-carrying key is classified as what it will run.
    found = config_verdict(operands[0], operands[1])
    return Verdict(max(1, found.tier), "git config sets an option", shell=found.shell, commands=found.commands)


def _git_remote(call: Call) -> Verdict:
    action = call.operands[1] if len(call.operands) > 1 else ""
    return READ if action in ("", "show", "get-url", "-v") else verdict(1, f"git remote {action}")


def _git_gc(call: Call) -> Verdict:
    if any(word.startswith("--prune=now") or word == "--prune=all" for word in call.words):
        return verdict(2, "git gc --prune=now deletes unreachable commits")
    return verdict(1, "git gc")


_GIT_RULES: dict[str, Callable[[Call], Verdict]] = {
    "push": _git_push,
    "branch": _git_branch,
    "tag": _git_tag,
    "checkout": _git_checkout,
    "restore": _git_restore,
    "reset": _git_reset,
    "clean": _git_clean,
    "stash": _git_stash,
    "rm": _git_rm,
    "filter-branch": _git_filter_branch,
    "filter-repo": _git_filter_repo,
    "config": _git_config,
    "remote": _git_remote,
    "gc": _git_gc,
    "prune": lambda call: verdict(2, "git prune deletes unreachable objects"),
    "update-ref": lambda call: verdict(2 if call.has("-d") else 1, "git update-ref"),
    "switch": _git_switch,
    "worktree": _git_worktree,
    "read-tree": lambda call: verdict(2 if call.has("--reset") and call.has("-u") else 1, "git read-tree"),
    "checkout-index": lambda call: verdict(
        2 if call.has("-f", "--force") and not call.has("--prefix") else 1, "git checkout-index writes files"
    ),
    "archive": lambda call: verdict(1 if call.value("-o", "--output") else 0, "git archive"),
}


RULES: dict[str, Callable[[Call], Verdict]] = {"git": _git, "dolt": _git, "yadm": _git}
