/* The conformance runner for libgpud: runs every scenario of a corpus (format: the
 * conformance spec, version 1) against a fresh `gpud --simulate` each, through the C
 * interface (and raw frames over a plain socket for `raw` and `rawfirst`).
 *
 *   runner SCENARIOS [NAME]      (only the scenario NAME when given)
 *
 * The gpud binary is $GPUD_BIN, else target/debug/gpud from the current directory (the
 * repository's root). Each failing step is named with its scenario, line, what was expected
 * and what was seen; the last line is "N passed, M failed". Exit status 0 when all passed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <gpud.h>

/* Messages are cut to their buffers on purpose; socket paths are short (mkdtemp in /tmp). */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NAMES 64
#define MAX_TOKENS 64
#define LINE_MAX_LEN 8192
#define STEP_LIMIT_MS 10000

/* ---- time ------------------------------------------------------------------------------ */

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* ---- a scenario's state ----------------------------------------------------------------- */

struct client {
    char name[64];
    gpud_client *handle;
};

/* A named lease: an acquire running on a thread of its own until it is granted or refused. */
struct lease {
    char name[64];
    struct client *client;
    gpud_request *request;
    gpud_lease *handle;
    pthread_t thread;
    bool has_thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool done;
    gpud_code result;
    char message[512];
};

/* A resize running on a thread, so that a grow that never ends fails the step, not the run. */
struct resize {
    gpud_lease *lease;
    uint64_t vram; /* or, with host, the host memory */
    bool host;
    int64_t timeout_ms;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool done;
    gpud_code result;
    char message[512];
};

static struct {
    char name[256];
    int line;
    char simulate[128];
    char config[16384];
    bool started;
    char dir[256];
    char socket[320];
    pid_t gpud;
    struct client clients[MAX_NAMES];
    int nclients;
    struct lease *leases[MAX_NAMES];
    int nleases;
    bool failed;
    char why[2048];
} S;

static void fail(const char *fmt, ...) {
    if (S.failed) {
        return;
    }
    S.failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S.why, sizeof S.why, fmt, ap);
    va_end(ap);
}

/* ---- the daemon ------------------------------------------------------------------------- */

static bool start_gpud(void) {
    strcpy(S.dir, "/tmp/gpud-conformance.XXXXXX");
    if (mkdtemp(S.dir) == NULL) {
        fail("mkdtemp: %s", strerror(errno));
        return false;
    }
    chmod(S.dir, 0755);
    char config[320], state[320], log[320];
    snprintf(S.socket, sizeof S.socket, "%s/gpud.sock", S.dir);
    snprintf(config, sizeof config, "%s/gpud.toml", S.dir);
    snprintf(state, sizeof state, "%s/state", S.dir);
    snprintf(log, sizeof log, "%s/gpud.log", S.dir);
    FILE *f = fopen(config, "w");
    if (f == NULL) {
        fail("cannot write %s: %s", config, strerror(errno));
        return false;
    }
    fputs(S.config, f);
    fclose(f);
    const char *bin = getenv("GPUD_BIN");
    if (bin == NULL || *bin == '\0') {
        bin = "target/debug/gpud";
    }
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
        }
        execl(bin, bin, "--simulate", S.simulate, "--socket", S.socket, "--headroom", "0",
              "--state-dir", state, "--config", config, "--dbus", "none", (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    S.gpud = pid;
    S.started = true;
    long long deadline = now_ms() + 10000;
    while (now_ms() < deadline) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", S.socket);
        int ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
        close(s);
        if (ok) {
            return true;
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            S.gpud = 0;
            fail("gpud (%s) exited before its socket accepted; see %s", bin, log);
            return false;
        }
        sleep_ms(10);
    }
    fail("gpud's socket did not accept within 10 s; see %s", log);
    return false;
}

static void stop_gpud(void) {
    if (S.gpud > 0) {
        kill(S.gpud, SIGTERM);
        long long deadline = now_ms() + 3000;
        int status;
        while (waitpid(S.gpud, &status, WNOHANG) == 0) {
            if (now_ms() > deadline) {
                kill(S.gpud, SIGKILL);
                waitpid(S.gpud, &status, 0);
                break;
            }
            sleep_ms(10);
        }
    }
    S.gpud = 0;
    if (S.dir[0] != '\0' && !S.failed) {
        char command[400];
        snprintf(command, sizeof command, "rm -rf '%s'", S.dir);
        if (system(command) != 0) {
            fprintf(stderr, "could not remove %s\n", S.dir);
        }
    } else if (S.dir[0] != '\0') {
        fprintf(stderr, "  (gpud's folder and log kept: %s)\n", S.dir);
    }
    S.dir[0] = '\0';
}

/* ---- clients and leases ----------------------------------------------------------------- */

static struct client *client_named(const char *name) {
    for (int i = 0; i < S.nclients; i++) {
        if (strcmp(S.clients[i].name, name) == 0) {
            if (S.clients[i].handle == NULL) {
                /* Used again after `drop`: a new connection. */
                break;
            }
            return &S.clients[i];
        }
    }
    struct client *c = NULL;
    for (int i = 0; i < S.nclients; i++) {
        if (strcmp(S.clients[i].name, name) == 0) {
            c = &S.clients[i];
        }
    }
    if (c == NULL) {
        if (S.nclients == MAX_NAMES) {
            fail("more than %d clients", MAX_NAMES);
            return NULL;
        }
        c = &S.clients[S.nclients++];
        snprintf(c->name, sizeof c->name, "%s", name);
    }
    gpud_code rc = gpud_connect(S.socket, &c->handle);
    if (rc != GPUD_OK) {
        c->handle = NULL;
        fail("client %s cannot connect: %s (%s)", name, gpud_code_name(rc), gpud_last_error());
        return NULL;
    }
    return c;
}

static struct lease *lease_named(const char *name) {
    for (int i = 0; i < S.nleases; i++) {
        if (strcmp(S.leases[i]->name, name) == 0) {
            return S.leases[i];
        }
    }
    return NULL;
}

static struct lease *new_lease(const char *name, struct client *c) {
    struct lease *l = lease_named(name);
    if (l != NULL) {
        if (l->has_thread && !l->done) {
            fail("lease %s is still being acquired", name);
            return NULL;
        }
        if (l->has_thread) {
            pthread_join(l->thread, NULL);
            l->has_thread = false;
        }
        gpud_lease_free(l->handle);
        gpud_request_free(l->request);
    } else {
        if (S.nleases == MAX_NAMES) {
            fail("more than %d leases", MAX_NAMES);
            return NULL;
        }
        l = calloc(1, sizeof *l);
        pthread_mutex_init(&l->lock, NULL);
        pthread_cond_init(&l->changed, NULL);
        snprintf(l->name, sizeof l->name, "%s", name);
        S.leases[S.nleases++] = l;
    }
    l->client = c;
    l->request = NULL;
    l->handle = NULL;
    l->done = false;
    l->result = GPUD_OK;
    l->message[0] = '\0';
    return l;
}

static void *acquire_main(void *arg) {
    struct lease *l = arg;
    gpud_lease *handle = NULL;
    gpud_code rc = gpud_acquire(l->client->handle, l->request, &handle);
    pthread_mutex_lock(&l->lock);
    l->handle = handle;
    l->result = rc;
    if (rc != GPUD_OK) {
        snprintf(l->message, sizeof l->message, "%s", gpud_last_error());
    }
    l->done = true;
    pthread_cond_broadcast(&l->changed);
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* Waits until `*done` (under `lock`) or `ms` pass; whether it is done. */
static bool wait_done(pthread_mutex_t *lock, pthread_cond_t *changed, bool *done, long ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(lock);
    while (!*done) {
        if (pthread_cond_timedwait(changed, lock, &until) == ETIMEDOUT) {
            break;
        }
    }
    bool d = *done;
    pthread_mutex_unlock(lock);
    return d;
}

/* ---- steps ------------------------------------------------------------------------------ */

static const char *arg_value(char **args, int n, const char *key) {
    size_t k = strlen(key);
    for (int i = 0; i < n; i++) {
        if (strncmp(args[i], key, k) == 0 && args[i][k] == '=') {
            return args[i] + k + 1;
        }
    }
    return NULL;
}

static bool size_value(const char *text, uint64_t *out) {
    if (strcmp(text, "max") == 0) {
        *out = UINT64_MAX;
        return true;
    }
    return gpud_parse_size(text, out) == GPUD_OK;
}

/* The request the arguments ask for; on a refusal by the library, its code in *refused. */
static gpud_request *build_request(char **args, int n, gpud_code *refused) {
    gpud_request *r = NULL;
    *refused = gpud_request_new(&r);
    if (*refused != GPUD_OK) {
        return NULL;
    }
    for (int i = 0; i < n && *refused == GPUD_OK; i++) {
        char *eq = strchr(args[i], '=');
        if (eq == NULL) {
            fail("argument %s is not key=value", args[i]);
            break;
        }
        const char *v = eq + 1;
        size_t k = (size_t)(eq - args[i]);
        if (strncmp(args[i], "vram", k) == 0 && k == 4) {
            uint64_t bytes;
            if (!size_value(v, &bytes)) {
                fail("vram=%s is no size", v);
                break;
            }
            *refused = gpud_request_set_vram(r, bytes);
        } else if (strncmp(args[i], "compute", k) == 0 && k == 7) {
            *refused = gpud_request_set_compute(r, strcmp(v, "yes") == 0);
        } else if (strncmp(args[i], "device", k) == 0 && k == 6) {
            *refused = gpud_request_set_device(r, v);
        } else if (strncmp(args[i], "class", k) == 0 && k == 5) {
            *refused = gpud_request_set_class_name(r, v);
        } else if (strncmp(args[i], "timeout", k) == 0 && k == 7) {
            *refused = gpud_request_set_timeout_ms(r, atoll(v));
        } else if (strncmp(args[i], "label", k) == 0 && k == 5) {
            *refused = gpud_request_set_label(r, v);
        } else if ((strncmp(args[i], "host_mem", k) == 0 && k == 8) ||
                   (strncmp(args[i], "pinned", k) == 0 && k == 6)) {
            uint64_t bytes;
            if (!size_value(v, &bytes)) {
                fail("%s is no size", args[i]);
                break;
            }
            *refused = k == 8 ? gpud_request_set_host_memory(r, bytes)
                              : gpud_request_set_pinned(r, bytes);
        } else if (strncmp(args[i], "cpus", k) == 0 && k == 4) {
            *refused = gpud_request_set_cpus(r, (uint32_t)strtoul(v, NULL, 10));
        } else if (strncmp(args[i], "numa", k) == 0 && k == 4) {
            *refused = gpud_request_set_numa(r, v);
        } else {
            fail("unknown argument %s", args[i]);
        }
    }
    return r;
}

static void begin(struct client *c, const char *name, char **args, int n) {
    struct lease *l = new_lease(name, c);
    if (l == NULL) {
        return;
    }
    gpud_code refused;
    l->request = build_request(args, n, &refused);
    if (S.failed) {
        return;
    }
    if (refused != GPUD_OK) {
        l->result = refused;
        snprintf(l->message, sizeof l->message, "%s", gpud_last_error());
        l->done = true;
        return;
    }
    if (pthread_create(&l->thread, NULL, acquire_main, l) != 0) {
        fail("pthread_create failed");
        return;
    }
    l->has_thread = true;
}

/* Compares an outcome with the expectation (`ok`/`granted` for GPUD_OK, else a code name). */
static void expect_code(const char *expect, gpud_code got, const char *message) {
    const char *seen = got == GPUD_OK ? NULL : gpud_code_name(got);
    bool ok_expected = expect != NULL && (strcmp(expect, "ok") == 0 || strcmp(expect, "granted") == 0);
    if (expect == NULL) {
        fail("the step needs an expectation (-> ...)");
    } else if (got == GPUD_OK && !ok_expected) {
        fail("expected %s, got ok (granted)", expect);
    } else if (got != GPUD_OK && (ok_expected || strcmp(expect, seen) != 0)) {
        fail("expected %s, got %s (%s)", expect, seen, message);
    }
}

static void await_lease(const char *name, const char *expect) {
    struct lease *l = lease_named(name);
    if (l == NULL) {
        fail("no lease %s was begun", name);
        return;
    }
    if (!wait_done(&l->lock, &l->changed, &l->done, STEP_LIMIT_MS)) {
        fail("lease %s: no answer within %d ms (expected %s)", name, STEP_LIMIT_MS,
             expect ? expect : "?");
        return;
    }
    expect_code(expect, l->result, l->message);
}

static gpud_lease *granted(const char *name) {
    struct lease *l = lease_named(name);
    if (l == NULL || !l->done || l->handle == NULL) {
        fail("lease %s is not granted", name);
        return NULL;
    }
    return l->handle;
}

static void *resize_main(void *arg) {
    struct resize *r = arg;
    gpud_code rc = r->host ? gpud_lease_resize_host_memory(r->lease, r->vram, r->timeout_ms)
                           : gpud_lease_resize(r->lease, r->vram, r->timeout_ms);
    pthread_mutex_lock(&r->lock);
    r->result = rc;
    if (rc != GPUD_OK) {
        snprintf(r->message, sizeof r->message, "%s", gpud_last_error());
    }
    r->done = true;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

static void resize(const char *name, char **args, int n, const char *expect) {
    gpud_lease *handle = granted(name);
    const char *vram = arg_value(args, n, "vram"), *timeout = arg_value(args, n, "timeout");
    const char *host = arg_value(args, n, "host_mem");
    if (handle == NULL) {
        return;
    }
    struct resize *r = calloc(1, sizeof *r);
    r->lease = handle;
    r->timeout_ms = timeout ? atoll(timeout) : GPUD_NO_TIMEOUT;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->changed, NULL);
    r->host = host != NULL;
    if ((vram == NULL) == (host == NULL) || !size_value(host ? host : vram, &r->vram)) {
        fail("resize needs vram=SIZE or host_mem=SIZE");
        free(r);
        return;
    }
    pthread_t t;
    pthread_create(&t, NULL, resize_main, r);
    if (!wait_done(&r->lock, &r->changed, &r->done, STEP_LIMIT_MS)) {
        /* The thread still uses the lease: leave both behind (the scenario fails). */
        pthread_detach(t);
        fail("resize of %s: no answer within %d ms", name, STEP_LIMIT_MS);
        return;
    }
    pthread_join(t, NULL);
    expect_code(expect, r->result, r->message);
    free(r);
}

static void check(const char *name, char **args, int n) {
    gpud_lease *l = granted(name);
    if (l == NULL) {
        return;
    }
    const char *vram = arg_value(args, n, "vram"), *compute = arg_value(args, n, "compute"),
               *device = arg_value(args, n, "device");
    if (vram != NULL) {
        uint64_t want = 0, got = 0;
        size_value(vram, &want);
        gpud_lease_vram_bytes(l, &got);
        if (want != got) {
            fail("lease %s has %llu bytes, expected %llu", name, (unsigned long long)got,
                 (unsigned long long)want);
        }
    }
    if (compute != NULL) {
        bool got = false;
        gpud_lease_compute(l, &got);
        if (got != (strcmp(compute, "yes") == 0)) {
            fail("lease %s: compute is %s, expected %s", name, got ? "yes" : "no", compute);
        }
    }
    if (device != NULL) {
        uint32_t got = 0;
        gpud_lease_device_index(l, &got);
        if ((long)got != atol(device)) {
            fail("lease %s is on device %u, expected %s", name, got, device);
        }
    }
    const char *host_mem = arg_value(args, n, "host_mem"), *pinned = arg_value(args, n, "pinned"),
               *cpus = arg_value(args, n, "cpus"), *numa_node = arg_value(args, n, "numa_node");
    for (int which = 0; which < 2; which++) {
        const char *text = which == 0 ? host_mem : pinned;
        if (text == NULL) {
            continue;
        }
        uint64_t want = 0, got = 0;
        size_value(text, &want);
        if (which == 0) {
            gpud_lease_host_memory_bytes(l, &got);
        } else {
            gpud_lease_pinned_bytes(l, &got);
        }
        if (want != got) {
            fail("lease %s has %llu bytes of %s, expected %llu", name, (unsigned long long)got,
                 which == 0 ? "host memory" : "page-locked memory", (unsigned long long)want);
        }
    }
    if (cpus != NULL) {
        const uint32_t *list = NULL;
        size_t count = 0;
        gpud_lease_cpus(l, &list, &count);
        if ((long)count != atol(cpus)) {
            fail("lease %s has %zu CPUs, expected %s", name, count, cpus);
        }
    }
    if (numa_node != NULL) {
        int32_t got = GPUD_NO_NUMA_NODE;
        gpud_lease_numa_node(l, &got);
        bool none = strcmp(numa_node, "none") == 0;
        if (none ? got != GPUD_NO_NUMA_NODE : (long)got != atol(numa_node)) {
            fail("lease %s has NUMA node %d, expected %s", name, (int)got, numa_node);
        }
    }
}

static bool fd_readable(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void yield_step(const char *name, const char *expect) {
    gpud_lease *l = granted(name);
    if (l == NULL) {
        return;
    }
    int fd = -1;
    bool flag = false;
    gpud_lease_notice_fd(l, &fd);
    if (expect != NULL && strcmp(expect, "yes") == 0) {
        bool readable = fd_readable(fd, 2000);
        gpud_lease_yield_requested(l, &flag);
        if (!flag || !readable) {
            fail("lease %s: no yield notice within 2 s (flag %s, descriptor %s)", name,
                 flag ? "set" : "unset", readable ? "readable" : "not readable");
        }
    } else if (expect != NULL && strcmp(expect, "no") == 0) {
        bool readable = fd_readable(fd, 300);
        gpud_lease_yield_requested(l, &flag);
        if (flag || readable) {
            fail("lease %s: a yield notice arrived (flag %s, descriptor %s)", name,
                 flag ? "set" : "unset", readable ? "readable" : "not readable");
        }
    } else {
        fail("yield expects yes or no");
    }
}

static void revoked_step(const char *name, const char *expect) {
    gpud_lease *l = granted(name);
    if (l == NULL) {
        return;
    }
    if (expect == NULL || strcmp(expect, "yes") != 0) {
        fail("revoked expects yes");
        return;
    }
    int fd = -1;
    gpud_lease_notice_fd(l, &fd);
    bool lost = false;
    long long deadline = now_ms() + 2000;
    while (!lost && now_ms() < deadline) {
        fd_readable(fd, 50);
        gpud_lease_is_lost(l, &lost);
    }
    if (!lost) {
        fail("lease %s was not revoked within 2 s", name);
    }
}

static int json_array_len(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":[", key);
    const char *p = strstr(json, pattern);
    if (p == NULL) {
        return -1;
    }
    p += strlen(pattern);
    int depth = 0, count = 0;
    bool in_string = false, any = false;
    for (; *p; p++) {
        char c = *p;
        if (in_string) {
            if (c == '\\' && p[1]) {
                p++;
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = any = true;
        } else if (c == '[' || c == '{') {
            depth++;
            any = true;
        } else if (c == ']' || c == '}') {
            if (depth == 0) {
                return any ? count + 1 : 0;
            }
            depth--;
        } else if (c == ',' && depth == 0) {
            count++;
        } else if (c != ' ' && c != '\n') {
            any = true;
        }
    }
    return -1;
}

static void status_step(struct client *c, char **args, int n) {
    char *json = NULL;
    gpud_code rc = gpud_status_json(c->handle, &json);
    if (rc != GPUD_OK) {
        fail("status: %s (%s)", gpud_code_name(rc), gpud_last_error());
        return;
    }
    const char *keys[] = {"leases", "waiters", "devices"};
    for (int i = 0; i < 3; i++) {
        const char *want = arg_value(args, n, keys[i]);
        if (want != NULL) {
            int got = json_array_len(json, keys[i]);
            if (got != atoi(want)) {
                fail("status has %d %s, expected %s", got, keys[i], want);
                break;
            }
        }
    }
    gpud_string_free(json);
}

/* ---- raw frames ------------------------------------------------------------------------- */

static bool send_frame(int s, const char *text) {
    size_t len = strlen(text);
    unsigned char head[4] = {(unsigned char)(len >> 24), (unsigned char)(len >> 16),
                             (unsigned char)(len >> 8), (unsigned char)len};
    return send(s, head, 4, MSG_NOSIGNAL) == 4 &&
           send(s, text, len, MSG_NOSIGNAL) == (ssize_t)len;
}

/* Sends (a hello and) `frame`; expects an error reply or error frame with `code`. */
static void raw(const char *code, const char *frame, bool hello) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", S.socket);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        fail("raw connect: %s", strerror(errno));
        close(s);
        return;
    }
    if ((hello && !send_frame(s, "{\"type\":\"hello\",\"version\":1,\"client\":\"conformance-c\"}")) ||
        !send_frame(s, frame)) {
        /* The daemon may have answered and closed already: read what came. */
    }
    char want[128];
    snprintf(want, sizeof want, "\"code\":\"%s\"", code);
    static char buf[1 << 20];
    size_t have = 0;
    long long deadline = now_ms() + 2000;
    bool found = false;
    char seen[256] = "nothing";
    while (!found && now_ms() < deadline) {
        struct pollfd p = {s, POLLIN, 0};
        if (poll(&p, 1, 50) != 1) {
            continue;
        }
        ssize_t got = recv(s, buf + have, sizeof buf - 1 - have, 0);
        if (got <= 0) {
            break;
        }
        have += (size_t)got;
        /* Whole frames so far. */
        size_t at = 0;
        while (have - at >= 4) {
            size_t len = ((size_t)(unsigned char)buf[at] << 24) |
                         ((size_t)(unsigned char)buf[at + 1] << 16) |
                         ((size_t)(unsigned char)buf[at + 2] << 8) | (unsigned char)buf[at + 3];
            if (have - at - 4 < len) {
                break;
            }
            char saved = buf[at + 4 + len];
            buf[at + 4 + len] = '\0';
            const char *body = buf + at + 4;
            if (strstr(body, want) != NULL) {
                found = true;
            } else if (strstr(body, "\"code\":") != NULL) {
                snprintf(seen, sizeof seen, "%s", body);
            }
            buf[at + 4 + len] = saved;
            at += 4 + len;
        }
        memmove(buf, buf + at, have - at);
        have -= at;
    }
    close(s);
    if (!found) {
        fail("raw: expected an error %s, saw %s", code, seen);
    }
}

/* ---- the scenario's lines --------------------------------------------------------------- */

static void reset(const char *name) {
    memset(&S, 0, sizeof S);
    snprintf(S.name, sizeof S.name, "%s", name);
    strcpy(S.simulate, "1x16GiB");
}

static void finish(void) {
    /* Wake acquires that still wait, then free what the scenario made. */
    for (int i = 0; i < S.nclients; i++) {
        if (S.clients[i].handle != NULL) {
            gpud_disconnect(S.clients[i].handle);
        }
    }
    for (int i = 0; i < S.nleases; i++) {
        struct lease *l = S.leases[i];
        if (l->has_thread) {
            pthread_join(l->thread, NULL);
        }
        gpud_lease_free(l->handle);
        gpud_request_free(l->request);
        free(l);
    }
    for (int i = 0; i < S.nclients; i++) {
        gpud_close(S.clients[i].handle);
    }
    stop_gpud();
}

static int split(char *line, char **tokens) {
    int n = 0;
    for (char *t = strtok(line, " \t"); t != NULL && n < MAX_TOKENS; t = strtok(NULL, " \t")) {
        tokens[n++] = t;
    }
    return n;
}

static bool is_verb(const char *w) {
    const char *verbs[] = {"acquire", "begin",   "pending", "await",  "release", "resize",
                           "check",   "yield",   "revoked", "drop",   "status",  "drain",
                           "undrain", "revoke",  "raw",     "rawfirst", "sleep", NULL};
    for (int i = 0; verbs[i]; i++) {
        if (strcmp(w, verbs[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* One step line. `original` is the line as written (for raw frames). */
static void step(char *line, const char *original) {
    char *tokens[MAX_TOKENS];
    int n = split(line, tokens);
    const char *expect = NULL;
    for (int i = 0; i < n; i++) {
        if (strcmp(tokens[i], "->") == 0) {
            expect = i + 1 < n ? tokens[i + 1] : NULL;
            n = i;
            break;
        }
    }
    if (n == 0) {
        fail("empty step");
        return;
    }
    /* `raw`, `rawfirst` and `sleep` may come with or without a client name. */
    int v = (n >= 2 && is_verb(tokens[1]) && !is_verb(tokens[0])) ? 1 : 0;
    if (v == 0 && !(strcmp(tokens[0], "raw") == 0 || strcmp(tokens[0], "rawfirst") == 0 ||
                    strcmp(tokens[0], "sleep") == 0)) {
        fail("a step is: <client> <verb> ...");
        return;
    }
    const char *verb = tokens[v];
    if (!S.started && !start_gpud()) {
        return;
    }
    if (strcmp(verb, "raw") == 0 || strcmp(verb, "rawfirst") == 0) {
        if (n < v + 3) {
            fail("%s needs a code and a frame", verb);
            return;
        }
        /* The frame is the rest of the original line after the code. */
        const char *p = original;
        for (int i = 0; i < v + 2; i++) {
            p += strspn(p, " \t");
            p += strcspn(p, " \t");
        }
        p += strspn(p, " \t");
        char frame[LINE_MAX_LEN];
        snprintf(frame, sizeof frame, "%s", p);
        frame[strcspn(frame, "\r\n")] = '\0';
        raw(tokens[v + 1], frame, strcmp(verb, "raw") == 0);
        return;
    }
    if (strcmp(verb, "sleep") == 0) {
        if (n < v + 2) {
            fail("sleep needs milliseconds");
            return;
        }
        sleep_ms(atol(tokens[v + 1]));
        return;
    }
    struct client *c = client_named(tokens[0]);
    if (c == NULL) {
        return;
    }
    const char *name = n > 2 ? tokens[2] : NULL;
    char **args = tokens + 3;
    int nargs = n > 3 ? n - 3 : 0;
    bool needs_lease = strcmp(verb, "drop") != 0 && strcmp(verb, "status") != 0 &&
                       strcmp(verb, "drain") != 0 && strcmp(verb, "undrain") != 0;
    if (needs_lease && (name == NULL || strchr(name, '=') != NULL)) {
        fail("%s needs a lease name", verb);
        return;
    }
    if (strcmp(verb, "acquire") == 0) {
        begin(c, name, args, nargs);
        if (!S.failed) {
            await_lease(name, expect);
        }
    } else if (strcmp(verb, "begin") == 0) {
        begin(c, name, args, nargs);
    } else if (strcmp(verb, "pending") == 0) {
        struct lease *l = lease_named(name);
        if (l == NULL) {
            fail("no lease %s was begun", name);
        } else if (wait_done(&l->lock, &l->changed, &l->done, 200)) {
            fail("lease %s is not pending: %s", name,
                 l->result == GPUD_OK ? "granted" : gpud_code_name(l->result));
        }
    } else if (strcmp(verb, "await") == 0) {
        await_lease(name, expect);
    } else if (strcmp(verb, "release") == 0) {
        gpud_lease *l = granted(name);
        if (l != NULL) {
            gpud_code rc = gpud_lease_release(l);
            expect_code(expect, rc, gpud_last_error());
        }
    } else if (strcmp(verb, "resize") == 0) {
        resize(name, args, nargs, expect);
    } else if (strcmp(verb, "check") == 0) {
        check(name, args, nargs);
    } else if (strcmp(verb, "yield") == 0) {
        yield_step(name, expect);
    } else if (strcmp(verb, "revoked") == 0) {
        revoked_step(name, expect);
    } else if (strcmp(verb, "drop") == 0) {
        gpud_disconnect(c->handle);
        /* Its leases stay named (they report lost); the name connects anew if used again. */
        for (int i = 0; i < S.nleases; i++) {
            if (S.leases[i]->client == c && S.leases[i]->has_thread) {
                pthread_join(S.leases[i]->thread, NULL);
                S.leases[i]->has_thread = false;
            }
        }
        gpud_close(c->handle);
        c->handle = NULL;
        for (int i = 0; i < S.nleases; i++) {
            if (S.leases[i]->client == c) {
                S.leases[i]->client = NULL;
            }
        }
    } else if (strcmp(verb, "status") == 0) {
        status_step(c, tokens + 2, n - 2);
    } else if (strcmp(verb, "drain") == 0 || strcmp(verb, "undrain") == 0) {
        const char *device = arg_value(tokens + 2, n - 2, "device");
        if (device == NULL) {
            fail("%s needs device=N", verb);
            return;
        }
        gpud_code rc = strcmp(verb, "drain") == 0 ? gpud_drain(c->handle, device)
                                                  : gpud_undrain(c->handle, device);
        expect_code(expect, rc, gpud_last_error());
    } else if (strcmp(verb, "revoke") == 0) {
        gpud_lease *l = granted(name);
        uint64_t id = 0;
        if (l != NULL) {
            gpud_lease_id(l, &id);
            gpud_code rc = gpud_revoke(c->handle, id);
            expect_code(expect, rc, gpud_last_error());
        }
    } else {
        fail("unknown verb %s", verb);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SCENARIOS [NAME]\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    FILE *f = fopen(argv[1], "r");
    if (f == NULL) {
        fprintf(stderr, "%s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    const char *only = argc > 2 ? argv[2] : NULL;
    int passed = 0, failed = 0, number = 0;
    bool in_scenario = false, skipping = false;
    char line[LINE_MAX_LEN], work[LINE_MAX_LEN];
    while (fgets(line, sizeof line, f) != NULL) {
        number++;
        line[strcspn(line, "\r\n")] = '\0';
        const char *p = line + strspn(line, " \t");
        if (*p == '\0' || *p == '#') {
            continue;
        }
        snprintf(work, sizeof work, "%s", p);
        char *tokens[MAX_TOKENS];
        int n = split(work, tokens);
        if (strcmp(tokens[0], "scenario") == 0) {
            if (in_scenario) {
                fprintf(stderr, "%s:%d: scenario inside scenario %s\n", argv[1], number, S.name);
                return 2;
            }
            reset(n > 1 ? tokens[1] : "?");
            in_scenario = true;
            skipping = only != NULL && strcmp(only, S.name) != 0;
            continue;
        }
        if (!in_scenario) {
            fprintf(stderr, "%s:%d: a line outside a scenario\n", argv[1], number);
            return 2;
        }
        if (strcmp(tokens[0], "end") == 0) {
            in_scenario = false;
            if (skipping) {
                continue;
            }
            if (!S.failed && !S.started) {
                start_gpud();
            }
            bool ok = !S.failed;
            if (ok) {
                passed++;
                printf("ok %s\n", S.name);
            } else {
                failed++;
                printf("FAIL %s (%s:%d): %s\n", S.name, argv[1], S.line, S.why);
            }
            fflush(stdout);
            finish();
            continue;
        }
        if (skipping || S.failed) {
            continue;
        }
        S.line = number;
        if (strcmp(tokens[0], "gpud") == 0) {
            const char *spec = n > 1 && strncmp(tokens[1], "simulate=", 9) == 0 ? tokens[1] + 9 : NULL;
            if (spec == NULL || S.started) {
                fail("gpud simulate=SPEC comes before the steps");
            } else {
                snprintf(S.simulate, sizeof S.simulate, "%s", spec);
            }
        } else if (strcmp(tokens[0], "config") == 0) {
            const char *toml = p + strlen("config");
            toml += strspn(toml, " \t");
            if (S.started) {
                fail("config comes before the steps");
            } else if (strlen(S.config) + strlen(toml) + 2 < sizeof S.config) {
                strcat(S.config, toml);
                strcat(S.config, "\n");
            }
        } else {
            char copy[LINE_MAX_LEN];
            snprintf(copy, sizeof copy, "%s", p);
            step(copy, p);
            if (S.failed) {
                char again[LINE_MAX_LEN];
                snprintf(again, sizeof again, "%s: %s", p, S.why);
                snprintf(S.why, sizeof S.why, "%s", again);
            }
        }
    }
    fclose(f);
    if (in_scenario) {
        fprintf(stderr, "%s: scenario %s has no end\n", argv[1], S.name);
        return 2;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 && passed > 0 ? 0 : 1;
}
