/* Checks for the test programs: each failure names the file, line, call and code. */
#ifndef GPUD_TEST_CHECK_H
#define GPUD_TEST_CHECK_H

#include <gpud.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GIB (1ULL << 30)

#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                    \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, "\n");                                                             \
        exit(1);                                                                           \
    } while (0)

/* `call` returns `want`. */
#define EXPECT_CODE(call, want)                                                            \
    do {                                                                                   \
        gpud_code got_ = (call);                                                           \
        if (got_ != (want)) {                                                              \
            FAIL("%s: got %s (%d: %s), want %s", #call, gpud_code_name(got_), (int)got_,   \
                 gpud_last_error(), gpud_code_name(want));                                 \
        }                                                                                  \
    } while (0)

#define CHECK_OK(call) EXPECT_CODE(call, GPUD_OK)

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            FAIL("check failed: %s", #cond);                                               \
        }                                                                                  \
    } while (0)

static inline void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Whether `fd` becomes readable within `ms`. */
static inline int readable_within(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* A request with these values (device NULL: any). */
static inline gpud_request *request(uint64_t vram, int compute, const char *device) {
    gpud_request *r = NULL;
    CHECK_OK(gpud_request_new(&r));
    CHECK_OK(gpud_request_set_vram(r, vram));
    CHECK_OK(gpud_request_set_compute(r, compute != 0));
    if (device != NULL) {
        CHECK_OK(gpud_request_set_device(r, device));
    }
    return r;
}

/* The number of elements of the top-level array `key` in a status JSON text. */
static inline int json_array_len(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":[", key);
    const char *p = strstr(json, pattern);
    if (p == NULL) {
        return -1;
    }
    p += strlen(pattern);
    int depth = 0, count = 0, in_string = 0, any = 0;
    for (; *p; p++) {
        char c = *p;
        if (in_string) {
            if (c == '\\' && p[1]) {
                p++;
            } else if (c == '"') {
                in_string = 0;
            }
            continue;
        }
        if (c == '"') {
            in_string = 1;
            any = 1;
        } else if (c == '[' || c == '{') {
            depth++;
            any = 1;
        } else if (c == ']' || c == '}') {
            if (depth == 0) {
                return any ? count + 1 : 0;
            }
            depth--;
        } else if (c == ',' && depth == 0) {
            count++;
        } else if (c != ' ' && c != '\n') {
            any = 1;
        }
    }
    return -1;
}

/* How many leases and waiters the daemon has. */
static inline void counts(const gpud_client *c, int *leases, int *waiters) {
    char *json = NULL;
    CHECK_OK(gpud_status_json(c, &json));
    *leases = json_array_len(json, "leases");
    *waiters = json_array_len(json, "waiters");
    gpud_string_free(json);
}

#endif
