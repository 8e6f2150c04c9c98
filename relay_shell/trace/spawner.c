/* The exec trace's native spawner (adr/0036): a traced one-shot tree's first process started by the spawner thread
 * without the interpreter. The spawner thread (trace/spawners.py) waits in `spawner_serve`, one foreign call (ctypes
 * releases the GIL); the event loop's thread hands it a request with `spawner_submit`, one foreign call that blocks,
 * the GIL released, until the child is spawned. Here: the unit's cgroup entered (cgroup.threads "0": this thread),
 * glibc's posix_spawn with the file actions and attributes trace/spawn.py gives the Python path, the cgroup left;
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
};

struct spawner {
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* the spawner thread: a request, or work for Python */
    pthread_cond_t finished; /* the submitting thread: its request is done */
    struct spawn_request *request;
    int python;
    struct answerer *answerer;
    posix_spawnattr_t attributes;
};

int spawner_available(void) { return NATIVE_SPAWN; }

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

/* On the spawner thread (or a readonly spare, spares.c): the request carried out, its outcome in it. `answerer`
 * NULL: an untraced spawn (no first exec to expect). */
void spawn_run(const posix_spawnattr_t *attributes, struct answerer *answerer, struct spawn_request *request) {
    posix_spawn_file_actions_t actions;
    request->pid = 0;
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
#endif

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
        pthread_mutex_unlock(&self->lock);
#if NATIVE_SPAWN
        if (answerer != NULL)
            spawn_run(&self->attributes, answerer, request);
        else
#endif
        {
            request->stage = ACTIONS;
            request->error = ENOSYS;
        }
        pthread_mutex_lock(&self->lock);
        self->request = NULL;
        request->finished = 1;
        pthread_cond_broadcast(&self->finished);
    }
}

/* From the event loop's thread: the request carried out by the spawner thread, waited for (the GIL released). The
 * callers take turns (spawners.py `one_at_a_time`); one waiting for another's request first is harmless. */
void spawner_submit(struct spawner *self, struct spawn_request *request) {
    pthread_mutex_lock(&self->lock);
    while (self->request != NULL)
        pthread_cond_wait(&self->finished, &self->lock);
    request->finished = 0;
    self->request = request;
    pthread_cond_signal(&self->wake);
    while (!request->finished)
        pthread_cond_wait(&self->finished, &self->lock);
    pthread_mutex_unlock(&self->lock);
}

/* Work posted for Python: `spawner_serve` returns to run it on the spawner thread. */
void spawner_python(struct spawner *self) {
    pthread_mutex_lock(&self->lock);
    self->python = 1;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
}
