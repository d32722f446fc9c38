/* A compute holder hears a yield notice (flag and descriptor) and yields; then a revocation
 * (flag and descriptor). The test that runs it makes the critical request and the revocation.
 * Prints "granted ID", "yield", "granted ID", "lost". Usage: notices SOCKET */
#include "check.h"

/* Acquires a compute lease; `check` runs on it before "granted" is printed, since the test
 * may make the critical request or the revocation as soon as it reads that line. */
static gpud_lease *hold(gpud_client *c, int *fd, void (*check)(gpud_lease *)) {
    gpud_request *r = request(GIB, 1, "0");
    gpud_lease *l = NULL;
    CHECK_OK(gpud_acquire(c, r, &l));
    gpud_request_free(r);
    uint64_t id = 0;
    CHECK_OK(gpud_lease_id(l, &id));
    if (fd)
        CHECK_OK(gpud_lease_notice_fd(l, fd));
    if (check)
        check(l);
    printf("granted %llu\n", (unsigned long long)id);
    fflush(stdout);
    return l;
}

/* A fresh lease: no notice yet, and its descriptor (when asked for) not readable. */
static int first_fd = -1;
static void fresh(gpud_lease *l) {
    bool yield = true, lost = true;
    CHECK_OK(gpud_lease_yield_requested(l, &yield));
    CHECK_OK(gpud_lease_is_lost(l, &lost));
    CHECK(!yield && !lost);
    CHECK(!readable_within(first_fd, 0));
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    gpud_client *c = NULL;
    CHECK_OK(gpud_connect(argv[1], &c));

    gpud_lease *l = hold(c, &first_fd, fresh);
    int fd = first_fd;
    bool yield = false, lost = false;
    /* "Kernels" until the daemon asks for the slot: the descriptor wakes us. */
    CHECK(readable_within(fd, 10000));
    CHECK_OK(gpud_lease_yield_requested(l, &yield));
    CHECK_OK(gpud_lease_is_lost(l, &lost));
    CHECK(yield && !lost);
    /* It stays readable until read; reading clears it. */
    CHECK(readable_within(fd, 0));
    uint64_t counter = 0;
    CHECK(read(fd, &counter, sizeof counter) == sizeof counter && counter >= 1);
    CHECK(!readable_within(fd, 0));
    printf("yield\n");
    fflush(stdout);
    CHECK_OK(gpud_lease_release(l));
    gpud_lease_free(l);

    /* The descriptor is made when first asked for: asked only after the revocation came, it
     * is readable at once. */
    l = hold(c, NULL, NULL);
    for (int i = 0; i < 1000 && !lost; i++) {
        CHECK_OK(gpud_lease_is_lost(l, &lost));
        if (!lost)
            usleep(10000);
    }
    CHECK(lost);
    CHECK_OK(gpud_lease_notice_fd(l, &fd));
    CHECK(readable_within(fd, 0));
    printf("lost\n");
    fflush(stdout);
    EXPECT_CODE(gpud_lease_release(l), GPUD_E_UNKNOWN_LEASE);
    gpud_lease_free(l);
    gpud_close(c);
    return 0;
}
