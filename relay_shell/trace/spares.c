/* Readonly's spares in compiled code (adr/0037 "Round 6"): a spare is a pthread made here by the pool's creator
 * thread, which is a Python thread that confined itself once (confine/confinement.py `confine_creator`:
 * no_new_privs, the capabilities cut, the whole syscall filter, and when traced the exec filter it was born with),
 * so each spare inherits all of that. The spare adds what is its own, here, without the interpreter: its own
 * Landlock domain (landlock_restrict_self on the ruleset Python made) and the thread guard (the BPF program Python
 * built, syscall_filter.build_thread_guard, its slots patched with the spare's own id), then waits for one spawn
 * request, carries it out with spawner.c's spawn_run (it enters the call's unit itself; traced, the answerer lets
 * the tree's first exec go by its kcmp and pointers), and ends. Nothing runs in its domain before that spawn. The
 * event loop takes a ready spare and submits to it in one foreign call (the GIL released); the creator waits here
 * too and makes the missing spares, off the call's path. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446 /* the same number on every architecture */
#endif

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
#define NATIVE_SPARES 1
#else
#define NATIVE_SPARES 0 /* spawner.c has no spawn_run: the Python spares */
#endif

#define GUARD_MAX 64
#define SLOTS_MAX 4
#define READY_MAX 32

struct answerer;
struct spawn_request {
    const char *path;
    char *const *argv;
    char *const *envp;
    const char *cwd;
    int32_t stdin_fd, stdout_fd, stderr_fd, unit_threads, home_threads, tree, pid, error, stage, finished;
};
int spawn_attributes_init(posix_spawnattr_t *attributes);
void spawn_run(const posix_spawnattr_t *attributes, struct answerer *answerer, struct spawn_request *request);

struct spare {
    struct spare_pool *pool;
    pthread_cond_t go;
    struct spawn_request *request;
    struct answerer *answerer;
    int32_t tid;
};

struct spare_pool {
    pthread_mutex_t lock;
    pthread_cond_t missing_wake; /* the creator: spares are missing */
    pthread_cond_t finished;     /* a submitter: its request is done */
    int ruleset;
    unsigned int landlock_flags;
    struct sock_filter guard[GUARD_MAX];
    unsigned short guard_length;
    unsigned int slots[SLOTS_MAX]; /* instructions whose constant is the spare's own id */
    int slot_count;
    struct spare *ready[READY_MAX];
    int ready_count;
    int missing;
    int error; /* the first errno a spare's confinement met: no spare is made after it */
    posix_spawnattr_t attributes;
};

int spares_available(void) { return NATIVE_SPARES; }

/* `guard`: the thread guard's BPF code (8 bytes an instruction), `slots` the indexes of the instructions naming the
 * thread. NULL when it does not fit or glibc is too old. */
struct spare_pool *spares_new(int ruleset, unsigned int landlock_flags, const void *guard, int guard_length,
                              const unsigned int *slots, int slot_count, int missing) {
    if (!NATIVE_SPARES || guard_length <= 0 || guard_length > GUARD_MAX || slot_count > SLOTS_MAX)
        return NULL;
    struct spare_pool *pool = calloc(1, sizeof(*pool));
    if (pool == NULL)
        return NULL;
    if (spawn_attributes_init(&pool->attributes) != 0) {
        free(pool);
        return NULL;
    }
    pool->ruleset = ruleset;
    pool->landlock_flags = landlock_flags;
    memcpy(pool->guard, guard, (size_t)guard_length * sizeof(struct sock_filter));
    pool->guard_length = (unsigned short)guard_length;
    for (int index = 0; index < slot_count; index++) {
        if (slots[index] >= (unsigned int)guard_length) {
            free(pool);
            return NULL;
        }
        pool->slots[index] = slots[index];
    }
    pool->slot_count = slot_count;
    pool->missing = missing;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->missing_wake, NULL);
    pthread_cond_init(&pool->finished, NULL);
    return pool;
}

/* On the spare: its own domain, then the guard naming it. 0 or an errno. */
static int confine(struct spare_pool *pool, int32_t tid) {
    if (syscall(SYS_landlock_restrict_self, pool->ruleset, pool->landlock_flags) != 0)
        return errno;
    struct sock_filter code[GUARD_MAX];
    memcpy(code, pool->guard, pool->guard_length * sizeof(struct sock_filter));
    for (int index = 0; index < pool->slot_count; index++)
        code[pool->slots[index]].k = (uint32_t)tid;
    struct sock_fprog program = {.len = pool->guard_length, .filter = code};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &program) != 0)
        return errno;
    return 0;
}

#if NATIVE_SPARES
static void *spare_main(void *argument) {
    struct spare *spare = argument;
    struct spare_pool *pool = spare->pool;
    spare->tid = (int32_t)gettid();
    int error = confine(pool, spare->tid);
    pthread_mutex_lock(&pool->lock);
    if (error != 0 || pool->ready_count >= READY_MAX) {
        if (pool->error == 0)
            pool->error = error != 0 ? error : ENOSPC;
        pthread_mutex_unlock(&pool->lock);
        pthread_cond_destroy(&spare->go);
        free(spare); /* never spawns: it ends in its empty domain */
        return NULL;
    }
    pool->ready[pool->ready_count++] = spare;
    while (spare->request == NULL)
        pthread_cond_wait(&spare->go, &pool->lock);
    struct spawn_request *request = spare->request;
    struct answerer *answerer = spare->answerer;
    pthread_mutex_unlock(&pool->lock);
    spawn_run(&pool->attributes, answerer, request);
    pthread_mutex_lock(&pool->lock);
    request->finished = 1;
    pthread_cond_broadcast(&pool->finished);
    pthread_mutex_unlock(&pool->lock);
    pthread_cond_destroy(&spare->go);
    free(spare);
    return NULL;
}
#endif

/* The creator thread's wait, for the server's life: the missing spares made as soon as a spawn asks for them. */
void spares_create(struct spare_pool *pool) {
#if NATIVE_SPARES
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attributes, 256 * 1024); /* spawn_run and posix_spawn's own small frames */
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (pool->missing == 0 || pool->error != 0)
            pthread_cond_wait(&pool->missing_wake, &pool->lock);
        int count = pool->missing;
        pool->missing = 0;
        pthread_mutex_unlock(&pool->lock);
        for (int made = 0; made < count; made++) {
            struct spare *spare = calloc(1, sizeof(*spare));
            pthread_t thread;
            int error = spare == NULL ? ENOMEM : 0;
            if (spare != NULL) {
                spare->pool = pool;
                pthread_cond_init(&spare->go, NULL);
                error = pthread_create(&thread, &attributes, spare_main, spare);
            }
            if (error != 0) {
                free(spare);
                pthread_mutex_lock(&pool->lock);
                pool->missing += count - made; /* asked again at the next spawn */
                pthread_mutex_unlock(&pool->lock);
                break;
            }
        }
        pthread_mutex_lock(&pool->lock);
    }
#else
    (void)pool;
#endif
}

/* From the event loop's thread: a ready spare (the last made), or NULL. The creator is not woken here: the spare's
 * replacement is made after the spawn (spares_submit), not competing with it. */
struct spare *spares_take(struct spare_pool *pool) {
    pthread_mutex_lock(&pool->lock);
    struct spare *spare = pool->ready_count > 0 ? pool->ready[--pool->ready_count] : NULL;
    if (spare != NULL)
        pool->missing++;
    pthread_mutex_unlock(&pool->lock);
    return spare;
}

/* The request carried out on `spare` (answered by `answerer` when traced, NULL untraced), waited for with the GIL
 * released; then the creator is asked for the missing spares. */
void spares_submit(struct spare_pool *pool, struct spare *spare, struct spawn_request *request,
                   struct answerer *answerer) {
    pthread_mutex_lock(&pool->lock);
    request->finished = 0;
    spare->answerer = answerer;
    spare->request = request;
    pthread_cond_signal(&spare->go);
    while (!request->finished)
        pthread_cond_wait(&pool->finished, &pool->lock);
    if (pool->missing > 0 && pool->error == 0)
        pthread_cond_signal(&pool->missing_wake);
    pthread_mutex_unlock(&pool->lock);
}

/* Ask the creator for the missing spares (a take that found none). */
void spares_replace(struct spare_pool *pool) {
    pthread_mutex_lock(&pool->lock);
    if (pool->missing > 0 && pool->error == 0)
        pthread_cond_signal(&pool->missing_wake);
    pthread_mutex_unlock(&pool->lock);
}

/* The ready spares' thread ids, oldest first (the last is taken next); their count. And the first error, if any. */
int spares_ready(struct spare_pool *pool, int32_t *tids, int room, int32_t *error) {
    pthread_mutex_lock(&pool->lock);
    int count = pool->ready_count < room ? pool->ready_count : room;
    for (int index = 0; index < count; index++)
        tids[index] = pool->ready[index]->tid;
    *error = pool->error;
    pthread_mutex_unlock(&pool->lock);
    return count;
}
