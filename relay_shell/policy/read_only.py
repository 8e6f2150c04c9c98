"""The tier-0 list: programs that read, print or compute and change nothing, each with why (checked against the
program's manual), and, for those that write, run or change something when an option, a sub-command, an operand
or their own language says so, the spellings that do (PROBES). Those spellings are handled by a rule (the module
named in the reason) and each classifies at tier 1 or more: `tests/unit/test_read_only_table.py` walks this table.

Interactive programs (top, htop, ncdu, broot, less) also act on keys typed into a session (kill a process, delete a
file, run a shell): those keys are session input (sessions/), and readonly's kernel confinement refuses the change.
"""

from __future__ import annotations

READ_ONLY: dict[str, str] = {}
PROBES: dict[str, tuple[str, ...]] = {}


def _group(reason: str, names: str, **probes: tuple[str, ...]) -> None:
    for name in names.split():
        READ_ONLY[name] = reason
    for name, spellings in probes.items():
        PROBES[name.replace("_", "-") if name not in ("pg_waldump", "pg_amcheck") else name] = spellings


# -- files and text ---------------------------------------------------------------------------------------------
_group(
    "prints files, directory listings or stdin; no option writes a file or runs a program",
    "ls dir vdir cat tac head tail nl wc cut paste join comm fold fmt expand unexpand rev look column tr seq od"
    " hexdump hd strings stat readlink realpath basename dirname namei cmp md5sum sha1sum sha224sum sha256sum"
    " sha384sum sha512sum b2sum cksum sum base32 base64 basenc numfmt factor expr echo yes true false sleep wait"
    " getfacl lsattr getcap getfattr hexyl isutf8 dircolors choose",
)
_group(
    "searches files and prints matches; -f reads patterns from a file; GREP_OPTIONS is checked as options",
    "grep egrep fgrep zgrep zegrep zfgrep bzgrep xzgrep lzgrep zstdgrep zipgrep",
)
_group(
    "searches files and prints matches; --pre/--hostname-bin run a command (output_options)",
    "rg",
    rg=("rg --pre 'touch M' x", "rg --hostname-bin 'touch M' x"),
)
_group(
    "searches files and prints matches; --pager runs a command (output_options)",
    "ag ack",
    ag=("ag --pager 'touch M' x",),
    ack=("ack --pager='touch M' x",),
)
_group(
    "searches files and prints matches; --filter and --pager run commands, --save-config writes (output_options)",
    "ugrep",
    ugrep=("ugrep --filter='pdf:touch M' x", "ugrep --save-config x"),
)
_group(
    "prints decompressed files to stdout; never writes the file back",
    "zcat bzcat xzcat lzcat zstdcat",
)
_group(
    "pages through files; -o/-O write a log, -k reads key bindings, +!CMD/+|CMD run commands, LESSOPEN is checked"
    " (output_options, outputs._less, code_env)",
    "less zless bzless xzless lzless",
    less=("less -o log.txt x", "less '+!touch M' x", "less -k keys x", "LESSOPEN='|touch M %s' less x"),
    zless=("zless '+!touch M' x",),
    bzless=("bzless '+!touch M' x",),
    xzless=("xzless '+!touch M' x",),
    lzless=("lzless '+!touch M' x",),
)
_group("pages through files; MORE is checked as its options (code_env)", "more zmore bzmore xzmore most")
_group(
    "sorts its input to stdout; -o writes a file, --compress-program runs a command (output_options)",
    "sort",
    sort=("sort -o out.txt x", "sort --compress-program='touch M' x"),
)
_group("shuffles lines to stdout; -o writes a file (output_options)", "shuf", shuf=("shuf -o out.txt x",))
_group("removes repeated lines; a second operand is written (outputs._uniq)", "uniq", uniq=("uniq in.txt out.txt",))
_group("hex dump; a second operand is written (outputs._xxd)", "xxd", xxd=("xxd in.bin out.txt",))
_group("describes a file's type; -C compiles a magic file (output_options)", "file", file=("file -C -m magic",))
_group(
    "compares files; --diff-program runs a command, sdiff -o writes the merge (output_options)",
    "diff diff3 sdiff colordiff difft icdiff wdiff",
    diff3=("diff3 --diff-program='touch M' a b c",),
    sdiff=("sdiff -o out.txt a b",),
)
_group("shows a diff; --pager runs a command (output_options)", "delta", delta=("delta --pager='touch M' a b",))
_group(
    "queries JSON, YAML, XML or HTML to stdout; yq/xq -i and --split-exp write files (outputs._yq)",
    "jq yq xq gron jless jp htmlq pup",
    yq=("yq -i '.a=1' f.yaml", "yq -s '.a' f.yaml"),
    xq=("xq -i '.a' f.xml",),
)
_group(
    "checks or pretty-prints XML; -o/--output writes, --shell takes commands that save files (output_options)",
    "xmllint",
    xmllint=("xmllint --output out.xml in.xml", "xmllint --shell in.xml"),
)
_group(
    "reads CSV or TSV and prints a view or statistics",
    "csvlook csvstat csvcut csvgrep csvsort csvjson csvformat tsv-filter tsv-select tsv-summarize tidy-viewer csvlens",
)
_group(
    "csvkit before 2.0 writes FILE_out.csv and FILE_err.csv beside its input (outputs._csvclean)",
    "csvclean",
    csvclean=("csvclean in.csv",),
)
_group(
    "transforms CSV/JSON to stdout; -I edits in place, tee/split and its DSL write files or run commands"
    " (outputs._mlr)",
    "mlr miller",
    mlr=("mlr -I --csv cat f.csv", "mlr --csv put 'tee > \"out.csv\", $*' f.csv"),
    miller=("miller -I --csv cat f.csv",),
)
_group(
    "CSV toolkit printing to stdout; -o writes, index/split/partition write files, qsv foreach/luau/py run code"
    " (output_options, outputs._qsv)",
    "qsv xsv",
    xsv=("xsv split outdir f.csv", "xsv index f.csv"),
    qsv=("qsv foreach col 'touch M' f.csv", "qsv luau map x 'os.execute(1)' f.csv"),
)
_group(
    "prints files with highlighting; --pager runs a command, --generate-config-file writes (output_options)",
    "bat batcat",
    bat=("bat --pager='touch M' x", "bat --generate-config-file"),
)
_group(
    "renders Markdown to the terminal; `glow config` edits its configuration (outputs)", "glow", glow=("glow config",)
)
_group("renders Markdown to the terminal; paging uses PAGER (code_env)", "mdcat")
_group(
    "lists a directory tree; -o writes a file, -R writes 00Tree.html everywhere (output_options)",
    "tree",
    tree=("tree -o out.txt", "tree -R -H . x"),
)
_group("lists directories with colours and icons", "exa eza lsd")
_group(
    "an interactive file tree; --cmd runs its verbs (rm, mv, shell commands), --outcmd writes a file (outputs._broot)",
    "broot",
    broot=("broot --cmd ':rm'", "broot --outcmd out.txt"),
)
_group(
    "finds files by name; -x/-X run a command per match (find.fd_selection, classified as commands)",
    "fd fdfind",
    fd=("fd -x touch M", "fd . -X touch"),
)
_group("looks file names up in a database built by updatedb", "locate mlocate plocate")
# -- computing ----------------------------------------------------------------------------------------------------
_group("computes and prints; --log writes a file (output_options)", "units", units=("units --log out.txt 1m ft",))
_group("an arbitrary-precision calculator reading expressions; it cannot run programs or write files", "bc")
_group("a calculator; `!CMD` in its program runs a command (scripts._dc)", "dc", dc=("dc -e '!touch M'",))
_group(
    "a calculator; its command() function runs a program, -f reads commands from a file (outputs._qalc)",
    "qalc",
    qalc=('qalc \'command("touch", "M")\'', "qalc -f commands.txt"),
)
_group(
    "prints a string for a regular expression; -o writes a file (output_options)",
    "exrex",
    exrex=("exrex -o out.txt a",),
)
_group("generates a graph in DOT on stdout", "gvgen")
_group(
    "counts words in LaTeX; -out= writes a file (output_options)", "texcount", texcount=("texcount -out=out.txt f.tex",)
)
# -- shell builtins and help ------------------------------------------------------------------------------------
_group(
    "a shell builtin that prints, tests or changes only the shell's own state (directory, options, positional"
    " arguments, completion lists); the builtins that evaluate text are rules (builtins.py, scripts.py)",
    "cd pushd popd : exit return set shopt shift getopts break continue setopt unsetopt zle clear reset tput dirs"
    " pwd ulimit umask times unalias",
)
_group(
    "a shell builtin; the variables it sets are checked against the code-carrying table, array subscripts as"
    " arithmetic (builtins.py)",
    "read local declare typeset unset export let",
    export=("export PROMPT_COMMAND='touch M'", "export PAGER='touch M'"),
    declare=("declare -x GIT_PAGER='touch M'",),
    let=("let 'a[$(touch M)]=1'",),
    read=("read PROMPT_COMMAND",),
)
_group(
    "a shell builtin; the text it stores runs later and is classified now (builtins.py, scripts.py)",
    "alias trap bind compgen complete",
    alias=("alias ls='touch M'",),
    trap=("trap 'touch M' EXIT",),
    bind=("bind -x '\"\\C-x\": touch M'",),
    compgen=("compgen -C 'touch M' x",),
    complete=("complete -C 'touch M' x",),
)
_group(
    "prints or tests; `[[ … -eq … ]]` and -v evaluate arithmetic (builtins.py)",
    "test [ [[",
    test=("test -v 'a[$(touch M)]'",),
    **{"[": ("[ -v 'a[$(touch M)]' ]",), "[[": ("[[ -v 'a[$(touch M)]' ]]", "read x; [[ $x -eq 1 ]]")},
)
_group(
    "prints with a format; -v sets a variable, checked against the code-carrying table (builtins.py)",
    "printf",
    printf=("printf -v PROMPT_COMMAND 'touch M'",),
)
_group(
    "the shell's history list; -w/-a write the history file, -s adds a line that can be re-run (scripts.py)",
    "history",
    history=("history -w out.txt", "history -s 'touch M'"),
)
_group(
    "says what a name is or where it is; hash -p makes a name run another program (builtins.py)",
    "type which whence whereis command hash help",
    hash=("hash -p /usr/bin/touch ls",),
)
_group(
    "prints manual pages; -P/--pager and -H/--html run a program, -C reads a configuration (output_options)",
    "man",
    man=("man -P 'touch M' ls", "man -Htouch ls", "man -C conf ls"),
)
_group("searches manual page names and descriptions", "whatis apropos")
_group("prints Info documents; -o and --dribble write files (output_options)", "info", info=("info -o out.txt ls",))
_group("prints command examples; -u updates its page cache (output_options)", "tldr", tldr=("tldr -u",))
_group("prints cheat sheets; -e edits one (output_options)", "cheat", cheat=("cheat -e tar",))
# -- system state -------------------------------------------------------------------------------------------------
_group(
    "lists processes; sends no signals",
    "ps pstree pgrep pidof procs",
)
_group(
    "shows processes or resources live; its keys that kill or renice are session input (sessions, kernel)",
    "top htop btop gtop nvtop iotop iftop nethogs bandwhich nload bmon",
)
_group("shows system activity; -w writes a raw log (output_options)", "atop", atop=("atop -w log 1",))
_group(
    "shows system activity; -w/-s serve it to other hosts, --export writes (output_options)",
    "glances",
    glances=("glances -w", "glances --export csv"),
)
_group(
    "network traffic statistics; --remove, --add, --setalias change its database (outputs._vnstat)",
    "vnstat",
    vnstat=("vnstat --remove -i eth0 --force",),
)
_group("disk usage; `dua i` deletes interactively (outputs._dua)", "df du duf dua", dua=("dua i",))
_group(
    "disk usage browser; -o exports a scan, its d key deletes (-r turns that off) (output_options)",
    "ncdu",
    ncdu=("ncdu -o out.json /",),
)
_group(
    "prints users, sessions, hosts, the clock or limits",
    "free uname id whoami groups who w users last lastb finger pinky tty arch nproc uptime locale getconf"
    " getent printenv cal ncal",
)
_group("last-login records; -C/-S clear or set them (output_options)", "lastlog", lastlog=("lastlog -C -u bob",))
_group(
    "lists hardware, devices, mounts or kernel objects",
    "lscpu lsmem lsns lsipc lslocks lslogins lsirq lsblk lsof lspci lsusb lsmod lsscsi findmnt mountpoint"
    " fc-list fc-match xdpyinfo wayland-info glxinfo vainfo vdpauinfo clinfo lsb_release pmap smem fincore ipcs",
)
_group("identifies block devices; -g rewrites its cache (output_options)", "blkid", blkid=("blkid -g",))
_group("lists hardware; -dump writes a database (output_options)", "lshw", lshw=("lshw -dump out.db",))
_group(
    "reads the firmware's tables; --dump-bin writes a file (output_options)",
    "dmidecode",
    dmidecode=("dmidecode --dump-bin out",),
)
_group("prints system information; -U replaces the program (output_options)", "inxi", inxi=("inxi -U",))
_group(
    "prints hardware information; --log writes, --save-config saves (output_options)",
    "hwinfo",
    hwinfo=("hwinfo --log out.txt", "hwinfo --save-config all"),
)
_group(
    "prints system information; its --config file is bash it sources (outputs._neofetch)",
    "neofetch",
    neofetch=("neofetch --config conf.sh",),
)
_group(
    "prints system information; --gen-config writes (output_options)",
    "fastfetch",
    fastfetch=("fastfetch --gen-config",),
)
_group(
    "prints system information; -s takes a screenshot into a file (output_options)",
    "screenfetch",
    screenfetch=("screenfetch -s",),
)
_group(
    "prints CPU, disk or process statistics; pidstat -e runs a program (outputs._pidstat)",
    "vmstat iostat mpstat pidstat",
    pidstat=("pidstat -e touch M",),
)
_group("system activity reports; -o writes a data file (outputs._sar)", "sar", sar=("sar -o out.dat 1 1",))
_group("system statistics; --output writes a CSV file (output_options)", "dstat", dstat=("dstat --output out.csv",))
_group("reads sensors; -s sets chip limits (output_options)", "sensors", sensors=("sensors -s",))
_group(
    "the service manager's analyses; log-level/log-target with a value change its logging (outputs._systemd_analyze)",
    "systemd-analyze",
    **{"systemd-analyze": ("systemd-analyze log-level debug",)},
)
_group(
    "shows control groups, unit overrides or the environment",
    "systemd-cgls systemd-cgtop systemd-delta systemd-detect-virt systemd-ac-power userdbctl",
)
_group("prints the environment, or runs a command with more variables (a wrapper: wrappers.py)", "env")
_group("sets or prints the date (network._setting): only printing is 0", "date", date=("date -s 2020-01-01",))
# -- network lookups --------------------------------------------------------------------------------------------
_group(
    "looks up names, routes or reachability and prints what it finds",
    "host dig drill nslookup whois ping ping6 fping traceroute traceroute6 tracepath mtr tcptraceroute trip"
    " netstat nmblookup httprobe waybackurls ipcalc sipcalc cidr",
)
_group(
    "lists sockets; -K closes sockets, -D writes a dump (output_options)",
    "ss",
    ss=("ss -K dst 1.2.3.4", "ss -D out.bin"),
)
_group(
    "scans hosts; -o* write reports, --script runs scripts that may attack the target (outputs._nmap)",
    "nmap",
    nmap=("nmap -oN out.txt h", "nmap --script brute h"),
)
_group("tests TLS; --xml writes a report (output_options)", "sslscan", sslscan=("sslscan --xml=out.xml h",))
_group(
    "tests TLS; --logfile, --jsonfile and the like write reports (output_options)",
    "testssl testssl.sh",
    testssl=("testssl --logfile out.log h",),
)
_group(
    "identifies web software; --log-* write reports (output_options)",
    "whatweb",
    whatweb=("whatweb --log-json=out.json h",),
)
_group(
    "recon tools printing what they find; -o writes, -up replaces the program (output_options)",
    "httpx dnsx subfinder amass asnmap tlsx gau",
    httpx=("httpx -o out.txt -u h", "httpx -up"),
    subfinder=("subfinder -o out.txt -d h",),
)
# -- linters and checkers -----------------------------------------------------------------------------------------
_group(
    "checks files and prints findings",
    "shellcheck hadolint yamllint pydocstyle pycodestyle vulture proselint kubeval kubeconform",
)
_group("checks JSON; -i rewrites files in place (output_options)", "jsonlint", jsonlint=("jsonlint -i f.json",))
_group("checks Python; --output-file writes (output_options)", "flake8", flake8=("flake8 --output-file out.txt",))
_group(
    "checks Python; --output writes, --init-hook runs Python, --load-plugins loads modules (output_options)",
    "pylint",
    pylint=("pylint --output out.txt x.py", "pylint --init-hook='import os' x.py", "pylint --load-plugins p x.py"),
)
_group(
    "type-checks Python; its reports write files, --install-types installs packages (output_options)",
    "mypy",
    mypy=("mypy --html-report out x.py", "mypy --install-types x.py"),
)
_group("type-checks Python; --createstub writes stubs (output_options)", "pyright", pyright=("pyright --createstub x",))
_group(
    "type-checks Python; -i edits in place, init/start write or start a server (output_options)",
    "pyre",
    pyre=("pyre -i", "pyre init"),
)
_group("finds security issues; -o writes a report (output_options)", "bandit", bandit=("bandit -o out.txt x.py",))
_group(
    "checks dependencies; --save-json writes, --apply-fixes rewrites requirements (output_options)",
    "safety",
    safety=("safety --save-json out.json", "safety --apply-fixes"),
)
_group(
    "audits dependencies; --fix installs, -o writes, -r installs into a scratch environment to resolve"
    " (output_options)",
    "pip-audit",
    **{"pip-audit": ("pip-audit --fix", "pip-audit -o out.json", "pip-audit -r req.txt")},
)
_group(
    "scans infrastructure code; --output-file-path writes, external checks run code (output_options)",
    "checkov",
    checkov=("checkov --output-file-path out", "checkov --external-checks-dir x"),
)
_group(
    "lints Terraform; --fix rewrites files, --init downloads plugins (output_options)",
    "tflint",
    tflint=("tflint --fix",),
)
_group(
    "scans Terraform; -O writes, --update replaces the program (output_options)", "tfsec", tfsec=("tfsec -O out.json",)
)
_group(
    "scans images and files; -o writes, server serves, plugin install installs (output_options)",
    "trivy",
    trivy=("trivy server", "trivy -o out image x"),
)
_group(
    "scans images; --file writes, db update changes its database (output_options)",
    "grype",
    grype=("grype --file out x", "grype db update"),
)
_group("builds an SBOM; -o FORMAT=FILE writes it (outputs._syft)", "syft", syft=("syft x -o json=out.json",))
_group(
    "finds code patterns; -o writes, -a/--autofix rewrites files, ci uploads (output_options)",
    "semgrep",
    semgrep=("semgrep -o out.txt", "semgrep --autofix", "semgrep ci"),
)
_group("checks prose; sync downloads packages (output_options)", "vale", vale=("vale sync",))
_group(
    "lints Ansible; --fix/--write rewrite files (output_options)",
    "ansible-lint",
    **{"ansible-lint": ("ansible-lint --fix",)},
)
_group(
    "lints GitHub workflows; -shellcheck and -pyflakes name programs it runs (output_options)",
    "actionlint",
    actionlint=("actionlint -shellcheck=/tmp/x",),
)
_group(
    "tests configuration against policies; --update and pull download, push uploads (output_options)",
    "conftest",
    conftest=("conftest push x",),
)
# -- viewers, players and inspectors ------------------------------------------------------------------------------
_group(
    "shows images or documents in a window",
    "sxiv nsxiv viewnior eog ristretto mupdf evince okular xpdf viu catimg chafa timg play",
)
_group(
    "shows images; --action runs a command, -o/-j write, -k keeps downloads (output_options)",
    "feh",
    feh=("feh --action 'touch M' x.png", "feh -o out.png x.png"),
)
_group(
    "shows documents; --synctex-editor-command/-x runs a command (output_options)",
    "zathura",
    zathura=("zathura -x 'touch M' f.pdf",),
)
_group(
    "plays media; -dumpfile/-dumpstream write a file (output_options)",
    "mplayer",
    mplayer=("mplayer -dumpstream -dumpfile out x",),
)
_group(
    "plays media; --o/--record-file write, --script runs a script (output_options)",
    "mpv",
    mpv=("mpv --o=out.mkv x", "mpv --script=x.lua x"),
)
_group(
    "plays media; --sout streams or writes, an http/telnet interface serves other hosts (outputs._vlc)",
    "vlc",
    vlc=("vlc --sout file/ts:out.ts x", "vlc -I http"),
)
_group("prints media information; -report writes a file (output_options)", "ffprobe", ffprobe=("ffprobe -report x",))
_group(
    "prints media information; --LogFile writes (output_options)",
    "mediainfo",
    mediainfo=("mediainfo --LogFile=out.txt x",),
)
_group(
    "prints an image's properties; a `|cmd` input runs cmd, `ephemeral:` deletes its input, `msl:` runs a script"
    " (outputs._identify)",
    "identify",
    identify=("identify '|touch M'", "identify ephemeral:x.png", "identify msl:x.msl"),
)
_group(
    "inspects binaries and archives without running them",
    "objdump readelf nm size wasm-objdump readpe zipinfo lsar pdfinfo pdffonts jwt",
)
_group(
    "shows JSON; arguments that are JavaScript functions run code (outputs._fx)",
    "fx",
    fx=("fx x.json 'x => require(\"child_process\")'",),
)
_group("shows the progress of running copies", "progress")
_group(
    "lists packages nothing depends on; -A/-R/-Z change its keep list (output_options)",
    "deborphan",
    deborphan=("deborphan -A pkg",),
)
_group("queries package or cluster databases and prints", "xbps-query sinfo squeue sreport sacct ntpctl paclog")
_group(
    "inspects a Go process; setgc changes its garbage collector, gc/trace/pprof act on it (output_options)",
    "gops",
    gops=("gops setgc 1 100",),
)
_group("checks or prints files", "grub-script-check idnits")
_group(
    "PostgreSQL inspectors that print; pg_amcheck --install-missing installs an extension, pg_waldump"
    " --save-fullpage writes (output_options)",
    "pg_waldump pg_controldata pg_config pg_isready pg_verifybackup pg_amcheck",
    pg_amcheck=("pg_amcheck --install-missing",),
    pg_waldump=("pg_waldump --save-fullpage=out x",),
)
_group("reports a repository's size", "git-sizer")
_group("multi-call binaries: the applet they run is classified (wrappers.py)", "busybox toybox")
_group("evaluates arithmetic (builtins.py): a[$(…)] subscripts on run-time values are 2", "((")
