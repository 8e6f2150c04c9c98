/* Readonly's confined spawner in compiled code (adr/0037 "Round 7"). One thread per pool, the creator, is a Python
 * thread that confined itself once (confine/confinement.py `confine_creator`: no_new_privs, the capabilities cut,
 * the whole syscall filter naming its own id, and when traced the exec filter it was born with); it then waits here
 * for the server's life (`spares_serve`, the GIL released) and carries out each spawn request itself: the unit's
 * cgroup entered, a vfork-style clone whose child — a new process sharing the server's memory until its exec, as
 * glibc's posix_spawn child does — inherits all of that from the creator and makes **its own Landlock domain**
 * (landlock_restrict_self on the ruleset Python made) before its exec, the cgroup left. So each tree is its own
 * domain, made by its own first process, and no thread of the server is ever in a tree's domain: there is no
 * spawning thread to guard (the Python spares' thread guard, syscall_filter.build_thread_guard, guarded the spare
 * that shared its tree's domain), no thread made or ended per tree, nothing made after a spawn.
 *
 * The child does what posix_spawn does with trace/spawn.py's attributes and file actions (spawner.c file_actions and
 * spawn_attributes_init): every handled signal back to its default (SIGPIPE, SIGXFSZ and glibc's two internal ones
 * even when ignored), a new session, stdin from the pipe or /dev/null, stdout and stderr onto theirs, the working
 * directory, no other descriptor, no signal blocked; then its domain, then the exec. It never returns to the
 * creator's code: an exec that fails (or a domain the kernel refuses) leaves the errno where the creator reads it
 * and _exit(127). Traced, the answerer lets its first exec go by kcmp and the request's path and argv pointers
 * (answerer.c answer_first), as for the native spawner's posix_spawn child. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446 /* the same number on every architecture */
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
#define NATIVE_SPARES 1
#else
#define NATIVE_SPARES 0 /* as spawner.c: the Python spares */
#endif

#define CHILD_STACK (64 * 1024) /* the child's frames: a few system calls, no library code but syscall(2) */
#define SIGNALS 64
#define KERNEL_SIGSET 8

extern char **environ;

struct answerer;
void answerer_expect_first(struct answerer *self, const void *path, const void *argv, int32_t tree);
void answerer_first_done(struct answerer *self);

/* spawner.c's struct spawn_request (trace/native.py SpawnRequest), and its stages. */
struct spawn_request {
    const char *path;
    char *const *argv;
    char *const *envp;
    const char *cwd;
    int32_t stdin_fd, stdout_fd, stderr_fd, unit_threads, home_threads, tree, pid, error, stage, finished;
};
enum { SPAWNED = 0, ACTIONS = 1, ENTERING = 2, SPAWNING = 3, LEAVING = 4 };

/* The kernel's struct sigaction (rt_sigaction): glibc's wrapper refuses its two internal signals. */
struct kernel_sigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
};

struct spare_pool {
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* the creator: a request */
    pthread_cond_t finished; /* a submitter: its request is done */
    struct spawn_request *request;
    struct answerer *answerer;
    int ruleset;
    unsigned int landlock_flags;
    int serving; /* the creator waits here: requests are taken */
    int error;   /* the first errno of a domain the kernel refused: nothing is spawned after it */
    void *stack;
};

/* What the child leaves for the creator (it shares the creator's memory until its exec). */
struct child_work {
    struct spare_pool *pool;
    struct spawn_request *request;
    int error;
    int confining; /* the error was the domain's */
};

int spares_available(void) { return NATIVE_SPARES; }

struct spare_pool *spares_new(int ruleset, unsigned int landlock_flags) {
    if (!NATIVE_SPARES)
        return NULL;
    struct spare_pool *pool = calloc(1, sizeof(*pool));
    if (pool == NULL)
        return NULL;
    pool->stack = malloc(CHILD_STACK);
    if (pool->stack == NULL) {
        free(pool);
        return NULL;
    }
    pool->ruleset = ruleset;
    pool->landlock_flags = landlock_flags;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->finished, NULL);
    return pool;
}

#if NATIVE_SPARES
static int into(int from, int to) {
    if (from != to)
        return dup2(from, to) < 0 ? errno : 0;
    int flags = fcntl(to, F_GETFD); /* posix_spawn's adddup2 onto itself: kept open across the exec */
    return flags < 0 || fcntl(to, F_SETFD, flags & ~FD_CLOEXEC) < 0 ? errno : 0;
}

/* The child: system calls only (its stack is the pool's, its memory the server's). */
static int child_main(void *argument) {
    struct child_work *work = argument;
    const struct spawn_request *request = work->request;
    uint64_t mask_all = ~(uint64_t)0, none = 0;
    for (int signal_number = 1; signal_number <= SIGNALS; signal_number++) {
        if (signal_number == SIGKILL || signal_number == SIGSTOP)
            continue;
        struct kernel_sigaction action;
        if (syscall(SYS_rt_sigaction, signal_number, NULL, &action, KERNEL_SIGSET) != 0)
            continue;
        int to_default = signal_number == SIGPIPE || signal_number == SIGXFSZ || signal_number == 32 ||
                         signal_number == 33 || (action.handler != SIG_IGN && action.handler != SIG_DFL);
        if (!to_default || action.handler == SIG_DFL)
            continue;
        struct kernel_sigaction reset = {.handler = SIG_DFL, .flags = 0, .restorer = NULL, .mask = mask_all};
        syscall(SYS_rt_sigaction, signal_number, &reset, NULL, KERNEL_SIGSET);
    }
    int error = setsid() < 0 ? errno : 0;
    if (!error) {
        if (request->stdin_fd >= 0) {
            error = into(request->stdin_fd, 0);
        } else {
            int null = open("/dev/null", O_RDONLY);
            error = null < 0 ? errno : into(null, 0);
            if (null > 0)
                close(null);
        }
    }
    if (!error)
        error = into(request->stdout_fd, 1);
    if (!error)
        error = into(request->stderr_fd, 2);
    if (!error && request->cwd != NULL && chdir(request->cwd) != 0)
        error = errno;
    if (!error && syscall(SYS_landlock_restrict_self, work->pool->ruleset, work->pool->landlock_flags) != 0) {
        error = errno;
        work->confining = 1;
    }
    if (!error && syscall(SYS_close_range, 3, ~0U, 0) != 0)
        error = errno;
    if (!error) {
        syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, KERNEL_SIGSET);
        execve(request->path, request->argv, request->envp != NULL ? request->envp : environ);
        error = errno;
    }
    work->error = error;
    _exit(127);
}

/* On the creator: the request carried out, its outcome in it. */
static void spawn_confined(struct spare_pool *pool, struct answerer *answerer, struct spawn_request *request) {
    request->pid = 0;
    request->error = 0;
    /* Into the unit, so the child is born in its cgroup (containment/units.py `spawning`; spawner.c). */
    if (request->unit_threads >= 0 && write(request->unit_threads, "0", 1) != 1) {
        request->stage = ENTERING;
        request->error = errno;
        return;
    }
    if (answerer != NULL)
        answerer_expect_first(answerer, request->path, request->argv, request->tree);
    struct child_work work = {pool, request, 0, 0};
    uint64_t all = ~(uint64_t)0, before = 0;
    /* Every signal blocked while the child runs on our memory (no handler of the server may run in it). */
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &before, KERNEL_SIGSET);
    pid_t pid = clone(child_main, (char *)pool->stack + CHILD_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &work);
    int clone_error = pid < 0 ? errno : 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &before, NULL, KERNEL_SIGSET);
    if (answerer != NULL)
        answerer_first_done(answerer);
    if (pid > 0 && work.error != 0) { /* it ran nothing: reaped here, as posix_spawn does */
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    int error = clone_error ? clone_error : work.error;
    request->stage = error ? (work.confining ? ACTIONS : SPAWNING) : SPAWNED;
    request->error = error;
    request->pid = error ? 0 : pid;
    if (work.confining) {
        pthread_mutex_lock(&pool->lock);
        pool->error = error;
        pthread_mutex_unlock(&pool->lock);
    }
    /* Back home, retried once: a server thread left in a unit would die with it. */
    if (request->unit_threads >= 0 && write(request->home_threads, "0", 1) != 1 &&
        write(request->home_threads, "0", 1) != 1) {
        request->stage = LEAVING;
        request->error = errno;
    }
}
#endif

/* The creator thread's wait, for the server's life: each request carried out as it comes. */
void spares_serve(struct spare_pool *pool) {
#if NATIVE_SPARES
    pthread_mutex_lock(&pool->lock);
    pool->serving = 1;
    for (;;) {
        while (pool->request == NULL)
            pthread_cond_wait(&pool->wake, &pool->lock);
        struct spawn_request *request = pool->request;
        struct answerer *answerer = pool->answerer;
        pthread_mutex_unlock(&pool->lock);
        spawn_confined(pool, answerer, request);
        pthread_mutex_lock(&pool->lock);
        pool->request = NULL;
        request->finished = 1;
        pthread_cond_broadcast(&pool->finished);
    }
#else
    (void)pool;
#endif
}

/* From the event loop's thread: the pool when a spawn can be submitted (the creator serves, no domain was refused),
 * else NULL (the call confines a thread of its own: confine/confinement.py `run_confined`). */
struct spare_pool *spares_take(struct spare_pool *pool) {
    pthread_mutex_lock(&pool->lock);
    int ready = pool->serving && pool->error == 0;
    pthread_mutex_unlock(&pool->lock);
    return ready ? pool : NULL;
}

/* The request carried out by the creator (answered by `answerer` when traced, NULL untraced), waited for with the
 * GIL released. `spare` is what spares_take gave. Callers take turns; one waiting for another's request first is
 * harmless. */
void spares_submit(struct spare_pool *pool, struct spare_pool *spare, struct spawn_request *request,
                   struct answerer *answerer) {
    (void)spare;
    pthread_mutex_lock(&pool->lock);
    while (pool->request != NULL)
        pthread_cond_wait(&pool->finished, &pool->lock);
    request->finished = 0;
    pool->answerer = answerer;
    pool->request = request;
    pthread_cond_signal(&pool->wake);
    while (!request->finished)
        pthread_cond_wait(&pool->finished, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}

/* Whether the creator serves, and the errno of a domain the kernel refused (0: none). */
int spares_state(struct spare_pool *pool, int32_t *error) {
    pthread_mutex_lock(&pool->lock);
    int serving = pool->serving;
    *error = pool->error;
    pthread_mutex_unlock(&pool->lock);
    return serving;
}
