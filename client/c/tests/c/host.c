/* Host resources against a daemon that books 16 GiB of host memory (no headroom; page-locked:
 * half of it) and the machine's CPUs: a host-only lease names its CPUs, a lease combines a
 * device with host and page-locked memory, refusals say what was wrong, host memory grows
 * (waiting, timing out) and shrinks. Usage: host SOCKET */
#include "check.h"

#include <pthread.h>
#include <sched.h>

static gpud_lease *growing;
static volatile int grown = 0;
static gpud_code grow_result = GPUD_E_LIBRARY;

static void *grow(void *arg) {
    (void)arg;
    grow_result = gpud_lease_resize_host_memory(growing, 12 * GIB, GPUD_NO_TIMEOUT);
    grown = 1;
    return NULL;
}

static uint64_t host_memory(const gpud_lease *lease) {
    uint64_t bytes = 0;
    CHECK_OK(gpud_lease_host_memory_bytes(lease, &bytes));
    return bytes;
}

/* A request for host resources only. */
static gpud_request *host_request(uint64_t mem, uint64_t pinned, uint32_t cpus) {
    gpud_request *r = NULL;
    CHECK_OK(gpud_request_new(&r));
    CHECK_OK(gpud_request_set_host_memory(r, mem));
    CHECK_OK(gpud_request_set_pinned(r, pinned));
    CHECK_OK(gpud_request_set_cpus(r, cpus));
    return r;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    gpud_client *a = NULL, *b = NULL;
    CHECK_OK(gpud_connect(argv[1], &a));
    CHECK_OK(gpud_connect(argv[1], &b));

    /* A host-only lease of 4 GiB and one CPU: the CPU is named, on a NUMA node, and is one this
     * process may run on. */
    gpud_request *synthesis = host_request(4 * GIB, 0, 1);
    CHECK_OK(gpud_request_set_label(synthesis, "synthesis"));
    gpud_lease *lease = NULL;
    CHECK_OK(gpud_acquire(a, synthesis, &lease));
    CHECK(host_memory(lease) == 4 * GIB);
    uint64_t pinned = 1, vram = 1;
    CHECK_OK(gpud_lease_pinned_bytes(lease, &pinned));
    CHECK_OK(gpud_lease_vram_bytes(lease, &vram));
    CHECK(pinned == 0 && vram == 0);
    const uint32_t *cpus = NULL;
    size_t count = 0;
    CHECK_OK(gpud_lease_cpus(lease, &cpus, &count));
    CHECK(count == 1 && cpus != NULL);
    cpu_set_t allowed;
    CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
    CHECK(CPU_ISSET(cpus[0], &allowed));
    int32_t node = GPUD_NO_NUMA_NODE;
    CHECK_OK(gpud_lease_numa_node(lease, &node));
    CHECK(node >= 0);
    const char *uuid = NULL, *visible = NULL;
    CHECK_OK(gpud_lease_device_uuid(lease, &uuid));
    CHECK_OK(gpud_lease_cuda_visible_devices(lease, &visible));
    CHECK(strcmp(uuid, "") == 0 && strcmp(visible, "") == 0);
    /* Status shows its two parts and the host's books. */
    char *json = NULL;
    CHECK_OK(gpud_status_json(a, &json));
    CHECK(json_array_len(json, "leases") == 2);
    CHECK(strstr(json, "\"resource\":\"host_memory\"") != NULL);
    CHECK(strstr(json, "\"resource\":\"cpus\"") != NULL);
    CHECK(strstr(json, "\"reserved_bytes\":4294967296") != NULL);
    gpud_string_free(json);

    /* Host memory grows and shrinks; the rest of the grant stays. */
    CHECK_OK(gpud_lease_resize_host_memory(lease, 8 * GIB, GPUD_NO_TIMEOUT));
    CHECK(host_memory(lease) == 8 * GIB);
    CHECK_OK(gpud_lease_cpus(lease, &cpus, &count));
    CHECK(count == 1);
    gpud_request *six = host_request(6 * GIB, 0, 0);
    gpud_lease *other = NULL;
    CHECK_OK(gpud_acquire(b, six, &other));
    /* 12 + 6 > 16: the grow times out and the lease keeps its size. */
    EXPECT_CODE(gpud_lease_resize_host_memory(lease, 12 * GIB, 200), GPUD_E_TIMED_OUT);
    CHECK(host_memory(lease) == 8 * GIB);
    /* Without a timeout it waits, until a shrink (immediate) makes room. */
    growing = lease;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, grow, NULL) == 0);
    int leases = 0, waiters = 0;
    for (int i = 0; i < 300 && waiters != 1; i++) {
        sleep_ms(10);
        counts(a, &leases, &waiters);
    }
    CHECK(waiters == 1 && !grown);
    CHECK_OK(gpud_lease_resize_host_memory(other, 2 * GIB, GPUD_NO_TIMEOUT));
    CHECK(host_memory(other) == 2 * GIB);
    CHECK(pthread_join(t, NULL) == 0);
    EXPECT_CODE(grow_result, GPUD_OK);
    CHECK(host_memory(lease) == 12 * GIB);
    /* Never to 0: that is a release. */
    EXPECT_CODE(gpud_lease_resize_host_memory(lease, 0, GPUD_NO_TIMEOUT), GPUD_E_INVALID_REQUEST);
    CHECK_OK(gpud_lease_release(lease));
    CHECK_OK(gpud_lease_release(other));
    gpud_lease_free(lease);
    gpud_lease_free(other);

    /* A lease of a device with host and page-locked memory, granted together. */
    gpud_request *phase = request(2 * GIB, 1, NULL);
    CHECK_OK(gpud_request_set_host_memory(phase, 3 * GIB));
    CHECK_OK(gpud_request_set_pinned(phase, GIB));
    CHECK_OK(gpud_acquire(a, phase, &lease));
    CHECK_OK(gpud_lease_vram_bytes(lease, &vram));
    CHECK_OK(gpud_lease_pinned_bytes(lease, &pinned));
    CHECK(vram == 2 * GIB && host_memory(lease) == 3 * GIB && pinned == GIB);
    CHECK_OK(gpud_lease_device_uuid(lease, &uuid));
    CHECK(strncmp(uuid, "GPU-", 4) == 0);
    CHECK_OK(gpud_lease_cpus(lease, &cpus, &count));
    CHECK(count == 0 && cpus == NULL);
    CHECK_OK(gpud_lease_numa_node(lease, &node));
    CHECK(node == GPUD_NO_NUMA_NODE);
    counts(a, &leases, &waiters);
    CHECK(leases == 3);
    /* Its device memory resizes as before; host memory is resized on its own. */
    CHECK_OK(gpud_lease_resize(lease, 4 * GIB, GPUD_NO_TIMEOUT));
    CHECK_OK(gpud_lease_resize_host_memory(lease, 2 * GIB, GPUD_NO_TIMEOUT));
    CHECK_OK(gpud_lease_vram_bytes(lease, &vram));
    CHECK(vram == 4 * GIB && host_memory(lease) == 2 * GIB);
    /* Not below its page-locked memory, which is host memory too. */
    EXPECT_CODE(gpud_lease_resize_host_memory(lease, GIB / 2, GPUD_NO_TIMEOUT),
                GPUD_E_INVALID_REQUEST);
    CHECK(strstr(gpud_last_error(), "page-locked") != NULL);
    CHECK_OK(gpud_lease_release(lease));
    gpud_lease_free(lease);
    counts(a, &leases, &waiters);
    CHECK(leases == 0);

    /* Refusals: CPUs near a device with no device, more host memory than there is, host
     * memory to resize on a lease that has none, a placement that is no placement. */
    gpud_request *near = host_request(0, 0, 1);
    CHECK_OK(gpud_request_set_numa(near, "near"));
    EXPECT_CODE(gpud_acquire(a, near, &lease), GPUD_E_INVALID_REQUEST);
    CHECK(strstr(gpud_last_error(), "near") != NULL);
    gpud_request *huge = host_request(32 * GIB, 0, 0);
    EXPECT_CODE(gpud_acquire(a, huge, &lease), GPUD_E_NEVER_FITS);
    gpud_request *device_only = request(GIB, 0, NULL);
    CHECK_OK(gpud_acquire(a, device_only, &lease));
    EXPECT_CODE(gpud_lease_resize_host_memory(lease, GIB, GPUD_NO_TIMEOUT), GPUD_E_INVALID_REQUEST);
    CHECK(host_memory(lease) == 0);
    EXPECT_CODE(gpud_request_set_numa(near, "far"), GPUD_E_INVALID_REQUEST);
    CHECK(strstr(gpud_last_error(), "NUMA placement") != NULL);
    EXPECT_CODE(gpud_lease_cpus(lease, NULL, &count), GPUD_E_NULL_ARGUMENT);
    EXPECT_CODE(gpud_lease_numa_node(NULL, &node), GPUD_E_NULL_ARGUMENT);
    gpud_lease_free(lease);

    gpud_request_free(synthesis);
    gpud_request_free(six);
    gpud_request_free(phase);
    gpud_request_free(near);
    gpud_request_free(huge);
    gpud_request_free(device_only);
    gpud_close(a);
    gpud_close(b);
    printf("ok\n");
    return 0;
}
