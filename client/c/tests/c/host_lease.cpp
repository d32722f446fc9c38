// gpud.hpp's host resources against a daemon that books 16 GiB of host memory: a synthesis
// stage under a host-only lease pinned to its CPUs, then a GPU phase with its page-locked
// staging leased with its VRAM. Usage: host_lease SOCKET
#include <gpud.hpp>

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            std::exit(1);                                                                  \
        }                                                                                  \
    } while (0)

constexpr uint64_t GiB = 1ULL << 30;

int main(int argc, char** argv) {
    CHECK(argc == 2);
    gpud::Client client(argv[1]);

    // Synthesis: host memory and a CPU, no device; the stage pins itself to the grant.
    {
        gpud::Lease synthesis = client.acquire(gpud::Request().host_memory(4 * GiB).cpus(1));
        CHECK(synthesis.host_memory_bytes() == 4 * GiB && synthesis.pinned_bytes() == 0);
        CHECK(synthesis.vram_bytes() == 0 && synthesis.device_uuid().empty());
        std::vector<uint32_t> cpus = synthesis.cpus();
        CHECK(cpus.size() == 1 && synthesis.numa_node().has_value());
        cpu_set_t set;
        CPU_ZERO(&set);
        for (uint32_t cpu : cpus) CPU_SET(cpu, &set);
        CHECK(sched_setaffinity(0, sizeof set, &set) == 0);
        synthesis.resize_host_memory(6 * GiB);
        CHECK(synthesis.host_memory_bytes() == 6 * GiB);
        try {
            synthesis.resize_host_memory(32 * GiB, std::chrono::milliseconds(100));
            CHECK(false);
        } catch (const gpud::Error& e) {
            CHECK(e.code() == GPUD_E_NEVER_FITS);
        }
        CHECK(synthesis.host_memory_bytes() == 6 * GiB);
    }

    // The GPU phase: VRAM, compute and page-locked staging, granted together.
    gpud::Lease phase = client.acquire(
        gpud::Request().vram(8 * GiB).compute().pinned(GiB).host_memory(2 * GiB).numa("any"));
    CHECK(phase.vram_bytes() == 8 * GiB && phase.compute());
    CHECK(phase.pinned_bytes() == GiB && phase.host_memory_bytes() == 2 * GiB);
    CHECK(phase.cpus().empty() && !phase.numa_node().has_value());
    phase.release();

    // Refusals are exceptions with the code and the daemon's reason.
    try {
        client.acquire(gpud::Request().cpus(1).numa("near"));
        CHECK(false);
    } catch (const gpud::Error& e) {
        CHECK(e.code() == GPUD_E_INVALID_REQUEST);
        CHECK(std::string(e.what()).find("near") != std::string::npos);
    }
    try {
        gpud::Request().numa("far");
        CHECK(false);
    } catch (const gpud::Error& e) {
        CHECK(e.code() == GPUD_E_INVALID_REQUEST);
    }
    gpud::Lease node = client.acquire(gpud::Request().cpus(1).numa_node(0));
    CHECK(node.numa_node() == 0u);
    std::printf("ok\n");
    return 0;
}
