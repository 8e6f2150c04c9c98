"""The classifier's vocabulary: program names by tier, wrappers and their options, system directories,
critical files, devices, Python calls that run commands. Data only; the rules that use it are the rule modules
`rules.py` gathers, `verbs.py`, `windows.py` and `sql.py`.
"""

from __future__ import annotations

import re


def words(text: str) -> frozenset[str]:
    """A set of names written as one space-separated string (the tables below are long)."""
    return frozenset(text.split())


SHELLS = words("sh bash dash zsh ksh mksh ash fish csh tcsh yash hush")
INTERPRETERS = words(
    "python python2 python3 pypy pypy3 perl ruby node nodejs deno bun php lua luajit tclsh wish awk gawk mawk nawk"
    " osascript Rscript julia"
)
# Programs that run a named target whose commands the classifier cannot see (a Makefile, package.json, a
# Rakefile): a "list" or "help" target there runs whatever the file says, so their operands are no evidence.
TASK_RUNNERS = words("make gmake just rake task invoke ant gradle gradlew mvn nx turbo lerna npx pnpx bunx tox nox")

# Stateful programs (tier 2) that have no finer rule.
STATEFUL = words(
    "chmod chown chgrp setfacl chattr chcon restorecon setfiles fixfiles semanage setsebool truncate"
    " kill pkill killall killall5 skill slay xkill service update-rc.d chkconfig rc-update rc-service sv"
    " iptables-restore ip6tables-restore nft-restore ebtables arptables pfctl route ifup ifdown"
    " mount umount fusermount fusermount3 swapon swapoff losetup modprobe rmmod insmod depmod"
    " useradd adduser usermod userdel deluser groupadd addgroup groupdel delgroup groupmod gpasswd passwd"
    " chpasswd chage chsh chfn newusers vipw vigr visudo smbpasswd pdbedit dropuser createuser createdb"
    " update-alternatives update-grub grub-mkconfig grub2-mkconfig mkinitfs mkinitcpio dracut update-initramfs"
    " setcap sysctl ntpdate hwclock timedatectl hostnamectl resolvconf netplan ethtool iwconfig tc brctl"
    " ssh-copy-id certbot a2enmod a2dismod a2ensite a2dissite ufw firewall-cmd at batch atrm crontab"
    " reboot-notifier newgrp sg rfkill xdp-filter authconfig aa-disable aa-enforce"
    " aa-complain apparmor_parser semodule setenforce topgrade login pacstrap systemd-cryptenroll tunelp"
    " dphys-swapfile"
)

IRREVERSIBLE = words(
    "shred srm blkdiscard mkswap mke2fs mkdosfs mkntfs mkexfatfs mformat kexec wipe nwipe scrub"
    " lvremove vgremove pvremove pvcreate dropdb pg_resetwal pg_rewind"
)
POWER = words("shutdown reboot halt poweroff")
ESCALATION = words("sudo doas pkexec su run0 gksudo gksu kdesu kdesudo sudoedit runuser")

# Wrapper command -> options that take a separate value (so the value is not mistaken for the command). The
# wrapped command runs with the same effect, so the classifier looks through them. Options whose value may only
# be attached (`--block-signal[=SIG]`, `-i[R]`) are wrappers._OPTIONAL_VALUES; checked against --help where the
# program is installed.
WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": words(
        "-u -g -h -p -C -D -r -R -t -U -T --user --group --host --prompt --chdir --role --type --chroot --close-from"
        " --command-timeout --other-user"
    ),
    "doas": words("-u -C"),
    "pkexec": words("--user"),
    "run0": words("-u --user -g --group -D --chdir --description --slice --unit --property --setenv"),
    "gksudo": words("-u --user -m --message -D --description"),
    "gksu": words("-u --user -m --message -D --description"),
    "kdesu": words("-u -c -p -f -i --attach"),
    "env": words("-u --unset -C --chdir -S --split-string"),
    "nice": words("-n --adjustment"),
    "ionice": words("-c -n -p -P -u --class --classdata --pid --pgid --uid"),
    "nohup": frozenset(),
    "time": words("-f -o --format --output"),
    "prlimit": words("-o --output"),  # resource options take their value attached only (-n10, --nofile=10)
    # the dynamic loader (ld-linux-x86-64.so.2, ld.so) run as a program runs the program it is given
    "ld.so": words(
        "--library-path --preload --audit --argv0 --inhibit-rpath --glibc-hwcaps-prepend --glibc-hwcaps-mask"
    ),
    "command": frozenset(),
    "exec": words("-a"),
    "builtin": frozenset(),
    "stdbuf": words("-i -o -e --input --output --error"),
    "setsid": frozenset(),
    "unbuffer": frozenset(),
    "caffeinate": words("-t -w"),
    "catchsegv": frozenset(),
    "torsocks": words("-u -p -a -P"),
    "torify": frozenset(),
    "proxychains": words("-f"),
    "proxychains4": words("-f"),
    "firejail": frozenset(),
    "unshare": words(
        "-S -G -R -w --setuid --setgid --root --wd --map-user --map-group --map-users --map-groups --propagation"
        " --setgroups --monotonic --boottime"
    ),
    # nsenter -r/-w/--root/--wd take a directory only attached (-r/srv, --root=/srv): wrappers.py
    "nsenter": words("-t -S -G -W --target --setuid --setgid --wdns"),
    "systemd-inhibit": words("--what --who --why --mode"),
    "systemd-run": words(
        "-u -p -E -M -H --unit --property --setenv --description --slice --machine --host --uid --gid --nice"
        " --service-type --working-directory --path-property --socket-property --timer-property --on-active"
        " --on-boot --on-startup --on-unit-active --on-unit-inactive --on-calendar"
    ),
    "strace": words(
        "-e -o -p -s -u -E -a -b -I -O -S -P -X -U --output --attach --user --env --trace --trace-path"
        " --string-limit --signal --status --columns --detach-on --interruptible --summary-sort-by"
        " --summary-columns --const-print-style --summary-syscall-overhead --inject --fault"
    ),
    "ltrace": words("-e -o -p -s -u -a -n -x -w -A -F -D -l --output --library --indent"),
    "valgrind": frozenset(),
    "xargs": words(
        "-I -J -n -P -d -L -s -a -E --max-args --max-procs --delimiter --arg-file --max-lines --max-chars"
        " --process-slot-var"
    ),
    "parallel": words("-j -S --jobs --sshlogin --joblog --results --delay --timeout -a --arg-file"),
    "numactl": words(
        "-C -N -m -p -i -w --physcpubind --cpunodebind --membind --preferred --interleave --weighted-interleave"
        " --preferred-many"
    ),
    "trickle": words("-u -d -w -t -l -n"),
    "eatmydata": frozenset(),
    "nocache": frozenset(),
    "daemonize": words("-c -e -E -o -p -l -u"),
    "dtach": words("-a -A -c -n -e -r"),
    "mpirun": words("-n -np -c -H -N -x --host --hostfile --machinefile --map-by --bind-to --rank-by --wdir"),
    "mpiexec": words("-n -np -c -H -N -x --host --hostfile --machinefile --map-by --bind-to --rank-by --wdir"),
}
# Wrappers whose first operand is not the command: `chrt -f 99 cmd`, `taskset -c 0-3 cmd`, `flock /lock cmd`,
# `chroot /srv/root cmd`, `timeout 10 cmd`, `faketime 'yesterday' cmd`. (flock -c and sg: wrappers.py.)
WRAPPER_OPERANDS: dict[str, tuple[frozenset[str], int]] = {
    "chrt": (words("-T -P -D --sched-runtime --sched-period --sched-deadline"), 1),
    "taskset": (frozenset(), 1),
    "flock": (words("-w --timeout -E --conflict-exit-code"), 1),
    "chroot": (words("--userspec --groups"), 1),
    "timeout": (words("-s -k --signal --kill-after"), 1),
    "faketime": (words("-p --date-prog"), 1),  # -f (the advanced format) and -m are flags
    "lckdo": (words("-W"), 1),
    "envdir": (frozenset(), 1),
}
# Top-level system directories: recursive chmod/chown or a move of one of them is irreversible.
SYSTEM_DIRS = words(
    "/etc /usr /var /boot /home /bin /sbin /lib /lib32 /lib64 /libx32 /root /opt /srv /dev /proc /sys /mnt /media"
    " /run /snap /tmp /efi /usr/bin /usr/sbin /usr/lib /usr/lib64 /usr/share /usr/include /var/lib /var/log"
)
ROOTISH = words("/ ~ ~/ $HOME ${HOME} /* /. ~/* $HOME/ $HOME/* ${HOME}/ ${HOME}/*")
# Writes below these are system changes (tier 2); /srv, /home, /opt, /mnt, /tmp hold the user's own files.
PROTECTED_PREFIXES = (
    "/etc/",
    "/boot/",
    "/usr/",
    "/bin/",
    "/sbin/",
    "/lib/",
    "/lib32/",
    "/lib64/",
    "/proc/",
    "/sys/",
    "/dev/",
    "/var/lib/",
    "/var/spool/",
    "/root/",
    "/efi/",
)
# Shell and login configuration in a home directory: editing it changes every later session.
# Files whose content a program later runs, loads or obeys as code (a write there is a change to what runs, 2):
# shell and login files, ssh, autostart and systemd units; and (round 5) git's configuration and hooks in any
# repository (`core.fsmonitor` in .git/config runs at the next `git status`, which is 0), the user's gitconfig,
# editors', pagers', clients' and tools' rc files that run commands (vim, less, tmux, gdb, psql, mysql's pager,
# curl/wget output options, npm/yarn scripts, kube/aws/docker credential programs, cargo runners, pip indexes,
# fish/nvim config), and Python's start-up hooks (sitecustomize, .pth files in site-packages).
USER_CONFIG = re.compile(
    r"^(?:~|\$HOME|\$\{HOME\}|/home/[^/]+|/root)/(?:\.(?:bashrc|bash_profile|bash_login|bash_logout|profile|zshrc"
    r"|zprofile|zshenv|zlogin|zlogout|inputrc|netrc|pam_environment|xinitrc|xprofile|xsession|gitconfig|vimrc"
    r"|gvimrc|exrc|lesskey|curlrc|wgetrc|npmrc|yarnrc|yarnrc\.yml|pythonrc|tmux\.conf|screenrc|gdbinit|psqlrc"
    r"|sqliterc|my\.cnf|irbrc|pryrc|Rprofile|muttrc|mailrc)$|\.ssh/|\.config/autostart/|\.config/systemd/|\.gnupg/"
    r"|\.config/(?:git|nvim|pip|tmux)/|\.config/fish/(?:config\.fish$|conf\.d/)|\.kube/config$|\.aws/(?:config|credentials)$|\.docker/config\.json$"
    r"|\.cargo/config|\.pip/)"
    r"|^(?:.*/)?\.git/(?:config$|hooks/|modules/.*/(?:config$|hooks/))"
    r"|^(?:.*/)?(?:site|dist)-packages/(?:[^/]+\.pth|sitecustomize\.py|usercustomize\.py)$"
)
CRITICAL_FILES = words(
    "/etc/passwd /etc/shadow /etc/group /etc/gshadow /etc/sudoers /etc/fstab /etc/hosts /etc/resolv.conf"
    " /etc/crontab /etc/ssh/sshd_config /etc/pam.d /etc/security /etc/inittab /etc/default/grub /etc/login.defs"
    " /etc/nsswitch.conf /etc/ld.so.preload /etc/ld.so.conf /etc/environment /etc/profile /etc/bash.bashrc"
    " /proc/sysrq-trigger /etc/machine-id /etc/hostname"
)
# /dev entries that are not disks: writing to them destroys nothing.
CHARACTER_DEVICES = re.compile(
    r"/dev/(?:null|zero|full|random|urandom|stdin|stdout|stderr|tty\w*|pts/|fd/|console|ptmx|shm/|mqueue/|kmsg"
    r"|log$|snd/|dri/|input/|video\d|lp\d|cu\w*|net/|ppp|usb/hiddev|hidraw)"
)
REDIRECT_WRITE = words("> >> >| &> &>> <> >&")

DB_CLIENTS = words(
    "psql mysql mariadb sqlite3 sqlite clickhouse-client clickhouse sqlcmd cqlsh duckdb mycli pgcli usql isql"
    " bq snowsql trdsql cockroach"
)
# Programs that read their commands from stdin when given no script: stdin is shell text for them.
STDIN_SHELLS = words("at batch")

# Programs that serve a network port to other hosts by default (tier 2: a listener reachable from outside).
NETWORK_LISTENERS = words(
    "http-server updog simplehttpserver gotty browser-sync live-server mosquitto nginx httpd apache2 apachectl"
    " lighttpd cockpit-ws syncthing proxify netserver iperf iperf3 ngrok cloudflared sshd vsftpd smbd nmbd"
    " dnsmasq hostapd http-server-upload miniserve dufs webfsd darkhttpd busybox-httpd krfb"
    " krfb-virtualmonitor x11vnc vncserver tightvncserver websockify ttyd wetty frps chisel"
)

PYTHON_SHELL_CALL = re.compile(
    r"(?:os\.system|os\.popen|subprocess\.\w+|check_output|check_call)\(\s{0,8}"
    r"(?:\[?\s{0,8})(?P<quote>['\"])(?P<body>[^'\"\n]{0,4096})(?P=quote)"
)
PYTHON_STATEFUL = (
    "shutil.rmtree",
    "os.remove",
    "os.unlink",
    "os.rmdir",
    "os.kill",
    ".unlink(",
    ".rmdir(",
    "os.system",
    "subprocess",
    "os.popen",
    "os.exec",
    "os.chmod",
    "os.chown",
    "shutil.move",
)
PYTHON_ROOT_RMTREE = re.compile(r"rmtree\(\s{0,8}['\"](?:/|/etc|/usr|/var|/boot|/home|~)/?['\"]")
