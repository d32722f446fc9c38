/* Resize on a 16 GiB device: a grow waits for memory (and times out leaving the size), a
 * shrink frees memory at once for the waiting grow, and a lease revoked while its grow waits
 * cancels the grow. Usage: resize SOCKET */
#include "check.h"

#include <pthread.h>

static gpud_lease *growing;
static volatile int grown = 0;
static gpud_code grow_result = GPUD_E_LIBRARY;

static void *grow(void *arg) {
    uint64_t to = *(uint64_t *)arg;
    grow_result = gpud_lease_resize(growing, to, GPUD_NO_TIMEOUT);
    grown = 1;
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    gpud_client *a = NULL, *b = NULL;
    CHECK_OK(gpud_connect(argv[1], &a));
    CHECK_OK(gpud_connect(argv[1], &b));
    gpud_request *ten = request(10 * GIB, 0, NULL), *four = request(4 * GIB, 0, NULL);
    gpud_lease *big = NULL, *small = NULL;
    CHECK_OK(gpud_acquire(a, ten, &big));
    CHECK_OK(gpud_acquire(b, four, &small));

    /* 10 + 8 > 16: the grow times out and the lease keeps its 4 GiB. */
    EXPECT_CODE(gpud_lease_resize(small, 8 * GIB, 200), GPUD_E_TIMED_OUT);
    uint64_t vram = 0;
    CHECK_OK(gpud_lease_vram_bytes(small, &vram));
    CHECK(vram == 4 * GIB);

    /* Without a timeout it waits... */
    uint64_t to = 8 * GIB;
    growing = small;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, grow, &to) == 0);
    sleep_ms(300);
    CHECK(!grown);
    int leases, waiters;
    counts(a, &leases, &waiters);
    CHECK(leases == 2 && waiters == 1);
    /* ...until a shrink frees the memory, which is immediate. */
    CHECK_OK(gpud_lease_resize(big, 2 * GIB, GPUD_NO_TIMEOUT));
    CHECK_OK(gpud_lease_vram_bytes(big, &vram));
    CHECK(vram == 2 * GIB);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(grown);
    EXPECT_CODE(grow_result, GPUD_OK);
    CHECK_OK(gpud_lease_vram_bytes(small, &vram));
    CHECK(vram == 8 * GIB);

    /* A grow that waits when its lease is revoked is cancelled. */
    grown = 0;
    to = 15 * GIB;
    CHECK(pthread_create(&t, NULL, grow, &to) == 0);
    for (int i = 0; i < 200; i++) {
        counts(a, &leases, &waiters);
        if (waiters == 1) {
            break;
        }
        sleep_ms(10);
    }
    CHECK(waiters == 1 && !grown);
    uint64_t id = 0;
    CHECK_OK(gpud_lease_id(small, &id));
    CHECK_OK(gpud_revoke(a, id));
    CHECK(pthread_join(t, NULL) == 0);
    EXPECT_CODE(grow_result, GPUD_E_CANCELLED);
    bool lost = false;
    CHECK_OK(gpud_lease_is_lost(small, &lost));
    CHECK(lost);

    gpud_lease_free(small);
    gpud_lease_free(big);
    gpud_request_free(ten);
    gpud_request_free(four);
    gpud_close(a);
    gpud_close(b);
    printf("ok\n");
    return 0;
}
