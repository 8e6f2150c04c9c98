"""C programs that attack the exec trace (review of issue 19), compiled with gcc into a test's directory."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

# Execs a program from its own memory mapped at addresses of the server's thread arenas and heap (from
# /proc/SERVER/maps), at and around the offset where the spawner threads' first-exec path buffer was found by the
# review: the address the former filter let through untrapped. Every exec must be trapped, so every one is seen
# and checked against EXEC_DENY.
FROM_SERVER_ADDRESSES = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
extern char **environ;
static int find_server(void) {
  int pid = getppid();
  for (int i = 0; i < 20 && pid > 1; i++) {
    char p[64], buf[4096]; snprintf(p, 64, "/proc/%d/cmdline", pid); FILE *f = fopen(p, "r"); if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f); fclose(f);
    for (size_t k = 0; k < n; k++) if (!buf[k]) buf[k] = ' ';
    buf[n] = 0; if (strstr(buf, "relay_shell")) return pid;
    snprintf(p, 64, "/proc/%d/stat", pid); f = fopen(p, "r"); if (!f) return 0;
    n = fread(buf, 1, sizeof buf - 1, f); fclose(f); buf[n] = 0;
    char *r = strrchr(buf, ')'); int pp; sscanf(r + 2, "%*c %d", &pp); pid = pp;
  }
  return 0;
}
int main(int argc, char **argv) {
  const char *payload = argv[1];
  int server = find_server();
  char p[64]; snprintf(p, 64, "/proc/%d/maps", server); FILE *f = fopen(p, "r");
  if (!f) { perror("maps"); return 2; }
  char line[512]; int tried = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi; char perm[8]; char path[256] = "";
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &lo, &hi, perm, path) < 3) continue;
    if (strcmp(perm, "rw-p") || (path[0] && strcmp(path, "[heap]"))) continue;
    if (lo % 0x4000000 && strcmp(path, "[heap]")) continue;
    if (hi - lo > (64 << 20)) continue;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
    char *m = mmap((void *)lo, 0x4000, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (m != (void *)lo) continue;
    for (unsigned long offset = 0x1000; offset < 0x1400; offset += 16) {
      strcpy(m + offset, payload); char *av[] = {(char *)payload, 0};
      tried++; execve(m + offset, av, environ);
    }
    munmap(m, 0x4000);
  }
  printf("tried %d addresses, none ran\n", tried);
  return 0;
}
"""

# An i386 execve by `int 0x80` from a 64-bit process: 32-bit pointers to a path and argv below 4 GiB.
INT80 = r"""
#include <string.h>
#include <sys/mman.h>
int main(int argc, char **argv) {
  char *m = mmap((void *)0x100000, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  strcpy(m, "/bin/echo"); strncpy(m + 64, argv[1], 128);
  unsigned *av = (unsigned *)(m + 256); av[0] = (unsigned)(long)m; av[1] = (unsigned)(long)(m + 64); av[2] = 0;
  unsigned *ev = (unsigned *)(m + 512); ev[0] = 0;
  long r; __asm__ volatile("int $0x80" : "=a"(r) : "a"(11), "b"(m), "c"(av), "d"(ev) : "memory");
  return 1;
}
"""

# Makes itself non-dumpable, then execs: a server without CAP_SYS_PTRACE cannot read its memory.
NODUMP = r"""
#include <stdio.h>
#include <unistd.h>
#include <sys/prctl.h>
extern char **environ;
int main(int argc, char **argv) {
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  char *av[] = {"echo", argv[1], 0};
  execve("/bin/echo", av, environ); perror("execve"); return 1;
}
"""


def compile_program(source: str, target: Path) -> Path:
    gcc = shutil.which("gcc")
    assert gcc is not None, "gcc is needed to build the attack programs"
    source_path = target.with_suffix(".c")
    source_path.write_text(source)
    subprocess.run([gcc, "-O1", "-o", str(target), str(source_path)], check=True, capture_output=True, timeout=60)
    target.chmod(0o755)
    return target
