/* A write to a socket whose peer stopped reading must not kill the program with SIGPIPE (C
 * programs do not ignore it, as Rust binaries do). The test's fake daemon welcomes this
 * client, then shuts its reading side; the ping's write then fails with EPIPE.
 * Prints "alive" if still running half a second later. Usage: sigpipe SOCKET */
#include "check.h"

#include <pthread.h>

static void *ping(void *client) {
    gpud_ping((gpud_client *)client); /* fails or waits for a reconnect: either is fine */
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    gpud_client *c = NULL;
    CHECK_OK(gpud_connect(argv[1], &c));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, ping, c) == 0);
    sleep_ms(500);
    printf("alive\n");
    fflush(stdout);
    _exit(0);
}
