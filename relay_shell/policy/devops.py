"""Rules for containers, Kubernetes, infrastructure as code, configuration management, virtual machines and
backup tools. Deleting volumes, clusters' namespaces and nodes, infrastructure, virtual machines and backups is
tier 3.
"""

from __future__ import annotations

from collections.abc import Callable

from relay_shell.policy.calls import READ, Call, Verdict, verdict
from relay_shell.policy.vocabulary import words

# -- containers -----------------------------------------------------------------------------------------------------

_CONTAINER_READ = words(
    "ps ls list images logs inspect version info top stats port history diff events df search help config ls"
    " show wait du"
)
_CONTAINER_TIER_1 = words(
    "pull build buildx tag login logout create commit save load import export cp exec attach use builder init"
)
_CONTAINER_OBJECTS = words(
    "container image volume network system builder buildx compose context node service swarm secret config plugin"
    " trust manifest stack machine pod"
)
_EXEC_VALUE_OPTIONS = words("-e --env --env-file -u --user -w --workdir --detach-keys")


def _container(call: Call) -> Verdict:
    operands = [word for word in call.words[1:] if not word.startswith("-")]
    if call.words[1:2] in (["-f"], ["--file"], ["-p"], ["--project-name"]) and len(operands) > 1:
        operands = operands[1:]  # `docker compose -f file up`: the option's value is not the verb
    group = operands[0] if operands else ""
    verb = operands[1] if group in _CONTAINER_OBJECTS and len(operands) > 1 else group
    if group == "compose" or call.program.endswith("compose"):
        return _compose(call, operands[1:] if group == "compose" else operands)
    if verb == "prune" and group in ("system", "volume"):
        return verdict(3, f"{call.program} {group} prune destroys data")
    if group == "volume" and verb in ("rm", "remove"):
        return verdict(3, f"{call.program} volume rm destroys data")
    if verb in ("rm", "remove") and call.has("-v", "--volumes"):
        return verdict(3, "removes containers with their volumes")
    if verb in ("", *_CONTAINER_READ) and not (group == "config" and verb == "create"):
        return READ
    if verb == "exec":
        return _container_exec(call)
    if verb == "run":
        detached = call.has("-d", "--detach", "-p", "--publish", "-P", "--publish-all", "--privileged")
        return (
            verdict(2, "runs a detached, published or privileged container")
            if detached
            else verdict(1, "runs a container in the foreground")
        )
    if verb in _CONTAINER_TIER_1 or (verb == "create" and group in ("network", "volume", "context", "buildx")):
        return verdict(1, f"{call.program} {verb}")
    return verdict(2, f"{call.program} {group} {verb} changes containers".replace("  ", " "))


def _compose(call: Call, operands: list[str]) -> Verdict:
    verb = next((word for word in operands if word in _COMPOSE_VERBS), operands[0] if operands else "")
    if verb == "down" and call.has("-v", "--volumes"):
        return verdict(3, "compose down -v removes volumes")
    if verb in ("ps", "logs", "ls", "top", "images", "config", "version", "events", "port", "") or call.has_exact(
        "--help"
    ):
        return READ
    if verb == "up":
        return verdict(2, "starts detached containers") if call.has("-d", "--detach") else verdict(1, "compose up")
    if verb in ("build", "pull", "create", "run", "exec", "cp", "convert"):
        return verdict(1, f"compose {verb}")
    return verdict(2, f"compose {verb} changes containers")


_COMPOSE_VERBS = words(
    "up down stop start restart rm kill pause unpause ps logs ls top images config version events port build pull"
    " push create run exec cp convert scale"
)


def _container_exec(call: Call) -> Verdict:
    """`docker exec [options] CONTAINER COMMAND…`: the command runs in the container and is classified too."""
    words = call.words
    index = words.index("exec") + 1 if "exec" in words else len(words)
    while index < len(words) and words[index].startswith("-"):
        index += 2 if words[index] in _EXEC_VALUE_OPTIONS else 1
    command = tuple(words[index + 1 :])
    # The command decides the tier (`sh` is 1, `rm -rf /data` is 3); exec itself changes nothing.
    return Verdict(0, "runs a command in a container", commands=(command,)) if command else verdict(1, "exec")


# -- Kubernetes --------------------------------------------------------------------------------------------------

_KUBE_READ = words(
    "get describe logs top explain version api-resources api-versions cluster-info diff wait events completion"
    " kustomize attach"
)
_KUBE_TIER_1 = words("port-forward proxy cp debug")
_KUBE_CLUSTER_DATA = words(
    "namespace namespaces ns pv persistentvolume persistentvolumes pvc persistentvolumeclaim persistentvolumeclaims"
    " node nodes no crd crds customresourcedefinition customresourcedefinitions"
)
_KUBE_VALUE_OPTIONS = words("-n --namespace -c --container --context --kubeconfig -l --selector -f --filename")


def _kubectl(call: Call) -> Verdict:
    operands = _kube_operands(call.words)
    verb = operands[0] if operands else ""
    action = operands[1] if len(operands) > 1 else ""
    if verb == "delete":
        kinds = {kind for word in operands[1:2] for kind in word.split(",")} | {
            word.split("/", 1)[0] for word in operands[1:] if "/" in word
        }
        if call.has("--all", "-A", "--all-namespaces") or kinds & _KUBE_CLUSTER_DATA:
            return verdict(3, "kubectl deletes namespaces, volumes, nodes or everything of a kind")
        return verdict(2, "kubectl delete")
    if verb in ("", *_KUBE_READ) or (verb == "rollout" and action in ("status", "history")):
        return READ
    if verb in ("config", "auth", "plugin", "certificate") and action in (
        "",
        "view",
        "get-contexts",
        "current-context",
        "get-clusters",
        "get-users",
        "can-i",
        "whoami",
        "list",
    ):
        return READ
    if verb == "apply" and action == "view-last-applied":
        return READ
    if verb == "exec":
        separator = call.words.index("--") if "--" in call.words else len(call.words)
        command = tuple(call.words[separator + 1 :])
        return Verdict(0, "runs a command in a pod", commands=(command,)) if command else verdict(1, "kubectl exec")
    if verb in _KUBE_TIER_1 or verb == "config":
        return verdict(1, f"kubectl {verb}")
    dry = call.value("--dry-run")
    if dry in ("client", "server", ""):
        return verdict(0, "kubectl dry run")
    return verdict(2, f"kubectl {verb} changes the cluster")


def _kube_operands(words_: list[str]) -> list[str]:
    operands = []
    index = 1
    while index < len(words_):
        word = words_[index]
        if word == "--":
            break
        if word.startswith("-"):
            index += 2 if word in _KUBE_VALUE_OPTIONS else 1
            continue
        operands.append(word)
        index += 1
    return operands


def _helm(call: Call) -> Verdict:
    sub = call.subcommand
    action = call.operands[1] if len(call.operands) > 1 else ""
    if sub in (
        "",
        "list",
        "ls",
        "status",
        "get",
        "history",
        "show",
        "inspect",
        "search",
        "version",
        "env",
        "template",
        "lint",
        "verify",
        "help",
        "completion",
    ) or action in ("list", "ls"):
        return READ
    if sub in ("create", "package", "pull", "fetch", "repo", "dependency", "dep", "registry", "push") and sub != "push":
        return verdict(1, f"helm {sub}")
    return verdict(2, f"helm {sub} changes a release")


# -- infrastructure as code --------------------------------------------------------------------------------------


def _terraform(call: Call) -> Verdict:
    sub = next((word for word in call.words[1:] if not word.startswith("-")), "")
    if sub == "destroy" or (sub == "apply" and "-destroy" in call.words):
        return verdict(3, f"{call.program} destroys infrastructure")
    if sub in ("", "plan", "validate", "show", "output", "version", "providers", "graph", "state", "console") and not (
        sub == "state" and len(call.operands) > 1 and call.operands[1] in ("rm", "mv", "push", "replace-provider")
    ):
        return verdict(1 if sub == "plan" and call.value("-out") else 0, f"{call.program} {sub} reads")
    if sub == "fmt":
        return (
            READ
            if call.has("-check") or any(word.startswith("-check") for word in call.words)
            else verdict(2, "terraform fmt rewrites files in place")
        )
    if sub in ("init", "get", "login", "logout", "workspace", "test", "metadata"):
        return verdict(1, f"{call.program} {sub}")
    return verdict(2, f"{call.program} {sub} changes infrastructure")


def _pulumi(call: Call) -> Verdict:
    sub = call.subcommand
    action = call.operands[1] if len(call.operands) > 1 else ""
    if sub in ("destroy", "down"):
        return verdict(3, "pulumi destroys infrastructure")
    if (
        sub in ("", "preview", "whoami", "about", "version", "logs", "help", "schema")
        or action
        in (
            "ls",
            "output",
            "history",
            "get",
            "list",
            "ls",
        )
        or (sub == "stack" and action in ("", "-u"))
    ):
        return READ
    if sub in ("up", "update", "import", "cancel") or action in ("rm", "delete", "remove"):
        return verdict(2, f"pulumi {sub} {action}".strip())
    return verdict(1, f"pulumi {sub}")


# -- configuration management and data pipelines ------------------------------------------------------------------

_CHECK_MODE = words("--check -C --syntax-check --list-tasks --list-hosts --list-tags --diff-only")
_ANSIBLE_READ_MODULES = words("ping setup debug gather_facts stat slurp find assert fail")


def _ansible(call: Call) -> Verdict:
    if any(word in _CHECK_MODE for word in call.words[1:]):
        return verdict(0, f"{call.program} in check mode")
    if call.program == "ansible-playbook":
        return verdict(2, "ansible-playbook changes the hosts it targets")
    module = call.value("-m", "--module-name") or "command"
    arguments = call.value("-a", "--args") or ""
    if module in ("command", "shell", "raw", "ansible.builtin.command", "ansible.builtin.shell"):
        return Verdict(0, f"ansible runs a {module} on the hosts", shell=(arguments,) if arguments else ())
    if module.rsplit(".", 1)[-1] in _ANSIBLE_READ_MODULES:
        return verdict(0, f"ansible {module} reads")
    return verdict(2, f"ansible {module} changes the hosts")


def _salt(call: Call) -> Verdict:
    """`salt TARGET module.function [args]`: cmd.run runs shell text on the minions."""
    operands = call.operands
    function = operands[1] if len(operands) > 1 else ""
    if function in ("cmd.run", "cmd.shell", "cmd.run_all", "cmd.run_stdout"):
        return Verdict(0, f"salt {function} runs shell text on the minions", shell=tuple(operands[2:3]))
    module, _, name = function.partition(".")
    if module in ("test", "grains", "pillar", "status", "disk", "network", "sys") or name.startswith(
        ("list", "get", "show", "info", "status", "version", "available", "ping", "items")
    ):
        return verdict(0, f"salt {function} reads")
    return verdict(2, f"salt {function} changes the minions")


def _puppet(call: Call) -> Verdict:
    sub = call.subcommand
    if call.has_exact("--noop") or (
        sub in ("", "help", "lookup", "describe", "parser", "facts", "module")
        and not (sub == "module" and len(call.operands) > 1 and call.operands[1] in ("install", "uninstall", "upgrade"))
    ):
        return READ
    return verdict(2, f"puppet {sub} changes the system")


def _dbt(call: Call) -> Verdict:
    sub = call.subcommand
    if sub in ("run", "build", "seed", "snapshot", "run-operation", "clone", "retry"):
        return verdict(2, f"dbt {sub} writes tables in the warehouse")
    if sub in ("ls", "list", "show", "debug", "parse", "compile", "docs", "source", "test", "help", ""):
        return READ if sub not in ("compile", "docs", "test") else verdict(1, f"dbt {sub}")
    return verdict(1, f"dbt {sub}")


# -- virtual machines -----------------------------------------------------------------------------------------------


def _vagrant(call: Call) -> Verdict:
    sub = call.subcommand
    action = call.operands[1] if len(call.operands) > 1 else ""
    if sub == "destroy":
        return verdict(3, "vagrant destroy deletes the machine")
    if sub in ("", "status", "global-status", "ssh-config", "version", "port", "validate", "help") or action in (
        "list",
        "outdated",
    ):
        return READ
    if sub in ("init", "ssh", "package", "rdp", "cloud") or (sub == "snapshot" and action in ("save", "push", "list")):
        return verdict(1, f"vagrant {sub}")
    return verdict(2, f"vagrant {sub} changes a machine")


_VIRSH_READ = words(
    "list dominfo domstate domblklist domiflist domifaddr domstats domid domname domuuid domblkinfo domblkstat"
    " domifstat dommemstat domjobinfo domcontrol domdisplay domhostname pool-list pool-info pool-dumpxml net-list"
    " net-info net-dumpxml vol-list vol-info vol-dumpxml vol-path capabilities nodeinfo dumpxml help version"
    " hostname sysinfo uri iface-list nodedev-list snapshot-list snapshot-info vcpuinfo vncdisplay ttyconsole"
)


def _virsh(call: Call) -> Verdict:
    connection = call.value("-c", "--connect")
    sub = next((word for word in call.words[1:] if not word.startswith("-") and word != connection), "")
    if sub in ("vol-delete", "vol-wipe", "pool-delete") or (
        sub == "undefine" and call.has("--remove-all-storage", "--storage", "--wipe-storage")
    ):
        return verdict(3, f"virsh {sub} deletes storage")
    if sub in _VIRSH_READ:
        return READ
    if sub in ("", "connect", "console"):
        return verdict(1, "virsh session")
    return verdict(2, f"virsh {sub} changes a virtual machine")


_PROXMOX_READ = words("list config status pending listsnapshot showcmd help cpusets df version")


def _proxmox(call: Call) -> Verdict:
    sub = call.subcommand
    if sub in ("destroy", "rollback"):
        return verdict(3, f"{call.program} {sub} deletes a guest or its state")
    if sub in ("", *_PROXMOX_READ) or (sub == "disk" and len(call.operands) > 1 and call.operands[1] == "list"):
        return READ
    if sub in ("enter", "terminal", "vncproxy", "snapshot", "sendkey", "wait", "console", "monitor", "mtunnel"):
        return verdict(1, f"{call.program} {sub}")
    return verdict(2, f"{call.program} {sub} changes a guest")


# -- backups -----------------------------------------------------------------------------------------------------------

_BACKUP_DELETE = words("forget prune delete purge rm remove")
_BACKUP_READ = words("snapshots list ls check stats diff find info cat version help dump debug config")


def _backup(call: Call) -> Verdict:
    sub = next(
        (word for word in call.operands if word in _BACKUP_DELETE | _BACKUP_READ or not word.startswith("/")), ""
    )
    if sub in _BACKUP_DELETE:
        return verdict(3, f"{call.program} {sub} deletes backups")
    if sub in _BACKUP_READ:
        return READ
    if sub in ("mount",):
        return verdict(2, f"{call.program} mounts a repository")
    return verdict(1, f"{call.program} {sub}".strip())


def _tarsnap(call: Call) -> Verdict:
    if call.has("-d", "--nuke"):
        return verdict(3, "tarsnap deletes archives")
    if call.has("-c", "-x", "--fsck", "--recover"):
        return verdict(1, "tarsnap creates or extracts an archive")
    return READ


RULES: dict[str, Callable[[Call], Verdict]] = {
    "docker": _container,
    "podman": _container,
    "nerdctl": _container,
    "docker-compose": _container,
    "podman-compose": _container,
    "kubectl": _kubectl,
    "oc": _kubectl,
    "k": _kubectl,
    "helm": _helm,
    "terraform": _terraform,
    "tofu": _terraform,
    "terragrunt": _terraform,
    "pulumi": _pulumi,
    "vagrant": _vagrant,
    "virsh": _virsh,
    "qm": _proxmox,
    "pct": _proxmox,
    "ansible": _ansible,
    "ansible-playbook": _ansible,
    "salt": _salt,
    "salt-ssh": _salt,
    "puppet": _puppet,
    "chef-client": lambda call: verdict(
        0 if call.has_exact("--why-run", "-W") else 2, "chef-client converges the node"
    ),
    "dbt": _dbt,
    "restic": _backup,
    "rustic": _backup,
    "borg": _backup,
    "kopia": _backup,
    "duplicacy": _backup,
    "bup": _backup,
    "tarsnap": _tarsnap,
}
