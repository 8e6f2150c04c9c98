/* The exec trace's native spawner (adr/0036): a traced one-shot tree's first process started by the spawner thread
 * without the interpreter. The spawner thread (trace/spawners.py) waits in `spawner_serve`, one foreign call (ctypes
 * releases the GIL); the event loop's thread hands it a request with `spawner_submit`, one foreign call that blocks,
 * the GIL released, until the child is spawned (woken at its exec by the kernel, CLONE_CHILD_CLEARTID, when it was
 * cloned into its unit: adr/0036 "Round 3"). Here: the child born in the unit's cgroup by clone3(CLONE_INTO_CGROUP)
 * doing what glibc's posix_spawn child does with the file actions and attributes trace/spawn.py gives the Python path
 * (adr/0036 "Round 2"), or, where clone3 cannot, the unit's cgroup entered (cgroup.threads "0": this thread), glibc's
 * posix_spawn, the cgroup left;
 * and the answerer (answerer.c) told which exec to expect, so that it answers the tree's first exec itself - the
 * server's own posix_spawn child, told by kcmp(KCMP_VM) and by the very path and argv pointers given here - without
 * handing it to Python. Work posted for Python (`spawner_python`) makes `spawner_serve` return to the same thread.
 *
 * What the record says of that first exec is decided and written by Python before the request is submitted (the
 * resolution, RELAY_SHELL_EXEC_DENY's verdict: a refused program is never submitted), as on the Python path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

struct answerer;
void answerer_expect_first(struct answerer *self, const void *path, const void *argv, int32_t tree);
void answerer_first_done(struct answerer *self);

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
#define NATIVE_SPAWN 1
#else
#define NATIVE_SPAWN 0 /* no addclosefrom_np/addchdir_np: the Python path (trace/spawn.py says why) */
#endif

/* Where a request failed (trace/native.py STAGES). */
enum { SPAWNED = 0, ACTIONS = 1, ENTERING = 2, SPAWNING = 3, LEAVING = 4 };
/* Inside this file only: the child was cloned and the submitter finishes the request after its exec. */
#define DETACHED (-1)

/* One spawn, as the event loop's thread fills it (trace/native.py SpawnRequest). */
struct spawn_request {
    const char *path;
    char *const *argv;
    char *const *envp; /* NULL: the server's environment as it is now */
    const char *cwd;   /* NULL: the server's */
    int32_t stdin_fd;  /* -1: /dev/null */
    int32_t stdout_fd;
    int32_t stderr_fd;
    int32_t unit_threads; /* the unit's cgroup.threads, -1: no cgroup */
    int32_t home_threads; /* the instance's, where this thread goes back */
    int32_t tree;         /* the tree's token (lineage.py) */
    int32_t pid;
    int32_t error;
    int32_t stage;
    int32_t finished;
    int32_t unit_dir; /* the unit's cgroup directory (O_PATH), -1: none. Last, so that spares.c's copy of the
                       * struct without it is a prefix of this one (it only passes requests on) */
};

struct spawner {
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* the spawner thread: a request, or work for Python */
    pthread_cond_t finished; /* a submitting thread: the one before it is done */
    struct spawn_request *request;
    int python;
    struct answerer *answerer;
    posix_spawnattr_t attributes;
    /* The hand-back (adr/0036 "Round 3"): 1 while a submitted request is not done. The spawner thread clears it
     * when it carried the request out itself; when the child was cloned into its unit the kernel clears it
     * (CLONE_CHILD_CLEARTID) at the child's exec, or its exit when the exec failed, and wakes the submitter: the
     * spawner thread does not wait for the child's exec, nor wake the submitter. A futex shared with the kernel's
     * wake, which is not a private one. */
    uint32_t pending;
    int busy;           /* a submitter's request is not done (the next submitter waits on `finished`) */
    void *child_stack;  /* the cloned child's stack (one child at a time: the submitter waits for its exec) */
    void *child_start;  /* its struct child_start */
};

int spawner_available(void) { return NATIVE_SPAWN; }

/* The layout of struct spawn_request (trace/native.py SPAWNER_ABI): 2 added unit_dir. */
int spawner_abi(void) { return 2; }

/* A new session, every signal at its default (glibc's internal SIGCANCEL and SIGSETXID included: sigaddset refuses
 * them, so their bits are set directly, as trace/spawn.py does) and none blocked. */
int spawn_attributes_init(posix_spawnattr_t *attributes) {
    sigset_t defaults, empty;
    int error = posix_spawnattr_init(attributes);
    if (error)
        return error;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGXFSZ);
    unsigned long first_word;
    memcpy(&first_word, &defaults, sizeof(first_word));
    first_word |= (1UL << 31) | (1UL << 32);
    memcpy(&defaults, &first_word, sizeof(first_word));
    sigemptyset(&empty);
    error = posix_spawnattr_setsigdefault(attributes, &defaults);
    if (!error)
        error = posix_spawnattr_setsigmask(attributes, &empty);
    if (!error)
        error = posix_spawnattr_setflags(attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF |
                                                         POSIX_SPAWN_SETSIGMASK);
    return error;
}

struct spawner *spawner_new(void) {
    if (!NATIVE_SPAWN)
        return NULL;
    struct spawner *self = calloc(1, sizeof(*self));
    if (self == NULL)
        return NULL;
    if (spawn_attributes_init(&self->attributes) != 0) {
        free(self);
        return NULL;
    }
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    pthread_cond_init(&self->finished, NULL);
    return self;
}

/* The answerer that answers the first exec of what this spawner starts (NULL: none, the request is refused). */
void spawner_attach(struct spawner *self, struct answerer *answerer) {
    pthread_mutex_lock(&self->lock);
    self->answerer = answerer;
    pthread_mutex_unlock(&self->lock);
}

#if NATIVE_SPAWN
static int file_actions(posix_spawn_file_actions_t *actions, const struct spawn_request *request) {
    int error = request->stdin_fd >= 0 ? posix_spawn_file_actions_adddup2(actions, request->stdin_fd, 0)
                                       : posix_spawn_file_actions_addopen(actions, 0, "/dev/null", O_RDONLY, 0);
    if (!error)
        error = posix_spawn_file_actions_adddup2(actions, request->stdout_fd, 1);
    if (!error)
        error = posix_spawn_file_actions_adddup2(actions, request->stderr_fd, 2);
    if (!error && request->cwd != NULL)
        error = posix_spawn_file_actions_addchdir_np(actions, request->cwd);
    if (!error)
        error = posix_spawn_file_actions_addclosefrom_np(actions, 3);
    return error;
}

#if defined(__x86_64__)
/* The child born in its unit's cgroup by clone3(CLONE_INTO_CGROUP) (Linux 5.7), sharing the server's memory until
 * its exec (CLONE_VM) on a stack of the spawner's own; since adr/0036 "Round 3" not CLONE_VFORK: the spawner thread
 * goes back to waiting, and the kernel wakes the submitter at the child's exec (spawn_into_cgroup). glibc 2.36 has no posix_spawnattr_setcgroup_np (2.41), and clone3 has no wrapper: the
 * child must start on its new stack in a function of its own, so the call is written here. In: rdi the clone
 * arguments, rsi their size, rdx the child's function, rcx its argument; out: the raw result (the child's pid, or
 * -errno). The child calls the function and exits with what it returns (it never returns: it execs or _exits). */
#define INTO_CGROUP 1
long relay_clone3_vfork(void *arguments, size_t size, int (*child)(void *), void *argument)
    __attribute__((visibility("hidden")));
__asm__(".text\n"
        ".globl relay_clone3_vfork\n"
        ".hidden relay_clone3_vfork\n"
        ".type relay_clone3_vfork,@function\n"
        ".p2align 4\n"
        "relay_clone3_vfork:\n"
        "    mov %rdx, %r8\n" /* the syscall keeps r8 and r9, not rcx */
        "    mov %rcx, %r9\n"
        "    mov $435, %eax\n" /* SYS_clone3 */
        "    syscall\n"
        "    test %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"
        "1:  xor %ebp, %ebp\n" /* the child, on its own stack (16-byte aligned): no frame to return to */
        "    mov %r9, %rdi\n"
        "    call *%r8\n"
        "    mov %eax, %edi\n"
        "    mov $60, %eax\n" /* SYS_exit */
        "    syscall\n"
        "    hlt\n"
        ".size relay_clone3_vfork, .-relay_clone3_vfork\n");
#else
#define INTO_CGROUP 0 /* elsewhere the unit is entered and left around posix_spawn */
#endif

#if INTO_CGROUP
#define CLONE_INTO_CGROUP_FLAG 0x200000000ULL
#define CHILD_STACK (32 * 1024)

struct clone3_arguments { /* linux/sched.h struct clone_args, CLONE_ARGS_SIZE_VER2 */
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

struct kernel_sigaction { /* rt_sigaction's: glibc's sigaction refuses its internal signals 32 and 33 */
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};

struct child_start {
    const struct spawn_request *request;
    char *const *envp;
    int error; /* written by the child (shared memory) when it cannot exec */
};

/* 1: clone3 into a cgroup and close_range are there; 0: not (ENOSYS, E2BIG, EINVAL: a kernel before 5.7, or a
 * seccomp profile that refuses clone3 as container runtimes do): the unit entered and left around posix_spawn. */
static int into_cgroup_usable = -1;
static uint64_t born_in_unit; /* children spawned so (what the tests tell the two ways apart by) */

/* The child's system calls, made without glibc: it runs beside the spawner thread (no CLONE_VFORK) on that thread's
 * thread-local storage, so it must not write errno, which glibc's wrappers do on failure. -errno on failure. */
static inline long raw4(long number, long first, long second, long third, long fourth) {
    long result;
    register long r10 __asm__("r10") = fourth;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(first), "S"(second), "d"(third), "r"(r10)
                     : "rcx", "r11", "memory");
    return result;
}

static int child_fail(struct child_start *start, long result) {
    start->error = (int)-result;
    return 127;
}

/* What glibc's posix_spawn child does for the attributes and file actions spawn_attributes_init and file_actions
 * set, in the same order: every signal handled by the server, and SIGPIPE, SIGXFSZ and glibc's two internal ones, at
 * its default (a handler must never run in a child that shares the server's memory: every signal is blocked until
 * then); a new session; stdin, stdout, stderr; the working directory; no other descriptor; no signal blocked; the
 * exec, with the very path and argv pointers the answerer expects. System calls only (raw4), on its own stack. */
static int spawn_child(void *argument) {
    struct child_start *start = argument;
    const struct spawn_request *request = start->request;
    long result;
    for (int signal_number = 1; signal_number < 65; signal_number++) {
        struct kernel_sigaction action = {0};
        int to_default = signal_number == SIGPIPE || signal_number == SIGXFSZ || signal_number == 32 ||
                         signal_number == 33;
        if (!to_default) {
            if (raw4(SYS_rt_sigaction, signal_number, 0, (long)&action, 8) != 0 || action.handler == SIG_IGN ||
                action.handler == SIG_DFL)
                continue;
            memset(&action, 0, sizeof(action));
        }
        action.handler = SIG_DFL;
        raw4(SYS_rt_sigaction, signal_number, (long)&action, 0, 8);
    }
    if ((result = raw4(SYS_setsid, 0, 0, 0, 0)) < 0)
        return child_fail(start, result);
    if (request->stdin_fd >= 0) {
        if ((result = raw4(SYS_dup2, request->stdin_fd, 0, 0, 0)) < 0)
            return child_fail(start, result);
    } else {
        long null = raw4(SYS_openat, AT_FDCWD, (long)"/dev/null", O_RDONLY, 0);
        if (null < 0)
            return child_fail(start, null);
        if (null != 0 && ((result = raw4(SYS_dup2, null, 0, 0, 0)) < 0 || (result = raw4(SYS_close, null, 0, 0, 0)) < 0))
            return child_fail(start, result);
    }
    if ((result = raw4(SYS_dup2, request->stdout_fd, 1, 0, 0)) < 0 ||
        (result = raw4(SYS_dup2, request->stderr_fd, 2, 0, 0)) < 0)
        return child_fail(start, result);
    if (request->cwd != NULL && (result = raw4(SYS_chdir, (long)request->cwd, 0, 0, 0)) != 0)
        return child_fail(start, result);
    if ((result = raw4(SYS_close_range, 3, (long)~0U, 0, 0)) != 0)
        return child_fail(start, result);
    uint64_t none = 0;
    raw4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&none, 0, 8);
    result = raw4(SYS_execve, (long)request->path, (long)request->argv, (long)start->envp, 0);
    return child_fail(start, result);
}

/* The child cloned straight into the unit's cgroup (CLONE_VM, not CLONE_VFORK: adr/0036 "Round 3"), on the
 * spawner's own stack for it, the kernel told to clear `pending` and wake the submitter at its exec (or its exit):
 * its pid (written into the request by the kernel before the child runs), or -errno when clone3 failed (no child:
 * the caller falls back). The spawner thread touches neither the request nor the child's memory after a success. */
static long spawn_into_cgroup(void *stack, struct child_start *start, uint32_t *pending,
                              struct spawn_request *request) {
    *start = (struct child_start){request, request->envp != NULL ? request->envp : environ, 0};
    struct clone3_arguments arguments = {
        .flags = CLONE_VM | CLONE_CHILD_CLEARTID | CLONE_PARENT_SETTID | CLONE_INTO_CGROUP_FLAG,
        .child_tid = (uint64_t)(uintptr_t)pending,
        .parent_tid = (uint64_t)(uintptr_t)&request->pid,
        .exit_signal = SIGCHLD,
        .stack = (uint64_t)(uintptr_t)stack,
        .stack_size = CHILD_STACK,
        .cgroup = (uint64_t)request->unit_dir,
    };
    uint64_t all = ~0ULL, before = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &before, 8);
    long result = relay_clone3_vfork(&arguments, sizeof(arguments), spawn_child, start);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &before, NULL, 8);
    return result;
}

/* Once: close_range (5.9) is there for the child's closefrom; clone3's own answer decides the rest. */
static int into_cgroup_possible(void) {
    int usable = __atomic_load_n(&into_cgroup_usable, __ATOMIC_RELAXED);
    if (usable < 0) {
        usable = syscall(SYS_close_range, ~0U, ~0U, 0U) == 0;
        __atomic_store_n(&into_cgroup_usable, usable, __ATOMIC_RELAXED);
    }
    return usable;
}
#endif

/* How many children were born in their unit by clone3 so far. */
uint64_t spawner_born_in_unit(void) {
#if INTO_CGROUP
    return __atomic_load_n(&born_in_unit, __ATOMIC_RELAXED);
#else
    return 0;
#endif
}

/* On the spawner thread: the request carried out by glibc's posix_spawn, the unit's cgroup entered and left around
 * it, its outcome in it. `answerer` NULL: an untraced spawn (no first exec to expect). */
void spawn_run(const posix_spawnattr_t *attributes, struct answerer *answerer, struct spawn_request *request) {
    request->pid = 0;
    posix_spawn_file_actions_t actions;
    request->stage = ACTIONS;
    request->error = posix_spawn_file_actions_init(&actions);
    if (request->error)
        return;
    request->error = file_actions(&actions, request);
    if (request->error)
        goto done;
    /* Into the unit, so the child is born in its cgroup (on the Python path containment/units.py `spawning`
     * does this). */
    if (request->unit_threads >= 0 && write(request->unit_threads, "0", 1) != 1) {
        request->stage = ENTERING;
        request->error = errno;
        goto done;
    }
    if (answerer != NULL)
        answerer_expect_first(answerer, request->path, request->argv, request->tree);
    pid_t pid = 0;
    /* The child's first exec waits for the service thread's answer (answerer.c answer_first) meanwhile. */
    int error = posix_spawn(&pid, request->path, &actions, attributes, request->argv,
                            request->envp != NULL ? request->envp : environ);
    if (answerer != NULL)
        answerer_first_done(answerer);
    request->stage = error ? SPAWNING : SPAWNED;
    request->error = error;
    request->pid = error ? 0 : pid;
    /* Back home, retried once: a server thread left in a unit would die with it. */
    if (request->unit_threads >= 0 && write(request->home_threads, "0", 1) != 1 &&
        write(request->home_threads, "0", 1) != 1) {
        request->stage = LEAVING;
        request->error = errno;
    }
done:
    posix_spawn_file_actions_destroy(&actions);
}
#else
uint64_t spawner_born_in_unit(void) { return 0; }
#endif

#if INTO_CGROUP
/* The child cloned into its unit, detached (adr/0036 "Round 3"): 1 when it was (the kernel clears `pending` at its
 * exec or exit, and the submitter finishes the request: spawner_submit), 0 when the request is to be carried out by
 * posix_spawn (clone3 cannot here, or failed for this spawn). */
static int spawn_detached(struct spawner *self, struct answerer *answerer, struct spawn_request *request) {
    if (request->unit_threads < 0 || request->unit_dir < 0 || !into_cgroup_possible())
        return 0;
    if (self->child_stack == NULL) {
        void *stack = mmap(NULL, CHILD_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        self->child_start = calloc(1, sizeof(struct child_start));
        if (stack == MAP_FAILED || self->child_start == NULL) {
            if (stack != MAP_FAILED)
                munmap(stack, CHILD_STACK);
            free(self->child_start);
            self->child_start = NULL;
            return 0;
        }
        self->child_stack = stack;
    }
    answerer_expect_first(answerer, request->path, request->argv, request->tree);
    request->stage = DETACHED; /* before the clone: after it, the request is the submitter's */
    long result = spawn_into_cgroup(self->child_stack, self->child_start, &self->pending, request);
    if (result > 0)
        return 1;
    answerer_first_done(answerer);
    request->pid = 0;
    if (result == -ENOSYS || result == -E2BIG || result == -EINVAL)
        __atomic_store_n(&into_cgroup_usable, 0, __ATOMIC_RELAXED);
    return 0; /* not spawned: the unit entered and left around posix_spawn, which reports what is wrong with it */
}
#endif

static long futex(uint32_t *word, int operation, uint32_t value) {
    return syscall(SYS_futex, word, operation, value, NULL, NULL, 0);
}

/* The spawner thread's wait: requests carried out here until work for Python is posted (1: the caller runs it and
 * comes back). */
int spawner_serve(struct spawner *self) {
    pthread_mutex_lock(&self->lock);
    for (;;) {
        while (self->request == NULL && !self->python)
            pthread_cond_wait(&self->wake, &self->lock);
        if (self->python) {
            self->python = 0;
            pthread_mutex_unlock(&self->lock);
            return 1;
        }
        struct spawn_request *request = self->request;
        struct answerer *answerer = self->answerer;
        /* Taken now: once a detached child execs, its submitter may submit the next request before this thread is
         * back here. */
        self->request = NULL;
        pthread_mutex_unlock(&self->lock);
        int detached = 0;
#if INTO_CGROUP
        if (answerer != NULL)
            detached = spawn_detached(self, answerer, request);
#endif
        if (!detached) {
#if NATIVE_SPAWN
            if (answerer != NULL)
                spawn_run(&self->attributes, answerer, request);
            else
#endif
            {
                request->stage = ACTIONS;
                request->error = ENOSYS;
            }
        }
        if (!detached) { /* else the kernel does this at the child's exec or exit */
            __atomic_store_n(&self->pending, 0, __ATOMIC_RELEASE);
            futex(&self->pending, FUTEX_WAKE, 1);
        }
        pthread_mutex_lock(&self->lock);
    }
}

/* From the event loop's thread: the request carried out by the spawner thread, waited for (the GIL released): woken
 * by the spawner thread, or by the kernel at the exec (or exit) of a child cloned into its unit, whose outcome is
 * then taken here (the child's error, the child reaped when it could not exec, as posix_spawn does). The callers take
 * turns (spawners.py `one_at_a_time`); one waiting for another's request first is harmless. */
void spawner_submit(struct spawner *self, struct spawn_request *request) {
    pthread_mutex_lock(&self->lock);
    while (self->busy) /* another submitter's request (or its child's exec) is not done yet */
        pthread_cond_wait(&self->finished, &self->lock);
    self->busy = 1;
    request->finished = 0;
    __atomic_store_n(&self->pending, 1, __ATOMIC_RELEASE);
    self->request = request;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    while (__atomic_load_n(&self->pending, __ATOMIC_ACQUIRE) != 0)
        futex(&self->pending, FUTEX_WAIT, 1);
#if INTO_CGROUP
    if (request->stage == DETACHED) {
        struct child_start *start = self->child_start;
        answerer_first_done(self->answerer);
        if (start->error != 0) {
            while (waitpid((pid_t)request->pid, NULL, 0) < 0 && errno == EINTR)
                ;
            request->stage = SPAWNING;
            request->error = start->error;
            request->pid = 0;
        } else {
            request->stage = SPAWNED;
            request->error = 0;
            __atomic_add_fetch(&born_in_unit, 1, __ATOMIC_RELAXED);
        }
    }
#endif
    request->finished = 1;
    pthread_mutex_lock(&self->lock);
    self->busy = 0;
    pthread_cond_broadcast(&self->finished);
    pthread_mutex_unlock(&self->lock);
}

/* Work posted for Python: `spawner_serve` returns to run it on the spawner thread. */
void spawner_python(struct spawner *self) {
    pthread_mutex_lock(&self->lock);
    self->python = 1;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
}
