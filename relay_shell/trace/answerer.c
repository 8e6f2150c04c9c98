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
 * FAST_ARGS argument pointers and each argument read whole, each string within FIRST_CHUNK bytes: one
 * process_vm_readv for the path's page and the pointers, a second only for arguments outside that page. The parent
 * (/proc/PID/stat) is read for as many execs as the tree's record may still list (Python's bound, counted down
 * here). Everything else is handed to Python as it was received (the notification, unanswered).
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
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define KCMP_VM 1

/* Linux 6.6 (older headers lack them): the listener's wake-ups on the waker's CPU (below, answerer_new). */
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP 1UL
#endif

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
};

/* An open tree's listing: at most how many more of its execs its record lists (an upper bound Python gives after
 * every batch, counted down here for each exec answered with its parent read). While it is above 0 a listed exec's
 * parent is read; a tree without one (not told yet) has every parent read. */
struct listing {
    int32_t tree;
    int32_t left;
};

struct known_path {
    uint32_t length; /* 0: free */
    int32_t token;   /* Python's token for its resolution */
    int32_t listed;  /* its outcome is listed (not a miss, ENOENT, which is only counted) */
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
    int listener;
    int enabled;
    int starting;
    uint32_t faults;
    uint64_t parents_read; /* /proc/PID/stat opened for a listed exec's parent (the tests and the breakdown) */
    uint32_t leaders_count;
    struct leader leaders[LEADERS_MAX];
    uint32_t listings_count;
    struct listing listings[LEADERS_MAX];
    struct known_path paths[PATHS_MAX];
    struct batch *filling;
    struct batch *taken;
    struct first_exec first;
    struct seccomp_notif received;
    char page[PAGE];                        /* the page the path is in, read whole */
    char pointers[(FAST_ARGS + 1) * 8];     /* the argv pointers */
    char arguments[FAST_BYTES];             /* the arguments, each within its first span, packed */
};

/* What trace/native.py expects (its ABI): a library built from another version of this file is not used. */
#define ANSWERER_ABI 7
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

/* The listener's wake-ups made synchronous (SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, Linux 6.6): the exec'ing process
 * wakes this thread on its own CPU and sleeps, the answer wakes it on this thread's, so the two hand the CPU to each
 * other instead of each waking the other CPU (an inter-processor interrupt, and on an idle virtual CPU an exit to
 * the host) twice per exec. It needs the waiter woken through poll(), which passes the flag on (epoll does not).
 * An older kernel refuses the flag: the same answers, woken as before. */
struct answerer *answerer_new(int listener) {
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
    self->listener = listener;
    ioctl(listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, (unsigned long)SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);
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
static int add_leader(struct answerer *self, int32_t sid, int32_t tree) {
    int result = -1;
    for (uint32_t index = 0; index < self->leaders_count; index++) {
        if (self->leaders[index].sid == sid) {
            self->leaders[index].tree = tree;
            result = 0;
            break;
        }
    }
    if (result != 0 && self->leaders_count < LEADERS_MAX) {
        self->leaders[self->leaders_count++] = (struct leader){sid, tree};
        result = 0;
    }
    return result;
}

int answerer_leader(struct answerer *self, int32_t sid, int32_t tree) {
    pthread_mutex_lock(&self->lock);
    int result = add_leader(self, sid, tree);
    pthread_mutex_unlock(&self->lock);
    return result;
}

static struct listing *listing_of(struct answerer *self, int32_t tree) {
    for (uint32_t index = 0; index < self->listings_count; index++)
        if (self->listings[index].tree == tree)
            return &self->listings[index];
    return NULL;
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

/* At most how many more of the tree's execs its record lists (Python's bound, after a batch or when a window
 * opens): the parents of that many listed execs answered here are read, no more. A full table: not kept, every
 * parent is read. */
void answerer_listed(struct answerer *self, int32_t tree, int32_t left) {
    pthread_mutex_lock(&self->lock);
    struct listing *listing = listing_of(self, tree);
    if (listing != NULL)
        listing->left = left;
    else if (self->listings_count < LEADERS_MAX)
        self->listings[self->listings_count++] = (struct listing){tree, left};
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
    kept = 0;
    for (uint32_t index = 0; index < self->listings_count; index++)
        if (self->listings[index].tree != tree)
            self->listings[kept++] = self->listings[index];
    self->listings_count = kept;
    pthread_mutex_unlock(&self->lock);
}

/* A path whose resolution depended on nothing of a process, until `expires`; replaces slot `slot`. */
void answerer_path(struct answerer *self, uint32_t slot, const char *bytes, uint32_t length, int32_t token,
                   int32_t listed, double expires) {
    if (slot >= PATHS_MAX || length == 0 || length >= PATH_BYTES)
        return;
    pthread_mutex_lock(&self->lock);
    struct known_path *known = &self->paths[slot];
    memcpy(known->bytes, bytes, length);
    known->bytes[length] = 0;
    known->length = length;
    known->token = token;
    known->listed = listed;
    known->expires = expires;
    pthread_mutex_unlock(&self->lock);
}

/* Under the lock: the batch filled so far handed to Python (which reads it while it holds the tracer's lock, the
 * only place this is called from), an empty one to fill. */
/* Whether a swap would hand Python anything (execs queued, faults counted): a record taken with nothing waiting
 * skips the swap and the batch's reading (adr/0036 "Round 3"). */
uint32_t answerer_waiting(struct answerer *self) {
    pthread_mutex_lock(&self->lock);
    uint32_t waiting = self->filling->count + self->faults;
    pthread_mutex_unlock(&self->lock);
    return waiting;
}

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

uint64_t answerer_parents_read(struct answerer *self) {
    pthread_mutex_lock(&self->lock);
    uint64_t read = self->parents_read;
    pthread_mutex_unlock(&self->lock);
    return read;
}

struct seccomp_notif *answerer_received(struct answerer *self) {
    return &self->received;
}

static int32_t tree_of(struct answerer *self, int32_t sid) {
    for (uint32_t index = 0; index < self->leaders_count; index++)
        if (self->leaders[index].sid == sid)
            return self->leaders[index].tree;
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

static int32_t path_token(struct answerer *self, const char *bytes, size_t length, double now, int32_t *listed) {
    for (uint32_t index = 0; index < PATHS_MAX; index++) {
        struct known_path *known = &self->paths[index];
        if (known->length == length && now < known->expires && memcmp(known->bytes, bytes, length) == 0) {
            *listed = known->listed;
            return known->token;
        }
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
        add_leader(self, (int32_t)notif->pid, tree);
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
    int32_t tree = self->enabled && !self->starting ? tree_of(self, sid) : -1;
    struct listing *listing = tree < 0 ? NULL : listing_of(self, tree);
    int32_t left = listing == NULL ? 1 : listing->left;
    pthread_mutex_unlock(&self->lock);
    if (tree < 0)
        return 0;
    uint64_t path_address = notif->data.args[0], argv_address = notif->data.args[1];
    if (path_address == 0 || argv_address == 0)
        return 0;
    /* One process_vm_readv for the path's whole page and the argv pointers: an argument in that page (argv[0] is
     * often the path itself; a shell builds its arguments beside the path it searched) needs no second read. Each
     * string is taken within its first span (FIRST_CHUNK bytes, and its page), as if read alone. */
    uint64_t page_address = path_address - path_address % PAGE;
    size_t path_offset = (size_t)(path_address - page_address), path_span = first_span(path_address);
    size_t pointers_span = PAGE - (argv_address % PAGE);
    if (pointers_span > (FAST_ARGS + 1) * 8)
        pointers_span = (FAST_ARGS + 1) * 8;
    struct iovec local[FAST_ARGS + 1], remote[FAST_ARGS + 1];
    local[0] = (struct iovec){self->page, PAGE};
    remote[0] = (struct iovec){(void *)page_address, PAGE};
    local[1] = (struct iovec){self->pointers, pointers_span};
    remote[1] = (struct iovec){(void *)argv_address, pointers_span};
    ssize_t got = process_vm_readv(notif->pid, local, 2, remote, 2, 0);
    if (got != (ssize_t)(PAGE + pointers_span))
        return 0;
    const char *path_bytes = self->page + path_offset;
    size_t path_length = strnlen(path_bytes, path_span);
    if (path_length == path_span || path_length == 0 || path_bytes[0] != '/')
        return 0;
    uint64_t pointers[FAST_ARGS];
    uint32_t argc = 0;
    int ended = 0;
    for (size_t offset = 0; offset + 8 <= pointers_span; offset += 8) {
        uint64_t pointer;
        memcpy(&pointer, self->pointers + offset, 8);
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
    int32_t listed = 1;
    pthread_mutex_lock(&self->lock);
    int32_t path = path_token(self, path_bytes, path_length, now, &listed);
    struct batch *batch = self->filling;
    size_t room = ARENA_BYTES - batch->used;
    pthread_mutex_unlock(&self->lock);
    if (path < 0 || room < FAST_BYTES)
        return 0;
    /* The arguments outside the path's page, each within its first span, in a second read (the batch cannot be
     * swapped meanwhile: only Python swaps it, and then this thread's `filling` is the other one; so read here and
     * copy). Those in the page are copied from it. */
    char *arguments = self->arguments;
    size_t spans[FAST_ARGS], placed[FAST_ARGS], total = 0;
    int remote_count = 0;
    for (uint32_t index = 0; index < argc; index++) {
        spans[index] = first_span(pointers[index]);
        placed[index] = total;
        if (pointers[index] - page_address < PAGE) {
            memcpy(arguments + total, self->page + (pointers[index] - page_address), spans[index]);
        } else {
            local[remote_count] = (struct iovec){arguments + total, spans[index]};
            remote[remote_count] = (struct iovec){(void *)pointers[index], spans[index]};
            remote_count++;
        }
        total += spans[index];
    }
    if (remote_count > 0) {
        size_t wanted = 0;
        for (int index = 0; index < remote_count; index++)
            wanted += local[index].iov_len;
        got = process_vm_readv(notif->pid, local, (unsigned long)remote_count, remote, (unsigned long)remote_count, 0);
        if (got != (ssize_t)wanted)
            return 0;
    }
    /* Each argument NUL-terminated within its span, packed: argument\0argument\0... */
    size_t packed = 0;
    for (uint32_t index = 0; index < argc; index++) {
        size_t length = strnlen(arguments + placed[index], spans[index]);
        if (length == spans[index])
            return 0;
        memmove(arguments + packed, arguments + placed[index], length + 1);
        packed += length + 1;
    }
    /* A listed entry names its parent (read while the process waits: after the answer it may be gone): read while
     * the tree's record may list it. A miss (ENOENT) is counted, never listed. */
    int32_t parent = 0, parent_read = left > 0 && listed;
    if (parent_read && (parent = parent_of((pid_t)notif->pid)) < 0)
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
    self->parents_read += (uint64_t)parent_read;
    if (parent_read && (listing = listing_of(self, tree)) != NULL && listing->left > 0)
        listing->left--; /* one entry fewer left to list (the table may have changed meanwhile: found again) */
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
    memcpy(batch->arena + batch->used, path_bytes, path_length + 1);
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
        struct pollfd polled = {.fd = self->listener, .events = POLLIN};
        int ready = poll(&polled, 1, count ? idle_ms : timeout_ms);
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (ready == 0)
            return IDLE;
        if (polled.revents & (POLLHUP | POLLERR | POLLNVAL))
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
