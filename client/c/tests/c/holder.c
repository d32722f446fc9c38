/* Holds one lease until its standard input ends, then releases it. Prints "granted ID" when
 * granted, "released" after. Usage: holder SOCKET VRAM [compute] */
#include "check.h"

int main(int argc, char **argv) {
    CHECK(argc >= 3);
    uint64_t vram = 0;
    CHECK_OK(gpud_parse_size(argv[2], &vram));
    gpud_client *c = NULL;
    CHECK_OK(gpud_connect(argv[1], &c));
    gpud_request *r = request(vram, argc > 3 && strcmp(argv[3], "compute") == 0, NULL);
    gpud_lease *l = NULL;
    CHECK_OK(gpud_acquire(c, r, &l));
    uint64_t id = 0;
    CHECK_OK(gpud_lease_id(l, &id));
    printf("granted %llu\n", (unsigned long long)id);
    fflush(stdout);
    while (getchar() != EOF) {
    }
    CHECK_OK(gpud_lease_release(l));
    printf("released\n");
    fflush(stdout);
    gpud_lease_free(l);
    gpud_request_free(r);
    gpud_close(c);
    return 0;
}
