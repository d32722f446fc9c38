/* A lease's life through libgpud: acquire, its facts, status, try-acquire, release, and the
 * same from several threads on one client. Usage: acquire_release SOCKET */
#include "check.h"

#include <pthread.h>

static gpud_client *shared;

static void *thread_main(void *arg) {
    (void)arg;
    for (int i = 0; i < 20; i++) {
        gpud_request *r = request(GIB, 0, NULL);
        gpud_lease *l = NULL;
        CHECK_OK(gpud_acquire(shared, r, &l));
        uint64_t vram = 0;
        CHECK_OK(gpud_lease_vram_bytes(l, &vram));
        CHECK(vram == GIB);
        CHECK_OK(gpud_lease_release(l));
        gpud_lease_free(l);
        gpud_request_free(r);
    }
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    CHECK(gpud_protocol_version() == 1);
    gpud_client *c = NULL;
    CHECK_OK(gpud_connect(argv[1], &c));
    CHECK_OK(gpud_ping(c));
    uint64_t session = 0;
    CHECK_OK(gpud_session_id(c, &session));
    CHECK(session > 0);

    gpud_request *r = request(10 * GIB, 1, NULL);
    CHECK_OK(gpud_request_set_class(r, GPUD_CLASS_HIGH));
    CHECK_OK(gpud_request_set_label(r, "c-test"));
    gpud_lease *l = NULL;
    CHECK_OK(gpud_acquire(c, r, &l));
    CHECK(l != NULL);

    uint64_t id = 0, vram = 0;
    uint32_t index = 99;
    bool compute = false, yield = true, lost = true;
    gpud_class cls = GPUD_CLASS_BACKGROUND;
    const char *uuid = NULL, *cvd = NULL, *name = NULL;
    int fd = -1;
    CHECK_OK(gpud_lease_id(l, &id));
    CHECK_OK(gpud_lease_device_index(l, &index));
    CHECK_OK(gpud_lease_device_uuid(l, &uuid));
    CHECK_OK(gpud_lease_device_name(l, &name));
    CHECK_OK(gpud_lease_cuda_visible_devices(l, &cvd));
    CHECK_OK(gpud_lease_vram_bytes(l, &vram));
    CHECK_OK(gpud_lease_compute(l, &compute));
    CHECK_OK(gpud_lease_class(l, &cls));
    CHECK_OK(gpud_lease_yield_requested(l, &yield));
    CHECK_OK(gpud_lease_is_lost(l, &lost));
    CHECK_OK(gpud_lease_notice_fd(l, &fd));
    CHECK(id > 0);
    CHECK(index == 0);
    CHECK(strncmp(uuid, "GPU-", 4) == 0);
    CHECK(strcmp(cvd, uuid) == 0);
    CHECK(strlen(name) > 0);
    CHECK(vram == 10 * GIB);
    CHECK(compute);
    CHECK(cls == GPUD_CLASS_HIGH);
    CHECK(!yield && !lost);
    CHECK(fd >= 0 && !readable_within(fd, 0));
    printf("lease %llu on %s (%s), CUDA_VISIBLE_DEVICES=%s\n", (unsigned long long)id, uuid,
           name, cvd);

    char *json = NULL;
    CHECK_OK(gpud_status_json(c, &json));
    CHECK(strstr(json, "\"label\":\"c-test\"") != NULL);
    CHECK(json_array_len(json, "leases") == 1);
    CHECK(json_array_len(json, "waiters") == 0);
    CHECK(json_array_len(json, "devices") == 1);
    gpud_string_free(json);
    char *metrics = NULL;
    CHECK_OK(gpud_metrics_text(c, &metrics));
    CHECK(strstr(metrics, "gpud_") != NULL);
    gpud_string_free(metrics);

    /* Another session cannot have 10 GiB more now: try-acquire says "none", not an error. */
    gpud_client *other = NULL;
    CHECK_OK(gpud_connect(argv[1], &other));
    gpud_lease *none = (gpud_lease *)1;
    CHECK_OK(gpud_try_acquire(other, r, 200, &none));
    CHECK(none == NULL);

    CHECK_OK(gpud_lease_release(l));
    EXPECT_CODE(gpud_lease_release(l), GPUD_E_UNKNOWN_LEASE);
    /* Its facts stay readable until it is freed. */
    CHECK_OK(gpud_lease_id(l, &id));
    gpud_lease_free(l);

    gpud_lease *got = NULL;
    CHECK_OK(gpud_try_acquire(other, r, 2000, &got));
    CHECK(got != NULL);
    gpud_lease_free(got); /* released by the free */
    int leases = -1, waiters = -1;
    for (int i = 0; i < 200; i++) {
        counts(c, &leases, &waiters);
        if (leases == 0) {
            break;
        }
        sleep_ms(10);
    }
    CHECK(leases == 0);

    /* One client, four threads, each acquiring and releasing. */
    shared = c;
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        CHECK(pthread_create(&threads[i], NULL, thread_main, NULL) == 0);
    }
    for (int i = 0; i < 4; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
    }

    gpud_request_free(r);
    gpud_close(other);
    gpud_close(c);
    printf("ok\n");
    return 0;
}
