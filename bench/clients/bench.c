/*
 * bench.c: libgpud's driver for gpud-bench-clients (bench/src/bin/gpud-bench-clients.rs,
 * which builds and runs it; the Rust, Python and Go drivers measure the same two things).
 *
 *   bench SOCKET round-trip N   N acquire (1 GiB, no compute) + release round trips
 *   bench SOCKET handoff N      N handoffs of the compute slot between two connections
 *
 * After N/10 not counted, prints one JSON line:
 *   {"client":"c","phase":"...","samples_ns":[...]}
 *
 * Handoff: two threads, each with its own connection, ask for the compute slot in turn. The
 * holder waits until the daemon's status shows the other's acquire waiting, takes a
 * timestamp and releases; the other's gpud_acquire returns and it takes a timestamp; the
 * difference is one sample. Then it holds, and the roles are swapped.
 *
 * cc -O2 -std=c11 -D_GNU_SOURCE -pthread bench.c $(pkg-config --cflags --libs gpud)
 */

#include <gpud.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How long a holder waits for the other connection's acquire to show, in ns. */
#define QUEUE_WAIT_NS (10LL * 1000 * 1000 * 1000)

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void die(const char *what, gpud_code code) {
    fprintf(stderr, "bench.c: %s: %s (%s)\n", what, gpud_last_error(), gpud_code_name(code));
    exit(1);
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        gpud_code code_ = (call);                                                                  \
        if (code_ != GPUD_OK) die(#call, code_);                                                   \
    } while (0)

static void print_samples(const char *phase, const int64_t *samples, size_t n) {
    printf("{\"client\":\"c\",\"phase\":\"%s\",\"samples_ns\":[", phase);
    for (size_t i = 0; i < n; i++) printf(i ? ",%" PRId64 : "%" PRId64, samples[i]);
    printf("]}\n");
}

static void round_trip(const char *socket, size_t n) {
    gpud_client *client;
    gpud_request *request;
    CHECK(gpud_connect(socket, &client));
    CHECK(gpud_request_new(&request));
    CHECK(gpud_request_set_vram(request, 1ULL << 30));
    int64_t *samples = calloc(n, sizeof *samples);
    if (!samples) exit(1);
    size_t warmup = n / 10;
    for (size_t i = 0; i < n + warmup; i++) {
        int64_t t = now_ns();
        gpud_lease *lease;
        CHECK(gpud_acquire(client, request, &lease));
        CHECK(gpud_lease_release(lease));
        gpud_lease_free(lease);
        if (i >= warmup) samples[i - warmup] = now_ns() - t;
    }
    print_samples("round-trip", samples, n);
    free(samples);
    gpud_request_free(request);
    gpud_close(client);
}

/* What the two connections share. */
static struct {
    const gpud_request *request;
    atomic_int_fast64_t last_release;
    atomic_uint_fast64_t grants;
    atomic_bool done;
    uint64_t warmup, last;
    int64_t *samples;
    atomic_size_t n_samples;
} shared;

/* Whether the daemon shows a waiting request: the status's "waiters" list is not empty. */
static bool someone_waits(const gpud_client *client) {
    char *json;
    CHECK(gpud_status_json(client, &json));
    const char *w = strstr(json, "\"waiters\":");
    if (!w) {
        fprintf(stderr, "bench.c: no waiters in the status: %.200s\n", json);
        exit(1);
    }
    w += strlen("\"waiters\":");
    while (*w == ' ') w++;
    bool waits = w[0] == '[' && w[1] != ']';
    gpud_string_free(json);
    return waits;
}

static void *handoff_worker(void *arg) {
    const gpud_client *client = arg;
    for (;;) {
        gpud_lease *lease;
        CHECK(gpud_acquire(client, shared.request, &lease));
        int64_t now = now_ns();
        if (atomic_load(&shared.done)) {
            CHECK(gpud_lease_release(lease));
            gpud_lease_free(lease);
            return NULL;
        }
        /* The first grant follows no release; then `warmup` not counted. */
        uint64_t n = atomic_fetch_add(&shared.grants, 1);
        if (n > shared.warmup)
            shared.samples[atomic_fetch_add(&shared.n_samples, 1)] =
                now - atomic_load(&shared.last_release);
        if (n == shared.last) {
            atomic_store(&shared.done, true);
            CHECK(gpud_lease_release(lease));
            gpud_lease_free(lease);
            return NULL;
        }
        /* Release only once the other connection waits for the slot. */
        int64_t since = now_ns();
        while (!someone_waits(client)) {
            if (now_ns() - since > QUEUE_WAIT_NS) {
                fprintf(stderr, "bench.c: the other connection's acquire never showed in the queue\n");
                exit(1);
            }
        }
        atomic_store(&shared.last_release, now_ns());
        CHECK(gpud_lease_release(lease));
        gpud_lease_free(lease);
    }
}

static void handoff(const char *socket, size_t m) {
    gpud_client *clients[2];
    gpud_request *request;
    CHECK(gpud_connect(socket, &clients[0]));
    CHECK(gpud_connect(socket, &clients[1]));
    CHECK(gpud_request_new(&request));
    CHECK(gpud_request_set_compute(request, true));
    shared.request = request;
    shared.warmup = m / 10;
    shared.last = shared.warmup + m;
    shared.samples = calloc(m, sizeof *shared.samples);
    if (!shared.samples) exit(1);
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&threads[i], NULL, handoff_worker, clients[i]) != 0) {
            fprintf(stderr, "bench.c: pthread_create failed\n");
            exit(1);
        }
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    print_samples("handoff", shared.samples, atomic_load(&shared.n_samples));
    free(shared.samples);
    gpud_request_free(request);
    gpud_close(clients[0]);
    gpud_close(clients[1]);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s SOCKET round-trip|handoff COUNT\n", argv[0]);
        return 2;
    }
    char *end;
    unsigned long long count = strtoull(argv[3], &end, 10);
    if (*end || count == 0) {
        fprintf(stderr, "bench.c: bad count %s\n", argv[3]);
        return 2;
    }
    if (strcmp(argv[2], "round-trip") == 0)
        round_trip(argv[1], (size_t)count);
    else if (strcmp(argv[2], "handoff") == 0)
        handoff(argv[1], (size_t)count);
    else {
        fprintf(stderr, "bench.c: unknown phase %s\n", argv[2]);
        return 2;
    }
    return 0;
}
