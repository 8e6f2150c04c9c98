"""How the labelled tier set was drawn from the tldr-pages corpus (run once; the labels are in
tier_labels.jsonl and tier_labels_fresh.jsonl, written by hand).

    python tests/data/select_tier_sample.py CORPUS.jsonl labelled|fresh

`labelled`: every command of the risky pages below, plus a random sample of the rest (seed 17).
`fresh`: commands in neither, drawn with another seed (1717): 200 from the whole corpus and 100 from
pages of risky programs that are not in the list below (other cloud, container, storage sub-pages), so
the held-out set also tests the classifier on dangerous commands it was not tuned on.
Lines tldr marks `[Interactive]` are input to a running program, not shell commands: left out.

The script prints every row it selects and does not drop duplicates: 2,125 rows for `labelled`, 300 for
`fresh`. The label files hold one row per distinct command text, de-duplicated when they were written:
tier_labels.jsonl has 2,073 (52 rows repeat a command shown on another page: `npm` and `npm-install`, `at`
under common/ and linux/), tier_labels_fresh.jsonl has 297 (one repeat within the fresh rows, `tldr qm disk`,
and two commands already in the labelled set, `sudo ufw status numbered` and `docker container ls -a`). For a
repeated command the label file names one of its pages; every row there is one this script selects.
"""

from __future__ import annotations

import json
import random
import re
import sys

_RISKY = (
    # deletion and bulk changes
    "rm rmdir shred srm find xargs truncate rsync mv chmod chown kill pkill killall rmlint "
    # disks and storage
    "dd ddrescue mkfs mke2fs mkfs.ext4 mkfs.xfs mkfs.btrfs mkfs.fat mkfs.vfat mkfs.ntfs mkfs.exfat mkswap wipefs "
    "fdisk sfdisk cfdisk gdisk sgdisk parted blkdiscard lvm lvcreate lvremove lvreduce lvresize vgcreate vgremove "
    "pvcreate pvremove zfs zpool btrfs btrfs-subvolume btrfs-device btrfs-filesystem mdadm cryptsetup "
    "cryptsetup-luksformat losetup mount umount swapon swapoff "
    # services and power
    "systemctl service shutdown reboot halt poweroff init telinit "
    # packages
    "apt apt-get aptitude dpkg yum dnf rpm pacman pacman-remove pacman-sync snap flatpak zypper apk pip "
    "pip-install pip-uninstall npm npm-install npm-uninstall gem brew "
    # git history
    "git-push git-reset git-clean git-rebase git-filter-branch git-filter-repo git-branch git-stash git-checkout "
    "git-restore git-rm git-reset-file "
    # cloud
    "aws aws-s3 aws-s3-rm aws-s3-rb aws-s3-mv aws-s3-sync aws-s3api aws-ec2 aws-rds aws-lambda aws-iam "
    "aws-dynamodb aws-cloudformation aws-secretsmanager aws-ecr aws-backup gcloud gcloud-compute gcloud-container "
    "gcloud-projects az az-vm az-group az-disk az-storage-blob az-storage-container az-aks gsutil s3cmd "
    "doctl-compute-droplet doctl-databases azcopy "
    # containers
    "docker docker-rm docker-rmi docker-system docker-volume docker-container-rm docker-image-rm docker-run "
    "docker-container-run docker-compose docker-compose-down docker-network docker-buildx-prune podman podman-rmi "
    "kubectl kubectl-delete kubectl-apply kubectl-drain kubectl-scale kubectl-rollout helm "
    # infrastructure as code, virtualization, backups
    "terraform terraform-apply terraform-destroy terraform-taint pulumi pulumi-destroy pulumi-up pulumi-stack "
    "vagrant vagrant-destroy virsh virsh-undefine qm qm-destroy qm-stop pct pct-destroy restic borg rclone "
    # databases
    "psql mysql sqlite3 dropdb createdb redis-cli mongosh mongo mongorestore pg_resetwal "
    # users
    "useradd userdel usermod groupadd groupdel passwd chpasswd "
    # firewall
    "iptables ip6tables nft ufw ufw-deny ufw-disable firewall-cmd "
    # schedulers
    "crontab at batch atrm "
    # applet multiplexers
    "busybox toybox"
)
RISKY_PAGES = tuple(_RISKY.split())
RISKY_PAGES_SET = frozenset(RISKY_PAGES)

# Every `systemctl` verb has its own page: all of them are in (services, and the read-only verbs that must
# not be false alarms).
RISKY_PREFIXES = ("systemctl-",)


def _is_risky(page: str) -> bool:
    return page in RISKY_PAGES_SET or page.startswith(RISKY_PREFIXES)


# Programs whose other pages (sub-commands) make the fresh sample's risky part.
RISKY_FAMILY = re.compile(
    r"^(?:aws|az|gcloud|doctl|docker|podman|kubectl|helm|terraform|pulumi|qm|pct|virsh|vagrant|lv|vg|pv|zfs|zpool"
    r"|btrfs|mkfs|systemctl|git-|dnf|apt|pacman|npm|pip|brew|flatpak|snap|ufw|nft|iptables|restic|borg|rclone"
    r"|mysql|pg_|mongo|redis|user|group)"
)


def main() -> None:
    corpus_path, which = sys.argv[1], sys.argv[2]
    rows = [json.loads(line) for line in open(corpus_path, encoding="utf-8")]
    rows = [row for row in rows if not row["description"].startswith("[Interactive]")]
    # The random part is drawn from the pages outside RISKY_PAGES (as first drawn; the systemctl verb pages were
    # added afterwards, so a few of them may be in both: counted once).
    outside = [row for row in rows if row["page"].split("/", 1)[1] not in RISKY_PAGES_SET]
    random_part = random.Random(17).sample(outside, 700)
    in_risky = [row for row in rows if _is_risky(row["page"].split("/", 1)[1])]
    labelled = in_risky + [row for row in random_part if not _is_risky(row["page"].split("/", 1)[1])]
    rest = [row for row in rows if not _is_risky(row["page"].split("/", 1)[1])]
    if which == "labelled":
        chosen = labelled
    else:
        taken = {(row["page"], row["example"]) for row in labelled}
        remaining = [row for row in rest if (row["page"], row["example"]) not in taken]
        generator = random.Random(1717)
        family = [row for row in remaining if RISKY_FAMILY.match(row["page"].split("/", 1)[1])]
        risky_part = generator.sample(family, 100)
        taken |= {(row["page"], row["example"]) for row in risky_part}
        chosen = risky_part + generator.sample(
            [row for row in remaining if (row["page"], row["example"]) not in taken], 200
        )
    for row in chosen:
        print(json.dumps({"page": row["page"], "example": row["example"], "command": row["command"]}))


if __name__ == "__main__":
    main()
