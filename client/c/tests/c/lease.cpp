// gpud.hpp in use: RAII leases that move but do not copy, exceptions carrying the code,
// try_acquire's empty optional, and the per-GPU mutex pattern turned into a lease scope.
// Usage: lease SOCKET
#include <gpud.hpp>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

static_assert(!std::is_copy_constructible_v<gpud::Lease>, "a lease has one owner");
static_assert(!std::is_copy_assignable_v<gpud::Lease>, "a lease has one owner");
static_assert(std::is_nothrow_move_constructible_v<gpud::Lease>, "leases move");
static_assert(std::is_nothrow_move_assignable_v<gpud::Lease>, "leases move");
static_assert(!std::is_copy_constructible_v<gpud::Client>, "a client has one owner");

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            std::exit(1);                                                                  \
        }                                                                                  \
    } while (0)

constexpr uint64_t GiB = 1ULL << 30;

// The number of objects in the status's "leases" array.
static int leases(const gpud::Client& client) {
    std::string json = client.status_json();
    size_t at = json.find("\"leases\":[");
    CHECK(at != std::string::npos);
    int objects = 0, depth = 0;
    for (size_t i = at + 10; i < json.size() && depth >= 0; i++) {
        char c = json[i];
        if (c == '{' || c == '[') {
            if (depth++ == 0 && c == '{') objects++;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return objects;
}

static bool eventually(const std::function<bool()>& f) {
    for (int i = 0; i < 300; i++) {
        if (f()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

int main(int argc, char** argv) {
    CHECK(argc == 2);
    gpud::Client client(argv[1]);
    client.ping();

    // Scope: released when the lease goes out of scope, also when it was moved.
    {
        gpud::Lease lease = client.acquire(gpud::Request().vram(10 * GiB).compute().label("c++"));
        CHECK(lease && lease.vram_bytes() == 10 * GiB && lease.compute());
        CHECK(lease.cuda_visible_devices() == lease.device_uuid());
        CHECK(lease.priority() == gpud::Class::normal);
        gpud::Lease moved = std::move(lease);
        CHECK(!lease && moved);
        CHECK(leases(client) == 1);
        // Held: another attempt is not granted in time, which is no exception.
        gpud::Client other(argv[1]);
        CHECK(!other.try_acquire(gpud::Request().vram(10 * GiB), std::chrono::milliseconds(100)));
    }
    CHECK(eventually([&] { return leases(client) == 0; }));

    // Errors are gpud::Error with the code and libgpud's message.
    try {
        client.acquire(gpud::Request().vram(17 * GiB));
        CHECK(false);
    } catch (const gpud::Error& e) {
        CHECK(e.code() == GPUD_E_NEVER_FITS);
        CHECK(std::string(e.name()) == "never_fits");
        CHECK(std::string(e.what()).size() > 0);
    }
    try {
        gpud::Request().priority("urgent");
        CHECK(false);
    } catch (const gpud::Error& e) {
        CHECK(e.code() == GPUD_E_INVALID_REQUEST);
    }
    try {
        client.acquire(gpud::Request().vram(GiB).device(7));
        CHECK(false);
    } catch (const gpud::Error& e) {
        CHECK(e.code() == GPUD_E_UNKNOWN_DEVICE);
    }

    // release() waits and empties the lease; a second one throws.
    gpud::Lease lease = client.acquire(gpud::Request().vram(GiB));
    lease.resize(2 * GiB);
    CHECK(lease.vram_bytes() == 2 * GiB);
    lease.release();
    CHECK(!lease && leases(client) == 0);
    try {
        lease.release();
        CHECK(false);
    } catch (const gpud::Error& e) {
        CHECK(e.code() == GPUD_E_NULL_ARGUMENT);
    }
    // A lease may outlive its client.
    gpud::Lease kept;
    {
        gpud::Client short_lived(argv[1]);
        kept = short_lived.acquire(gpud::Request().vram(GiB));
    }
    CHECK(!kept.lost() && eventually([&] { return leases(client) == 1; }));
    kept = gpud::Lease();
    CHECK(eventually([&] { return leases(client) == 0; }));

    // The per-GPU mutex pattern: the lock_guard's scope becomes the lease's scope, so the
    // GPU is free for other processes during the CPU tail, not only for other threads.
    std::vector<int> phases;
    std::mutex record;
    std::vector<std::thread> workers;
    for (int w = 0; w < 3; w++) {
        workers.emplace_back([&, w] {
            gpud::Client mine(argv[1]);
            for (int job = 0; job < 3; job++) {
                {
                    gpud::Lease gpu = mine.acquire(gpud::Request().device(0).vram(6 * GiB).compute());
                    std::lock_guard<std::mutex> g(record);
                    phases.push_back(w);  // the kernel phase
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the CPU tail
            }
        });
    }
    for (auto& t : workers) t.join();
    CHECK(phases.size() == 9);
    CHECK(eventually([&] { return leases(client) == 0; }));
    std::printf("ok\n");
    return 0;
}
