/* The exec trace's answerer (adr/0032): the service thread's wait for notifications, and the answer to the common
 * exec, without the interpreter. Loaded with ctypes (trace/native.py), which releases the GIL for the whole of
 * `answerer_wait`: the common exec is received, attributed, read and answered here, and nothing of it waits for
 * the GIL or for Python's work.
 *
 * The common exec, answered CONTINUE here: the server configured no RELAY_SHELL_EXEC_DENY patterns (the answer
 * never depends on what was read); a native execve (x86_64 or aarch64 ABI; not execveat, not a 32-bit ABI); no
 * tree being started by the Python path (whose first exec is told by kcmp in Python; the native spawner's child's
 * first exec is answered here, answer_first); the process's session is led by the leader
 * of an open tree - the quick attribution of lineage.py (while the tree's record lists entries, the parent is read
 * from /proc/PID/stat too); its path is one the server resolved within the last second without anything of a process in it
 * (resolve.locate_cached's cache: no working directory, descriptor or /proc), byte for byte; the path, at most
 * FAST_ARGS argument pointers and each argument read whole in two process_vm_readv calls, each string within
 * FIRST_CHUNK bytes. Everything else is handed to Python as it was received (the notification, unanswered).
 *
 * What was read is queued for the record only if the answer reached the process (NOTIF_SEND succeeds only for a
 * process that waited all along: its pid was never another's). The answer and the queueing happen under the
 * queue's lock, which Python takes (answerer_swap) when it builds records: an exec answered before a record was
 * taken is in the batch that record is built from.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define KCMP_VM 1

#define LEADERS_MAX 1024
#define PATHS_MAX 64
#define PATH_BYTES 256
#define FIRST_CHUNK 256
#define FAST_ARGS 16
#define PAGE 4096
#define QUEUE_MAX 1024 /* a batch: Python (the GIL) is needed once per batch at most, or when a record is taken */
#define ARENA_BYTES (64 * 1024)
#define FAST_BYTES (FIRST_CHUNK * (FAST_ARGS + 1))

#if defined(__x86_64__)
#define NATIVE_ARCH 0xC000003Eu /* AUDIT_ARCH_X86_64 */
#define NATIVE_EXECVE 59
#elif defined(__aarch64__)
#define NATIVE_ARCH 0xC00000B7u /* AUDIT_ARCH_AARCH64 */
#define NATIVE_EXECVE 221
#else
#error "the exec trace's answerer knows x86_64 and aarch64"
#endif

enum { IDLE = 0, RECEIVED = 1, FULL = 2 };

struct leader {
    int32_t sid;   /* the tree leader's pid: its session's id */
    int32_t tree;  /* Python's token for the tree */
    int32_t fast;  /* its record lists no more entries: the parent is not read */
};

struct known_path {
    uint32_t length; /* 0: free */
    int32_t token;   /* Python's token for its resolution */
    double expires;  /* CLOCK_MONOTONIC seconds */
    char bytes[PATH_BYTES];
};

/* One exec answered here, as Python reads it (trace/native.py DONE). */
struct done {
    double at;
    int32_t pid;
    int32_t tree;
    int32_t path;
    int32_t ppid; /* 0: not read (the record lists no entry for it) */
    uint32_t argc;
    uint32_t offset;
    uint32_t length;
};

struct batch {
    uint32_t count;
    uint32_t used;
    struct done entries[QUEUE_MAX];
    char arena[ARENA_BYTES];
};

/* The first exec of the tree the native spawner (spawner.c) is starting: its own posix_spawn child's, with the very
 * path and argv pointers it was given (the child shares the server's memory until its exec). */
struct first_exec {
    int32_t pending;
    int32_t tree;
    int32_t pid; /* answered here: the child's pid (until the next spawn's) */
    const void *path;
    const void *argv;
};

struct answerer {
    pthread_mutex_t lock;
    int epoll;
    int listener;
    int enabled;
    int starting;
    uint32_t faults;
    uint32_t leaders_count;
    struct leader leaders[LEADERS_MAX];
    struct known_path paths[PATHS_MAX];
    struct batch *filling;
    struct batch *taken;
    struct first_exec first;
    struct seccomp_notif received;
    char scratch[FAST_BYTES + 2 * FIRST_CHUNK];
};

/* What trace/native.py expects (its ABI): a library built from another version of this file is not used. */
#define ANSWERER_ABI 5
int answerer_abi(void) { return ANSWERER_ABI; }

static double monotonic(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* Anonymous mappings: resident only where written (an idle server's memory is a benchmark row, adr/0030). */
static void *mapped(size_t size) {
    void *memory = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return memory == MAP_FAILED ? NULL : memory;
}

struct answerer *answerer_new(int epoll, int listener) {
    struct answerer *self = mapped(sizeof(*self));
    if (self == NULL)
        return NULL;
    self->filling = mapped(sizeof(struct batch));
    self->taken = mapped(sizeof(struct batch));
    if (self->filling == NULL || self->taken == NULL) {
        if (self->filling != NULL)
            munmap(self->filling, sizeof(struct batch));
        if (self->taken != NULL)
            munmap(self->taken, sizeof(struct batch));
        munmap(self, sizeof(*self));
        return NULL;
    }
    pthread_mutex_init(&self->lock, NULL);
    self->epoll = epoll;
    self->listener = listener;
    return self;
}

void answerer_enable(struct answerer *self, int enabled) {
    pthread_mutex_lock(&self->lock);
    self->enabled = enabled;
    pthread_mutex_unlock(&self->lock);
}

void answerer_starting(struct answerer *self, int starting) {
    pthread_mutex_lock(&self->lock);
    self->starting = starting;
    pthread_mutex_unlock(&self->lock);
}

/* A tree's leader (its session's id), or a change of whether its execs are answered here. 0, or -1 when the table
 * is full (that tree's execs then go to Python). */
static int add_leader(struct answerer *self, int32_t sid, int32_t tree, int32_t fast) {
    int result = -1;
    for (uint32_t index = 0; index < self->leaders_count; index++) {
        if (self->leaders[index].sid == sid) {
            self->leaders[index].tree = tree;
            self->leaders[index].fast = fast;
            result = 0;
            break;
        }
    }
    if (result != 0 && self->leaders_count < LEADERS_MAX) {
        self->leaders[self->leaders_count++] = (struct leader){sid, tree, fast};
        result = 0;
    }
    return result;
}

int answerer_leader(struct answerer *self, int32_t sid, int32_t tree, int32_t fast) {
    pthread_mutex_lock(&self->lock);
    int result = add_leader(self, sid, tree, fast);
    pthread_mutex_unlock(&self->lock);
    return result;
}

/* The native spawner is about to start a tree's first process (spawner.c): its exec is answered here. */
void answerer_expect_first(struct answerer *self, const void *path, const void *argv, int32_t tree) {
    pthread_mutex_lock(&self->lock);
    self->first = (struct first_exec){1, tree, 0, path, argv};
    pthread_mutex_unlock(&self->lock);
}

/* posix_spawn returned: no exec is expected any more (its pid stays readable for Python). */
void answerer_first_done(struct answerer *self) {
    pthread_mutex_lock(&self->lock);
    self->first.pending = 0;
    pthread_mutex_unlock(&self->lock);
}

/* The pid whose first exec was answered here for the native spawn of `tree`, 0: none (Python answered it, another
 * tree is being spawned, or not yet). */
int32_t answerer_first_answered(struct answerer *self, int32_t tree) {
    pthread_mutex_lock(&self->lock);
    int32_t pid = self->first.tree == tree ? self->first.pid : 0;
    pthread_mutex_unlock(&self->lock);
    return pid;
}

/* Whether the tree's execs are answered here (every leader of it). */
void answerer_fast(struct answerer *self, int32_t tree, int32_t fast) {
    pthread_mutex_lock(&self->lock);
    for (uint32_t index = 0; index < self->leaders_count; index++)
        if (self->leaders[index].tree == tree)
            self->leaders[index].fast = fast;
    pthread_mutex_unlock(&self->lock);
}

/* The tree's leaders are no longer trusted as they are (its record is written): its execs go to Python. */
void answerer_forget_tree(struct answerer *self, int32_t tree) {
    pthread_mutex_lock(&self->lock);
    uint32_t kept = 0;
    for (uint32_t index = 0; index < self->leaders_count; index++)
        if (self->leaders[index].tree != tree)
            self->leaders[kept++] = self->leaders[index];
    self->leaders_count = kept;
    pthread_mutex_unlock(&self->lock);
}

/* A path whose resolution depended on nothing of a process, until `expires`; replaces slot `slot`. */
void answerer_path(struct answerer *self, uint32_t slot, const char *bytes, uint32_t length, int32_t token,
                   double expires) {
    if (slot >= PATHS_MAX || length == 0 || length >= PATH_BYTES)
        return;
    pthread_mutex_lock(&self->lock);
    struct known_path *known = &self->paths[slot];
    memcpy(known->bytes, bytes, length);
    known->bytes[length] = 0;
    known->length = length;
    known->token = token;
    known->expires = expires;
    pthread_mutex_unlock(&self->lock);
}

/* Under the lock: the batch filled so far handed to Python (which reads it while it holds the tracer's lock, the
 * only place this is called from), an empty one to fill. */
struct batch *answerer_swap(struct answerer *self, uint32_t *faults) {
    pthread_mutex_lock(&self->lock);
    struct batch *full = self->filling;
    self->filling = self->taken;
    self->filling->count = 0;
    self->filling->used = 0;
    self->taken = full;
    *faults = self->faults;
    self->faults = 0;
    pthread_mutex_unlock(&self->lock);
    return full;
}

struct seccomp_notif *answerer_received(struct answerer *self) {
    return &self->received;
}

static int32_t tree_of(struct answerer *self, int32_t sid, int32_t *fast) {
    for (uint32_t index = 0; index < self->leaders_count; index++) {
        if (self->leaders[index].sid == sid) {
            *fast = self->leaders[index].fast;
            return self->leaders[index].tree;
        }
    }
    return -1;
}

/* The process's parent, from /proc/PID/stat (after the last ')': its name may hold any byte); -1 when gone. */
static int32_t parent_of(pid_t pid) {
    char name[32], buffer[1024];
    snprintf(name, sizeof(name), "/proc/%d/stat", (int)pid);
    int descriptor = open(name, O_RDONLY | O_CLOEXEC);
    if (descriptor < 0)
        return -1;
    ssize_t got = read(descriptor, buffer, sizeof(buffer) - 1);
    close(descriptor);
    if (got <= 0)
        return -1;
    buffer[got] = 0;
    char *end = strrchr(buffer, ')');
    char state;
    int parent;
    if (end == NULL || sscanf(end + 1, " %c %d", &state, &parent) != 2)
        return -1;
    return parent;
}

static int32_t path_token(struct answerer *self, const char *bytes, size_t length, double now) {
    for (uint32_t index = 0; index < PATHS_MAX; index++) {
        struct known_path *known = &self->paths[index];
        if (known->length == length && now < known->expires && memcmp(known->bytes, bytes, length) == 0)
            return known->token;
    }
    return -1;
}

static size_t first_span(uint64_t address) {
    size_t room = PAGE - (address % PAGE);
    return room < FIRST_CHUNK ? room : FIRST_CHUNK;
}

/* The native spawner's child's first exec, answered here (1), or not it (0: the next checks, then Python, which tells
 * it by kcmp as on the Python path). It is the server's own exec: its program was resolved, checked against
 * RELAY_SHELL_EXEC_DENY and recorded by Python before the request was submitted, so it is let go unread, as the
 * Python path lets it go. Its session's leader is known from here on (posix_spawn's setsid: its pid). */
static int answer_first(struct answerer *self) {
    struct seccomp_notif *notif = &self->received;
    pthread_mutex_lock(&self->lock);
    int expected = self->first.pending && self->first.pid == 0 && notif->data.arch == NATIVE_ARCH &&
                   notif->data.nr == NATIVE_EXECVE && notif->data.args[0] == (uint64_t)(uintptr_t)self->first.path &&
                   notif->data.args[1] == (uint64_t)(uintptr_t)self->first.argv;
    int32_t tree = self->first.tree;
    pthread_mutex_unlock(&self->lock);
    /* Shares the server's address space: only a vfork-style child of the server does, and it runs nothing of its
     * own before its exec (lineage.shares_memory). */
    if (!expected || syscall(SYS_kcmp, getpid(), (pid_t)notif->pid, KCMP_VM, 0, 0) != 0)
        return 0;
    struct seccomp_notif_resp response = {.id = notif->id, .val = 0, .error = 0,
                                          .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
    pthread_mutex_lock(&self->lock);
    int sent;
    do
        sent = ioctl(self->listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
    while (sent != 0 && errno == EINTR);
    if (sent != 0) {
        if (errno != ENOENT)
            self->faults++;
    } else {
        self->first.pid = (int32_t)notif->pid;
        add_leader(self, (int32_t)notif->pid, tree, 0); /* its first entries are listed: their parent is read */
    }
    pthread_mutex_unlock(&self->lock);
    return 1;
}

/* Read the request and answer it here when it is the common exec: 1 answered (or gone), 0 handed to Python. */
static int try_answer(struct answerer *self) {
    struct seccomp_notif *notif = &self->received;
    if (notif->data.arch != NATIVE_ARCH || notif->data.nr != NATIVE_EXECVE)
        return 0;
    pid_t sid = getsid((pid_t)notif->pid);
    if (sid < 0)
        return 0;
    /* The tables are read under the lock; Python changes them from other threads. */
    pthread_mutex_lock(&self->lock);
    int32_t fast = 0;
    int32_t tree = self->enabled && !self->starting ? tree_of(self, sid, &fast) : -1;
    pthread_mutex_unlock(&self->lock);
    if (tree < 0)
        return 0;
    uint64_t path_address = notif->data.args[0], argv_address = notif->data.args[1];
    if (path_address == 0 || argv_address == 0)
        return 0;
    char *scratch = self->scratch;
    size_t path_span = first_span(path_address);
    size_t pointers_span = PAGE - (argv_address % PAGE);
    if (pointers_span > (FAST_ARGS + 1) * 8)
        pointers_span = (FAST_ARGS + 1) * 8;
    struct iovec local[FAST_ARGS + 1], remote[FAST_ARGS + 1];
    local[0] = (struct iovec){scratch, path_span};
    remote[0] = (struct iovec){(void *)path_address, path_span};
    local[1] = (struct iovec){scratch + FIRST_CHUNK, pointers_span};
    remote[1] = (struct iovec){(void *)argv_address, pointers_span};
    ssize_t got = process_vm_readv(notif->pid, local, 2, remote, 2, 0);
    if (got != (ssize_t)(path_span + pointers_span))
        return 0;
    size_t path_length = strnlen(scratch, path_span);
    if (path_length == path_span || path_length == 0 || scratch[0] != '/')
        return 0;
    uint64_t pointers[FAST_ARGS];
    uint32_t argc = 0;
    int ended = 0;
    for (size_t offset = 0; offset + 8 <= pointers_span; offset += 8) {
        uint64_t pointer;
        memcpy(&pointer, scratch + FIRST_CHUNK + offset, 8);
        if (pointer == 0) {
            ended = 1;
            break;
        }
        if (argc == FAST_ARGS)
            return 0;
        pointers[argc++] = pointer;
    }
    if (!ended)
        return 0;
    double now = monotonic();
    pthread_mutex_lock(&self->lock);
    int32_t path = path_token(self, scratch, path_length, now);
    struct batch *batch = self->filling;
    size_t room = ARENA_BYTES - batch->used;
    pthread_mutex_unlock(&self->lock);
    if (path < 0 || room < FAST_BYTES)
        return 0;
    /* The arguments, each within its first span, read into the arena (the batch cannot be swapped meanwhile: only
     * Python swaps it, and then this thread's `filling` is the other one; so read into scratch and copy). */
    char *arguments = scratch + 2 * FIRST_CHUNK;
    size_t total = 0;
    for (uint32_t index = 0; index < argc; index++) {
        size_t span = first_span(pointers[index]);
        local[index] = (struct iovec){arguments + total, span};
        remote[index] = (struct iovec){(void *)pointers[index], span};
        total += span;
    }
    if (argc > 0) {
        got = process_vm_readv(notif->pid, local, argc, remote, argc, 0);
        if (got != (ssize_t)total)
            return 0;
    }
    /* Each argument NUL-terminated within its span, packed: argument\0argument\0... */
    size_t packed = 0, offset = 0;
    for (uint32_t index = 0; index < argc; index++) {
        size_t span = local[index].iov_len;
        size_t length = strnlen(arguments + offset, span);
        if (length == span)
            return 0;
        memmove(arguments + packed, arguments + offset, length + 1);
        packed += length + 1;
        offset += span;
    }
    /* A listed entry names its parent (read while the process waits: after the answer it may be gone). */
    int32_t parent = 0;
    if (!fast && (parent = parent_of((pid_t)notif->pid)) < 0)
        return 0;
    struct seccomp_notif_resp response = {.id = notif->id, .val = 0, .error = 0,
                                          .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
    pthread_mutex_lock(&self->lock);
    int sent;
    do /* interrupted (a signal for this thread) before the answer was given: the process still waits */
        sent = ioctl(self->listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
    while (sent != 0 && errno == EINTR);
    if (sent != 0) {
        if (errno != ENOENT)
            self->faults++;
        pthread_mutex_unlock(&self->lock);
        return 1; /* gone meanwhile (killed): nothing ran, and what was read may not have been its own */
    }
    batch = self->filling;
    struct done *entry = &batch->entries[batch->count++];
    entry->at = monotonic();
    entry->pid = (int32_t)notif->pid;
    entry->tree = tree;
    entry->path = path;
    entry->ppid = parent;
    entry->argc = argc;
    entry->offset = batch->used;
    entry->length = (uint32_t)(path_length + 1 + packed);
    memcpy(batch->arena + batch->used, scratch, path_length + 1);
    memcpy(batch->arena + batch->used + path_length + 1, arguments, packed);
    batch->used += entry->length;
    pthread_mutex_unlock(&self->lock);
    return 1;
}

/* Wait for notifications and answer the common ones, until one is for Python (RECEIVED: in `received`,
 * unanswered), nothing came for `timeout_ms` (IDLE; `idle_ms` instead while answered execs wait for their record),
 * or the batch is full (FULL). -errno when the listener cannot be read (the tracer stops). */
int answerer_wait(struct answerer *self, int timeout_ms, int idle_ms) {
    for (;;) {
        pthread_mutex_lock(&self->lock);
        uint32_t count = self->filling->count;
        size_t room = ARENA_BYTES - self->filling->used;
        pthread_mutex_unlock(&self->lock);
        if (count >= QUEUE_MAX || room < FAST_BYTES)
            return FULL;
        struct epoll_event event;
        int ready = epoll_wait(self->epoll, &event, 1, count ? idle_ms : timeout_ms);
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (ready == 0)
            return IDLE;
        if (event.events & (EPOLLHUP | EPOLLERR))
            return -EPIPE; /* no task holds the filter any more (the spawner thread ended): nothing will come */
        memset(&self->received, 0, sizeof(self->received)); /* NOTIF_RECV refuses a buffer that is not zeroed */
        if (ioctl(self->listener, SECCOMP_IOCTL_NOTIF_RECV, &self->received) != 0) {
            if (errno == ENOENT || errno == EINTR || errno == EAGAIN)
                continue; /* killed between the wake-up and the receive */
            return -errno;
        }
        if (!answer_first(self) && !try_answer(self))
            return RECEIVED;
    }
}
