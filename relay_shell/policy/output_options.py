"""The option table of read-only programs that write, change or run something when told to (data only; the
rule that reads it is outputs.spec_verdict): per program, the options that take a value, the options whose
value is a file written, the options that write or change something (with their tier), the options whose value
is a command line the program runs, and the sub-commands that act. Tiers follow adr/0004's rubric.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from relay_shell.policy.calls import long_names
from relay_shell.policy.vocabulary import words


@dataclass(frozen=True)
class Spec:
    """What a program's options and sub-commands do beyond printing."""

    values: frozenset[str]  # every option that takes a value (so that a value is not read as flags)
    outputs: frozenset[str] = frozenset()  # options whose value is a file (or a file name prefix) written
    acts: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # options that write or change: tier, what
    runs: frozenset[str] = frozenset()  # options whose value is a command line the program runs
    verbs: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # sub-commands ("db update") that act
    single_dash: bool = False  # Go-style options: `-name value` is one option, not the bundle -n -a -m -e
    optional: frozenset[str] = frozenset()  # options whose value is only ever attached (`-H[BROWSER]`)
    # The long names an abbreviation may stand for (getopt_long, argp and argparse read `--out=F` as
    # `--output=F`): every long name above, unless the options are Go-style.
    known: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names = long_names(self.values, self.outputs, frozenset(self.acts), self.runs, self.optional)
        object.__setattr__(self, "known", frozenset() if self.single_dash else names)


def _acts(tier: int, what: str, names: str) -> dict[str, tuple[int, str]]:
    """names: space-separated, or comma-separated where a sub-command has two words ("db update,db delete")."""
    return dict.fromkeys(names.split(",") if "," in names else names.split(), (tier, what))


_UPDATES_ITSELF = _acts(2, "replaces its own program with a downloaded one", "-up -update")
_GO_RECON_VALUES = words(
    "-o -output -l -list -u -target -d -domain -r -resolver -t -threads -rl -rate-limit -timeout -retry -w -wordlist"
    " -p -ports -config -a -asn -i -ip -org -f -file -srd -store-response-dir -oD -output-dir -dir -json -log -rf"
    " -df -c -concurrency -delay -H -header -proxy -cn -sni"
)
_GO_RECON = Spec(_GO_RECON_VALUES, words("-o -output -oD -output-dir"), _UPDATES_ITSELF, single_dash=True)

SPECS: dict[str, Spec] = {
    # files and text
    "sort": Spec(
        words(
            "-o --output -k --key -t --field-separator -S --buffer-size -T --temporary-directory --parallel"
            " --batch-size --compress-program --files0-from --random-source"
        ),
        words("-o --output"),
        runs=words("--compress-program"),
    ),
    "shuf": Spec(words("-o --output -n --head-count -i --input-range --random-source"), words("-o --output")),
    "less": Spec(
        words(
            "-o -O --log-file --LOG-FILE -b --buffers -h --max-back-scroll -j --jump-target -k --lesskey-file"
            " -p --pattern -P --prompt -t --tag -T --tag-file -x --tabs -y --max-forw-scroll -z --window -# --shift"
            " -D --color"
        ),
        words("-o -O --log-file --LOG-FILE"),
        _acts(1, "reads key bindings (lesskey), which can run commands, from a file not seen", "-k --lesskey-file"),
    ),
    "tree": Spec(
        words("-o -L -P -I -H -T --filelimit --timefmt --charset --sort"),
        words("-o"),
        _acts(1, "writes 00Tree.html into every directory", "-R"),
    ),
    "sdiff": Spec(
        words("-o --output -w --width -I --ignore-matching-lines --diff-program"),
        words("-o --output"),
        runs=words("--diff-program"),
    ),
    "diff3": Spec(words("-L --label --diff-program"), runs=words("--diff-program")),
    "file": Spec(
        words("-m --magic-file -e --exclude -F --separator -f --files-from -P --parameter --exclude-quiet"),
        acts=_acts(1, "compiles a magic file into a .mgc file", "-C --compile"),
    ),
    "rg": Spec(
        words(
            "-A -B -C -e -f -g -j -m -M -r -t -T -E --pre --pre-glob --type-add --type-clear --glob --iglob"
            " --after-context --before-context --context --regexp --file --threads --max-count --max-columns"
            " --replace --type --type-not --encoding --max-depth --max-filesize --path-separator --sort --sortr"
            " --colors --color --context-separator --field-context-separator --field-match-separator --ignore-file"
            " --dfa-size-limit --regex-size-limit --engine --hostname-bin --hyperlink-format"
        ),
        runs=words("--pre --hostname-bin"),
    ),
    "ugrep": Spec(
        words("-e -f -g -m -A -B -C -t -O -M -K -N -J --regexp --file --glob --filter --index"),
        acts=_acts(1, "writes a configuration file", "--save-config"),
        runs=words("--pager --filter"),
        optional=words("--save-config"),
    ),
    "bat": Spec(
        words("-l --language -H --highlight-line --pager --theme --style -m --map-syntax --tabs --wrap --color"),
        acts=_acts(1, "writes its configuration or cache", "--generate-config-file --build --clear"),
        runs=words("--pager"),
    ),
    "xmllint": Spec(
        words("-o --output --xpath --path --dtdvalid --dtdvalidfpi --relaxng --schema --schematron --encode --pattern"),
        words("-o --output"),
        _acts(1, "takes shell-like commands that save and write files", "--shell"),
    ),
    "ag": Spec(
        words(
            "--pager -p --path-to-ignore -G --file-search-regex -g --ignore --ignore-dir -A -B -C -m --max-count"
            " --depth --workers -W --width --color-line-number --color-match --color-path"
        ),
        runs=words("--pager"),
    ),
    "ack": Spec(
        words(
            "--pager --ackrc --type-add --type-set --type-del -A -B -C -m --max-count --output --match --ignore-dir"
            " --ignore-file --files-from --range-start --range-end"
        ),
        runs=words("--pager"),
    ),
    "delta": Spec(words("--pager --features --syntax-theme -w --width --config"), runs=words("--pager")),
    "glow": Spec(words("-s --style -w --width --config"), verbs=_acts(1, "edits its configuration", "config")),
    "units": Spec(words("--log -f --file -o --output-format -l --locale"), words("--log")),
    "exrex": Spec(words("-o --output -l --limit -d --delimiter -m --max-number"), words("-o --output")),
    "texcount": Spec(words("-out -template -sub -sum -inc -dir"), words("-out"), single_dash=True),
    "blkid": Spec(
        words("-c --cache-file -o --output -s --match-tag -t --match-token -n --match-types -u --usages -p -S -O"),
        acts=_acts(1, "rewrites its cache", "-g --garbage-collect"),
    ),
    "neofetch": Spec(
        words("--config --source --ascii --image --gap --size --crop_mode --backend --colors"),
        acts=_acts(1, "sources a configuration file, which is bash", "--config"),
    ),
    "actionlint": Spec(
        words("-shellcheck -pyflakes -format -config-file -ignore -stdin-filename"),
        runs=words("-shellcheck -pyflakes"),
        single_dash=True,
    ),
    "zathura": Spec(
        words("-x --synctex-editor-command -c --config-dir -d --data-dir -P --page -w --password --mode -e --reparent"),
        runs=words("-x --synctex-editor-command"),
    ),
    "deborphan": Spec(
        words("-A --add-keep -R --del-keep -k --keep-file -s --show-section -P --priority"),
        acts=_acts(2, "changes its list of packages to keep", "-A --add-keep -R --del-keep -Z --zero-keep"),
    ),
    "xsv": Spec(
        words("-o --output -d --delimiter -s --select -n -j --jobs"),
        words("-o --output"),
        verbs=_acts(1, "writes files (an index or the parts of a split)", "index split partition"),
    ),
    "info": Spec(
        words("-d --directory -f --file -n --node -o --output --dribble --restore -k --apropos --index-search"),
        words("-o --output --dribble"),
    ),
    "man": Spec(
        words(
            "-C --config-file -L --locale -m --systems -M --manpath -S -s --sections -e --extension -P --pager"
            " -r --prompt -E --encoding -p --preprocessor -R --recode"
        ),
        acts={
            **_acts(1, "runs a web browser", "-H --html"),
            **_acts(1, "reads a configuration that is not seen", "-C --config-file"),
            **_acts(1, "runs a viewer program (gxditview)", "-X --ditroff"),
        },
        runs=words("-P --pager --html -H"),
        optional=words("-H --html -X"),
    ),
    "tldr": Spec(
        words("-p --platform -L --language -s --source -r --render"),
        acts=_acts(1, "updates or clears its local page cache", "-u --update --clear-cache --update_cache"),
    ),
    "cheat": Spec(words("-e --edit -p --path -t --tag -s --search"), acts=_acts(1, "edits a cheat sheet", "-e --edit")),
    # system state
    "atop": Spec(words("-w -r -b -e -P -S -J"), words("-w")),
    "glances": Spec(
        words("-t --time -B --bind -p --port -c --client -C --config --export --export-csv-file --export-json-file"),
        words("--export-csv-file --export-json-file"),
        {
            **_acts(2, "serves its measurements to other hosts", "-w --webserver -s --server"),
            **_acts(1, "exports its measurements", "--export"),
        },
    ),
    "ncdu": Spec(words("-o -O -f -X --exclude-from --exclude --color -t --threads"), words("-o -O")),
    "lastlog": Spec(
        words("-b --before -t --time -u --user -R --root"),
        acts=_acts(2, "clears or sets users' last-login records", "-C --clear -S --set"),
    ),
    "lshw": Spec(words("-class -C -c -dump -disable -enable"), words("-dump"), single_dash=True),
    "hwinfo": Spec(
        words("--log --save-config --show-config --map --only"),
        words("--log"),
        _acts(2, "saves hardware configuration under /var/lib/hardware", "--save-config"),
    ),
    "inxi": Spec(words("-c -v -y -W --weather-unit"), acts=_acts(2, "replaces the inxi program", "-U --update")),
    "fastfetch": Spec(
        words("-c --config -l --logo -s --structure --logo-type --color"),
        acts=_acts(1, "writes a configuration file", "--gen-config --gen-config-force"),
    ),
    "screenfetch": Spec(
        words("-D -A -S -o -e -c -a -w"),
        acts=_acts(1, "takes a screenshot into a file", "-s"),
        runs=words("-S"),
    ),
    "dstat": Spec(words("--output -C -D -I -N -S -T"), words("--output")),
    "sensors": Spec(words("-c --config-file"), acts=_acts(2, "sets chip limits", "-s --set")),
    "dmidecode": Spec(
        words("-d --dev-mem -t --type -s --string -H --handle --from-dump --dump-bin --oem-string"),
        words("--dump-bin"),
    ),
    # network
    "ss": Spec(
        words("-f --family -A --query --socket -F --filter -D --diag -N --net"),
        words("-D --diag"),
        _acts(2, "closes sockets", "-K --kill"),
    ),
    "sslscan": Spec(words("--xml --targets --sni-name --ipv4 --certs --pk --pkpass"), words("--xml")),
    "testssl": Spec(
        words(
            "--logfile -oL --jsonfile -oj --jsonfile-pretty -oJ --csvfile -oC --htmlfile -oH --outFile -oA"
            " --outfile -oa -t --starttls --file -f --ip --nodns --mode --mapping --color --severity --outprefix"
        ),
        words(
            "--logfile -oL --jsonfile -oj --jsonfile-pretty -oJ --csvfile -oC --htmlfile -oH --outFile -oA"
            " --outfile -oa"
        ),
        _acts(1, "writes a report file", "--log --logging --json --json-pretty --csv --html"),
        single_dash=True,
    ),
    "whatweb": Spec(
        words(
            "--log-brief --log-verbose --log-errors --log-xml --log-json --log-json-verbose --log-magictree"
            " --log-object --log-sql --log-sql-create -i --input-file -a --aggression -U --user-agent -p --plugins"
        ),
        words(
            "--log-brief --log-verbose --log-errors --log-xml --log-json --log-json-verbose --log-magictree"
            " --log-object --log-sql --log-sql-create"
        ),
    ),
    "httpx": Spec(
        _GO_RECON_VALUES | words("--download"),
        words("-o -output -srd -store-response-dir --download"),
        {
            **_UPDATES_ITSELF,
            **_acts(1, "stores responses or screenshots in files", "-sr -store-response -ss -screenshot"),
        },
        single_dash=True,
    ),
    "dnsx": _GO_RECON,
    "subfinder": _GO_RECON,
    "asnmap": _GO_RECON,
    "tlsx": _GO_RECON,
    "amass": Spec(
        _GO_RECON_VALUES | words("-oA"), words("-o -output -dir -json -log -oA"), _UPDATES_ITSELF, single_dash=True
    ),
    "gau": Spec(words("--o --output --threads --blacklist --providers --from --to --config"), words("--o --output")),
    # linters and checkers
    "flake8": Spec(
        words("--output-file --config --select --ignore --extend-ignore --max-line-length"), words("--output-file")
    ),
    "pylint": Spec(
        words("--output --rcfile --disable --enable -j --jobs --load-plugins --init-hook"),
        words("--output"),
        {
            **_acts(2, "runs the Python code it is given", "--init-hook"),
            **_acts(1, "loads plugin modules", "--load-plugins"),
        },
    ),
    "mypy": Spec(
        words(
            "--junit-xml --html-report --xml-report --txt-report --linecount-report --linecoverage-report"
            " --lineprecision-report --any-exprs-report --cobertura-xml-report --memory-xml-report --config-file -p"
            " --package -m --module -c --command --python-version --cache-dir"
        ),
        words(
            "--junit-xml --html-report --xml-report --txt-report --linecount-report --linecoverage-report"
            " --lineprecision-report --any-exprs-report --cobertura-xml-report --memory-xml-report"
        ),
        _acts(2, "installs packages", "--install-types"),
    ),
    "pyright": Spec(
        words(
            "-p --project --pythonpath --pythonplatform --pythonversion -t --typeshedpath --venvpath --level"
            " --createstub --verifytypes --threads"
        ),
        acts=_acts(1, "writes type stubs or a baseline file", "--createstub --writebaseline"),
    ),
    "pyre": Spec(
        words("--source-directory --search-path --typeshed --output --number-of-workers"),
        acts=_acts(2, "edits files in place", "-i --in-place"),
        verbs={
            **_acts(1, "writes its configuration", "init"),
            **_acts(1, "starts or stops its server", "start restart stop kill"),
        },
    ),
    "bandit": Spec(
        words(
            "-o --output -f --format -c --configfile -p --profile -t --tests -s --skip -x --exclude -b --baseline"
            " --msg-template --ini"
        ),
        words("-o --output"),
    ),
    "safety": Spec(
        words("--save-json --save-html --output -r --file --key --policy-file --save-as"),
        words("--save-json --save-html"),
        {**_acts(2, "rewrites requirement files", "--apply-fixes"), **_acts(1, "writes a report file", "--save-as")},
    ),
    "pip-audit": Spec(
        words(
            "-r --requirement -f --format -o --output --cache-dir --index-url --extra-index-url -s"
            " --vulnerability-service --ignore-vuln --path"
        ),
        words("-o --output"),
        {
            **_acts(2, "installs fixed versions of packages", "--fix"),
            **_acts(
                1, "installs the requirements into a scratch environment, running their build code", "-r --requirement"
            ),
        },
    ),
    "checkov": Spec(
        words(
            "-d --directory -f --file --framework -o --output --output-file-path --create-config --config-file -c"
            " --check --skip-check --external-checks-dir --external-checks-git"
        ),
        words("--output-file-path --create-config"),
        _acts(1, "runs check code from a directory or repository", "--external-checks-dir --external-checks-git"),
    ),
    "tflint": Spec(
        words("-c --config -f --format --chdir --filter --var-file --var --only --disable-rule --enable-rule"),
        acts={**_acts(2, "rewrites files in place", "--fix"), **_acts(1, "downloads plugins", "--init")},
    ),
    "tfsec": Spec(
        words("-O --out -f --format --tfvars-file -e --exclude --config-file -m --minimum-severity"),
        words("-O --out"),
        _acts(2, "replaces its own program with a downloaded one", "--update"),
    ),
    "trivy": Spec(
        words("-o --output -f --format -s --severity --scanners --cache-dir --config -c --template -t"),
        words("-o --output"),
        verbs={
            **_acts(2, "serves scans to other hosts", "server"),
            **_acts(1, "deletes its caches", "clean"),
            **_acts(
                2,
                "installs or removes plugins",
                "plugin install,plugin uninstall,plugin update,plugin upgrade,module install,module uninstall",
            ),
        },
    ),
    "grype": Spec(
        words("--file -o --output -c --config --fail-on --only-fixed-in --exclude --scope"),
        words("--file"),
        verbs=_acts(1, "updates or deletes its vulnerability database", "db update,db delete,db import"),
    ),
    "semgrep": Spec(
        words(
            "-o --output --json-output --sarif-output --text-output --emacs-output --vim-output --gitlab-sast-output"
            " --gitlab-secrets-output --junit-xml-output -c --config -e --pattern -l --lang -f --exclude --include"
        ),
        words(
            "-o --output --json-output --sarif-output --text-output --emacs-output --vim-output --gitlab-sast-output"
            " --gitlab-secrets-output --junit-xml-output"
        ),
        _acts(2, "rewrites files in place", "-a --autofix"),
        verbs={
            **_acts(1, "stores a login token", "login"),
            **_acts(2, "uploads its findings or installs a program", "ci install-semgrep-pro publish"),
        },
    ),
    "vale": Spec(words("--config --output --glob --minAlertLevel --ext"), verbs=_acts(1, "downloads packages", "sync")),
    "ansible-lint": Spec(
        words("-c --config-file -r --rules-dir -x --skip-list -w --warn-list -t --tags -f --format -p"),
        acts={
            **_acts(2, "rewrites files in place", "--fix --write"),
            **_acts(1, "writes an ignore file", "--generate-ignore"),
        },
    ),
    "conftest": Spec(
        words("-p --policy -o --output -n --namespace --data -d --update"),
        acts=_acts(1, "downloads policies", "--update"),
        verbs={**_acts(1, "downloads policies", "pull"), **_acts(2, "pushes policies to a registry", "push")},
    ),
    "jsonlint": Spec(
        words("-t --indent -V --validate -e --environment"), acts=_acts(2, "rewrites files in place", "-i --in-place")
    ),
    # viewers, players, inspectors
    "feh": Spec(
        words(
            "-A --action --action1 --action2 --action3 --action4 --action5 --action6 --action7 --action8 --action9"
            " --info -o --output --output-dir -j -D --slideshow-delay -E --thumb-height -y --thumb-width -W"
            " --limit-width -H --limit-height -e --font -C --fontpath -g --geometry -B --image-bg -S --sort"
            " --on-last-slide --index-info --title -^ -T --theme -b --bg -f --filelist -M --menu-font -Z"
        ),
        words("-o --output --output-dir -j"),
        _acts(1, "keeps the files it downloads", "-k --keep-http"),
        words(
            "-A --action --action1 --action2 --action3 --action4 --action5 --action6 --action7 --action8 --action9"
            " --info"
        ),
    ),
    "mplayer": Spec(
        words("-dumpfile -vo -ao -ss -endpos -fs -loop -sub -playlist -input"),
        words("-dumpfile"),
        _acts(1, "dumps a stream into a file", "-dumpstream -dumpaudio -dumpvideo"),
        single_dash=True,
    ),
    "mpv": Spec(
        words("--o --stream-record --record-file --log-file --dump-stats --profile --speed --sub-file --script"),
        words("--o --stream-record --record-file --log-file --dump-stats"),
        _acts(1, "runs a script", "--script --scripts"),
    ),
    "vlc": Spec(
        words("--sout -I --intf --extraintf --http-host --http-port --telnet-port"),
        acts=_acts(1, "streams or writes its output", "--sout"),
    ),
    "ffprobe": Spec(
        words("-v -loglevel -select_streams -show_entries -of -print_format -i -f"),
        acts=_acts(1, "writes a report file", "-report"),
        single_dash=True,
    ),
    "mediainfo": Spec(words("--LogFile --Output --Language"), words("--LogFile")),
    "gops": Spec(
        frozenset(),
        verbs={
            **_acts(2, "changes a running program's garbage collector", "setgc"),
            **_acts(1, "runs a program's garbage collector or writes a profile", "gc trace pprof-cpu pprof-heap"),
        },
    ),
    "pg_amcheck": Spec(
        words(
            "-d --database -t --table -s --schema -i --index -r --relation -j --jobs -h --host -p --port -U"
            " --username --maintenance-db --startblock --endblock"
        ),
        acts=_acts(2, "installs the amcheck extension", "--install-missing"),
    ),
    "pg_waldump": Spec(
        words("-p --path -s --start -e --end -n --limit -r --rmgr -t --timeline --save-fullpage"),
        words("--save-fullpage"),
    ),
    "systemd-analyze": Spec(
        words(
            "--root --image --unit --security-policy --offline --threshold --json --iterations --base-time -H"
            " --host -M --machine --order --require --from-pattern --to-pattern --fuzz --man --generators"
        ),
        verbs=_acts(2, "changes the service manager's logging", "set-log-level set-log-target"),
    ),
}
SPECS["batcat"] = SPECS["bat"]
SPECS["testssl.sh"] = SPECS["testssl"]
SPECS["qsv"] = Spec(
    SPECS["xsv"].values,
    SPECS["xsv"].outputs,
    verbs={
        **SPECS["xsv"].verbs,
        **_acts(2, "runs a command for every row, or Lua or Python code", "foreach luau py"),
        **_acts(1, "writes files", "to excel sqlp"),
    },
)
