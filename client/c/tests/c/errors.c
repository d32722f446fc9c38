/* Every error a client can meet through libgpud, each produced and checked against its code.
 * Usage: errors MODE SOCKET, MODE one of
 *   root     (a root session on a 1x16GiB daemon): argument checks, refusals, waits, loss
 *   limits   (limits.max_leases_per_session = 1): limit_exceeded
 *   user     (as uid 65534, allowed, not admin, not critical): not_allowed, permission_denied
 *   refused  (as uid 65534, not allowed): not_allowed at connect */
#include "check.h"

static void arguments(const char *socket) {
    gpud_client *c = NULL;
    gpud_request *r = NULL;
    gpud_lease *l = NULL;
    uint64_t u = 0;
    bool b = false;
    char *s = NULL;
    const char *cs = NULL;
    int fd = 0;

    /* connect_failed */
    EXPECT_CODE(gpud_connect("/nonexistent/gpud.sock", &c), GPUD_E_CONNECT_FAILED);
    CHECK(strstr(gpud_last_error(), "/nonexistent/gpud.sock") != NULL);

    /* null_argument: every pointer is checked. */
    EXPECT_CODE(gpud_connect(socket, NULL), GPUD_E_NULL_ARGUMENT);
    CHECK(strcmp(gpud_last_error(), "out is NULL") == 0);
    CHECK_OK(gpud_connect(socket, &c));
    CHECK_OK(gpud_request_new(&r));
    EXPECT_CODE(gpud_request_new(NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_request_set_vram(NULL, 1), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_request_set_compute(NULL, true), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_request_set_device_any(NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_request_set_device_index(NULL, 0), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_request_set_device(r, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_request_set_class(NULL, GPUD_CLASS_HIGH), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_request_set_class_name(r, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_request_set_timeout_ms(NULL, 5), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_request_set_label(NULL, "x"), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_acquire(NULL, r, &l), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_acquire(c, NULL, &l), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_acquire(c, r, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_try_acquire(c, r, 10, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_status_json(c, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_status_json(NULL, &s), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_metrics_text(c, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_drain(c, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_undrain(NULL, "0"), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_revoke(NULL, 1), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_ping(NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_session_id(c, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_disconnect(NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_release(NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_resize(NULL, 1, 0), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_id(NULL, &u), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_vram_bytes(NULL, &u), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_device_uuid(NULL, &cs), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_cuda_visible_devices(NULL, &cs), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_compute(NULL, &b), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_yield_requested(NULL, &b), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_is_lost(NULL, &b), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_notice_fd(NULL, &fd), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_device_name(NULL, &cs), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_device_index(NULL, (uint32_t *)&fd), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_class(NULL, (gpud_class *)&fd), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_parse_size(NULL, &u), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_parse_size("1GiB", NULL), GPUD_E_NULL_ARGUMENT);
    gpud_close(NULL);
    gpud_lease_free(NULL);
    gpud_request_free(NULL);
    gpud_string_free(NULL);

    /* invalid_argument: not UTF-8, no such class number, no size. */
    EXPECT_CODE(gpud_connect("/tmp/\xff.sock", &c), GPUD_E_INVALID_ARGUMENT);
    EXPECT_CODE(gpud_request_set_label(r, "caf\xc3"), GPUD_E_INVALID_ARGUMENT);
    EXPECT_CODE(gpud_request_set_class(r, 42), GPUD_E_INVALID_ARGUMENT);
    EXPECT_CODE(gpud_request_set_class(r, -1), GPUD_E_INVALID_ARGUMENT);
    EXPECT_CODE(gpud_parse_size("lots", &u), GPUD_E_INVALID_ARGUMENT);
    CHECK(strstr(gpud_last_error(), "invalid size") != NULL);
    CHECK(strcmp(gpud_code_name(12345), "unknown") == 0);

    /* invalid_request: from the library (what the daemon would say) and from the daemon. */
    EXPECT_CODE(gpud_request_set_class_name(r, "urgent"), GPUD_E_INVALID_REQUEST);
    EXPECT_CODE(gpud_request_set_device(r, "../etc"), GPUD_E_INVALID_REQUEST);
    EXPECT_CODE(gpud_acquire(c, r, &l), GPUD_E_INVALID_REQUEST); /* nothing asked */
    CHECK_OK(gpud_request_set_compute(r, true));
    CHECK_OK(gpud_request_set_label(r, "two\nlines"));
    EXPECT_CODE(gpud_acquire(c, r, &l), GPUD_E_INVALID_REQUEST);
    CHECK_OK(gpud_request_set_label(r, NULL));
    CHECK_OK(gpud_request_set_timeout_ms(r, 400LL * 24 * 3600 * 1000));
    EXPECT_CODE(gpud_acquire(c, r, &l), GPUD_E_INVALID_REQUEST);
    CHECK_OK(gpud_request_set_timeout_ms(r, GPUD_NO_TIMEOUT));
    EXPECT_CODE(gpud_drain(c, "not a device"), GPUD_E_INVALID_REQUEST);

    /* unknown_device, never_fits */
    CHECK_OK(gpud_request_set_device_index(r, 7));
    EXPECT_CODE(gpud_acquire(c, r, &l), GPUD_E_UNKNOWN_DEVICE);
    CHECK_OK(gpud_request_set_device(r, "GPU-00000000-dead-beef-0000-000000000000"));
    EXPECT_CODE(gpud_acquire(c, r, &l), GPUD_E_UNKNOWN_DEVICE);
    EXPECT_CODE(gpud_drain(c, "7"), GPUD_E_UNKNOWN_DEVICE);
    CHECK_OK(gpud_request_set_device_any(r));
    CHECK_OK(gpud_request_set_vram(r, 17 * GIB));
    EXPECT_CODE(gpud_acquire(c, r, &l), GPUD_E_NEVER_FITS);
    CHECK_OK(gpud_request_set_vram(r, UINT64_MAX));
    gpud_code max = gpud_acquire(c, r, &l);
    CHECK(max == GPUD_E_NEVER_FITS || max == GPUD_E_INVALID_REQUEST);
    printf("u64::MAX bytes: %s\n", gpud_code_name(max));

    /* unknown_lease: a revoke of no lease, a second release. */
    EXPECT_CODE(gpud_revoke(c, 987654321), GPUD_E_UNKNOWN_LEASE);
    CHECK_OK(gpud_request_set_vram(r, 10 * GIB));
    CHECK_OK(gpud_acquire(c, r, &l));
    /* NULL out pointers on a real lease. */
    EXPECT_CODE(gpud_lease_id(l, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_device_uuid(l, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_device_name(l, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_device_index(l, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_cuda_visible_devices(l, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_vram_bytes(l, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_compute(l, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_class(l, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_yield_requested(l, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_is_lost(l, NULL), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_notice_fd(l, NULL), GPUD_E_NULL_ARGUMENT);
    CHECK_OK(gpud_lease_release(l));
    EXPECT_CODE(gpud_lease_release(l), GPUD_E_UNKNOWN_LEASE);
    EXPECT_CODE(gpud_lease_resize(l, GIB, 0), GPUD_E_UNKNOWN_LEASE);
    gpud_lease_free(l);

    /* timed_out: an acquire with a timeout while the memory is held. */
    gpud_lease *held = NULL;
    CHECK_OK(gpud_acquire(c, r, &held));
    gpud_client *other = NULL;
    CHECK_OK(gpud_connect(socket, &other));
    CHECK_OK(gpud_request_set_timeout_ms(r, 100));
    EXPECT_CODE(gpud_acquire(other, r, &l), GPUD_E_TIMED_OUT);
    CHECK_OK(gpud_request_set_timeout_ms(r, GPUD_NO_TIMEOUT));

    /* connection_lost: the session ended under the client and its lease. */
    CHECK_OK(gpud_disconnect(c));
    bool lost = false;
    for (int i = 0; i < 200 && !lost; i++) {
        CHECK_OK(gpud_lease_is_lost(held, &lost));
        sleep_ms(10);
    }
    CHECK(lost);
    EXPECT_CODE(gpud_ping(c), GPUD_E_CONNECTION_LOST);
    EXPECT_CODE(gpud_acquire(c, r, &l), GPUD_E_CONNECTION_LOST);
    EXPECT_CODE(gpud_lease_release(held), GPUD_E_CONNECTION_LOST);
    gpud_lease_free(held);
    gpud_close(c);
    /* The daemon freed the memory with the session. */
    CHECK_OK(gpud_request_set_timeout_ms(r, 5000));
    CHECK_OK(gpud_acquire(other, r, &l));
    gpud_lease_free(l);
    gpud_close(other);
    gpud_request_free(r);
}

static void limits(const char *socket) {
    gpud_client *c = NULL;
    CHECK_OK(gpud_connect(socket, &c));
    gpud_request *r = request(GIB, 0, NULL);
    gpud_lease *one = NULL, *two = NULL;
    CHECK_OK(gpud_acquire(c, r, &one));
    EXPECT_CODE(gpud_acquire(c, r, &two), GPUD_E_LIMIT_EXCEEDED);
    gpud_lease_free(one);
    gpud_request_free(r);
    gpud_close(c);
}

static void user(const char *socket) {
    gpud_client *c = NULL;
    CHECK_OK(gpud_connect(socket, &c));
    gpud_request *r = request(GIB, 1, NULL);
    gpud_lease *l = NULL;
    CHECK_OK(gpud_request_set_class(r, GPUD_CLASS_CRITICAL));
    EXPECT_CODE(gpud_acquire(c, r, &l), GPUD_E_NOT_ALLOWED);
    CHECK_OK(gpud_request_set_class(r, GPUD_CLASS_HIGH));
    CHECK_OK(gpud_acquire(c, r, &l));
    uint64_t id = 0;
    CHECK_OK(gpud_lease_id(l, &id));
    EXPECT_CODE(gpud_drain(c, "0"), GPUD_E_PERMISSION_DENIED);
    EXPECT_CODE(gpud_undrain(c, "0"), GPUD_E_PERMISSION_DENIED);
    EXPECT_CODE(gpud_revoke(c, id), GPUD_E_PERMISSION_DENIED);
    CHECK_OK(gpud_lease_release(l));
    gpud_lease_free(l);
    gpud_request_free(r);
    gpud_close(c);
}

static void refused(const char *socket) {
    /* Many times: the daemon closes a refused session at once, and a hello written after
     * that must fail as a write (EPIPE), not kill this program with SIGPIPE. */
    for (int i = 0; i < 100; i++) {
        gpud_client *c = NULL;
        EXPECT_CODE(gpud_connect(socket, &c), GPUD_E_NOT_ALLOWED);
    }
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *mode = argv[1], *socket = argv[2];
    if (strcmp(mode, "root") == 0) {
        arguments(socket);
    } else if (strcmp(mode, "limits") == 0) {
        limits(socket);
    } else if (strcmp(mode, "user") == 0) {
        user(socket);
    } else if (strcmp(mode, "refused") == 0) {
        refused(socket);
    } else {
        FAIL("unknown mode %s", mode);
    }
    printf("ok\n");
    return 0;
}
