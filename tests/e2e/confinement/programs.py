"""What a readonly call may run without the classifier's help (adr/0024): programs installed under the names of
read-only commands (`cat`, `whoami`, `uptime`) in a directory put first on the server's PATH, so the classifier
admits `cat /etc/hostname` while the shell runs something else. The kernel must refuse what they try.

- `cat`: a static binary (gcc -static: no libc of the host, no LD_PRELOAD, no interpreter to read);
- `whoami`: a shell script the classifier never sees;
- `uptime`: an awk program (`#!/usr/bin/awk -f`), awk -f FILE writing a file.

Each tries, in this order, to write a file, change a file's mode, rename and remove a file (in PROBE_DIR), run
`sudo -n true`, and send SIGTERM to the process PROBE_VICTIM (one the test started, outside the call); it prints
one line per attempt, `NAME: ok` or `NAME: <strerror>`, and the static binary exits with the number refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

PROBE_C = r"""
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
static int refused = 0;
static void say(const char *what, int result) {
  if (result == 0) { printf("%s: ok\n", what); return; }
  printf("%s: %s\n", what, strerror(errno)); refused++;
}
int main(void) {
  const char *dir = getenv("PROBE_DIR"), *victim = getenv("PROBE_VICTIM");
  char path[4096], other[4096];
  int fd = open("/etc/hostname", O_RDONLY); char buf[256]; ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf);
  if (n > 0) fwrite(buf, 1, n, stdout);
  fd = open("/dev/null", O_WRONLY | O_TRUNC); say("devnull", fd < 0 ? -1 : (int)(write(fd, "x", 1) != 1));
  const char *tty = ttyname(0);  /* a terminal session's own terminal, reopened by its name and as /dev/tty */
  if (tty) {
    fd = open(tty, O_WRONLY | O_TRUNC); printf("pts-write: %s\n", fd < 0 ? strerror(errno) : "ok");
    fd = open("/dev/tty", O_WRONLY); printf("tty-write: %s\n", fd < 0 ? strerror(errno) : "ok");
  }
  snprintf(path, sizeof path, "%s/marker-static", dir);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644); say("write", fd < 0 ? -1 : (int)(write(fd, "x", 1) != 1));
  snprintf(path, sizeof path, "%s/existing", dir); say("chmod", chmod(path, 04777));
  snprintf(other, sizeof other, "%s/renamed", dir); say("rename", rename(path, other));
  snprintf(path, sizeof path, "%s/doomed", dir); say("unlink", unlink(path));
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) { execl("/usr/bin/sudo", "sudo", "-n", "true", (char *)0); _exit(127); }
  int status = 0; waitpid(child, &status, 0);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  printf("sudo: exit %d\n", code); if (code) refused++;
  say("kill", kill(atoi(victim), SIGTERM));
  return refused;
}
"""

WHOAMI_SH = """#!/bin/sh
echo x > "$PROBE_DIR/marker-sh" && echo "write: ok"
chmod 4777 "$PROBE_DIR/existing" && echo "chmod: ok"
sudo -n true && echo "sudo: ok"
kill -TERM "$PROBE_VICTIM" && echo "kill: ok"
echo root
"""

UPTIME_AWK = """#!/usr/bin/awk -f
BEGIN {
  file = ENVIRON["PROBE_DIR"] "/marker-awk"
  printf "x\\n" > file
  close(file)
  print " 12:00:00 up 1 day"
}
"""


def install_probes(bin_dir: Path) -> None:
    """The three programs in `bin_dir`, under the names of read-only commands."""
    if shutil.which("gcc") is None:
        raise RuntimeError("gcc is needed to build the static probe (Debian: gcc, libc6-dev)")
    bin_dir.mkdir(parents=True, exist_ok=True)
    source = bin_dir / "probe.c"
    source.write_text(PROBE_C)
    subprocess.run(["gcc", "-static", "-O1", "-o", str(bin_dir / "cat"), str(source)], check=True)
    source.unlink()
    for name, text in (("whoami", WHOAMI_SH), ("uptime", UPTIME_AWK)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


def prepare_probe_dir(probe_dir: Path) -> None:
    """The files the probes try to change: `existing` (chmod, rename), `doomed` (unlink)."""
    probe_dir.mkdir(parents=True, exist_ok=True)
    for name in ("existing", "doomed"):
        (probe_dir / name).write_text("keep\n")
        (probe_dir / name).chmod(0o644)


def probe_env(bin_dir: Path, probe_dir: Path, victim: int) -> dict[str, str]:
    """Server settings (for tests.conftest.connect) and the probes' variables, inherited by every call."""
    return {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PROBE_DIR": str(probe_dir),
        "PROBE_VICTIM": str(victim),
    }
