// gpud.hpp: a header-only C++17 wrapper over gpud.h (libgpud). docs/INTEGRATION.md shows it
// in use.
//
//   gpud::Client client;                                  // $GPUD_SOCKET or the default socket
//   {
//       gpud::Lease lease = client.acquire(gpud::Request().vram(12ULL << 30).compute());
//       run_kernels(lease.cuda_visible_devices());        // the GPU phase
//   }                                                     // released here, on every path out
//   cpu_tail();
//
// Errors are exceptions: every failing call throws gpud::Error, which carries the gpud_code
// (code(), name()) and libgpud's message (what()). A lease is a resource like a lock, so its
// acquisition failing is exceptional where the program is written as if it held it, and RAII
// needs a constructor-like acquire that cannot return a half-made object. What is not an
// error is not thrown: try_acquire returns an empty std::optional when the lease is not
// granted in time. Destructors never throw (a lease's release on destruction does not wait
// for the daemon's answer; Lease::release() waits and throws).
//
// gpud::Lease is movable and not copyable: one owner releases it. gpud::Client likewise; a
// lease may outlive its client (the session ends when both are gone). Both may be used from
// several threads at once, as their C handles may.
#ifndef GPUD_HPP
#define GPUD_HPP

#include <gpud.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gpud {

/// Priority classes; gpud serves critical, then high, normal, background.
enum class Class : int32_t {
    background = GPUD_CLASS_BACKGROUND,
    normal = GPUD_CLASS_NORMAL,
    high = GPUD_CLASS_HIGH,
    critical = GPUD_CLASS_CRITICAL,
};

/// A failed call: its gpud_code and libgpud's message.
class Error : public std::runtime_error {
public:
    Error(gpud_code code, const std::string& message)
        : std::runtime_error(message), code_(code) {}
    /// The code (GPUD_E_NEVER_FITS, …).
    gpud_code code() const noexcept { return code_; }
    /// The code's snake_case name ("never_fits"), as the protocol names it.
    const char* name() const noexcept { return gpud_code_name(code_); }

private:
    gpud_code code_;
};

namespace detail {
inline void check(gpud_code code) {
    if (code != GPUD_OK) {
        throw Error(code, gpud_last_error());
    }
}
} // namespace detail

/// What to ask for: VRAM bytes and/or the compute slot, host resources (host memory,
/// page-locked memory, CPUs of a NUMA node), and where, how urgently, how long.
class Request {
public:
    Request() { detail::check(gpud_request_new(&raw_)); }
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;
    Request(Request&& other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
    Request& operator=(Request&& other) noexcept {
        std::swap(raw_, other.raw_);
        return *this;
    }
    ~Request() { gpud_request_free(raw_); }

    Request& vram(uint64_t bytes) { return set(gpud_request_set_vram(raw_, bytes)); }
    Request& compute(bool compute = true) { return set(gpud_request_set_compute(raw_, compute)); }
    Request& any_device() { return set(gpud_request_set_device_any(raw_)); }
    Request& device(uint32_t index) { return set(gpud_request_set_device_index(raw_, index)); }
    /// "any", an index ("0") or a UUID ("GPU-…").
    Request& device(const std::string& device) {
        return set(gpud_request_set_device(raw_, device.c_str()));
    }
    Request& priority(Class c) {
        return set(gpud_request_set_class(raw_, static_cast<int32_t>(c)));
    }
    /// "critical", "high", "normal" or "background".
    Request& priority(const std::string& name) {
        return set(gpud_request_set_class_name(raw_, name.c_str()));
    }
    Request& timeout(std::chrono::milliseconds t) {
        return set(gpud_request_set_timeout_ms(raw_, static_cast<int64_t>(t.count())));
    }
    Request& no_timeout() { return set(gpud_request_set_timeout_ms(raw_, GPUD_NO_TIMEOUT)); }
    Request& label(const std::string& label) {
        return set(gpud_request_set_label(raw_, label.c_str()));
    }
    /// Host memory to reserve with the lease (with no VRAM and no compute: a host-only lease).
    Request& host_memory(uint64_t bytes) {
        return set(gpud_request_set_host_memory(raw_, bytes));
    }
    /// Page-locked host memory to reserve (counted as host memory too).
    Request& pinned(uint64_t bytes) { return set(gpud_request_set_pinned(raw_, bytes)); }
    /// CPUs to take, all of one NUMA node.
    Request& cpus(uint32_t count) { return set(gpud_request_set_cpus(raw_, count)); }
    /// Where the CPUs come from: "any", "near" (the lease's device's node) or a node ("1").
    Request& numa(const std::string& numa) {
        return set(gpud_request_set_numa(raw_, numa.c_str()));
    }
    Request& numa_node(uint32_t node) { return set(gpud_request_set_numa_node(raw_, node)); }

    const gpud_request* get() const noexcept { return raw_; }

private:
    Request& set(gpud_code code) {
        detail::check(code);
        return *this;
    }
    gpud_request* raw_ = nullptr;
};

/// A granted lease, released when destroyed (or by release()). Empty after a move or a
/// release.
class Lease {
public:
    Lease() noexcept = default;
    /// Takes ownership of a lease from the C interface.
    explicit Lease(gpud_lease* raw) noexcept : raw_(raw) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease(Lease&& other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
    Lease& operator=(Lease&& other) noexcept {
        if (this != &other) {
            gpud_lease_free(raw_);
            raw_ = std::exchange(other.raw_, nullptr);
        }
        return *this;
    }
    /// Releases the lease if it is still held, without waiting for the daemon's answer.
    ~Lease() { gpud_lease_free(raw_); }

    /// Whether this object holds a lease.
    explicit operator bool() const noexcept { return raw_ != nullptr; }

    uint64_t id() const { return get_value<uint64_t>(gpud_lease_id); }
    uint32_t device_index() const { return get_value<uint32_t>(gpud_lease_device_index); }
    std::string device_uuid() const { return get_text(gpud_lease_device_uuid); }
    std::string device_name() const { return get_text(gpud_lease_device_name); }
    /// The value for CUDA_VISIBLE_DEVICES: CUDA then sees exactly the leased device.
    std::string cuda_visible_devices() const { return get_text(gpud_lease_cuda_visible_devices); }
    uint64_t vram_bytes() const { return get_value<uint64_t>(gpud_lease_vram_bytes); }
    bool compute() const { return get_value<bool>(gpud_lease_compute); }
    Class priority() const { return static_cast<Class>(get_value<gpud_class>(gpud_lease_class)); }
    /// The daemon asks for the compute slot back: release at the next safe point.
    bool yield_requested() const { return get_value<bool>(gpud_lease_yield_requested); }
    /// Revoked or lost with the connection: stop using the device.
    bool lost() const { return get_value<bool>(gpud_lease_is_lost); }
    /// An eventfd that becomes readable on a yield notice or a revocation (gpud.h).
    int notice_fd() const { return get_value<int>(gpud_lease_notice_fd); }
    /// Host memory reserved now (0 without host resources).
    uint64_t host_memory_bytes() const { return get_value<uint64_t>(gpud_lease_host_memory_bytes); }
    /// Page-locked host memory reserved.
    uint64_t pinned_bytes() const { return get_value<uint64_t>(gpud_lease_pinned_bytes); }
    /// The CPUs granted (kernel numbers, ascending): what sched_setaffinity pins to.
    std::vector<uint32_t> cpus() const {
        const uint32_t* list = nullptr;
        size_t count = 0;
        detail::check(gpud_lease_cpus(held(), &list, &count));
        return count == 0 ? std::vector<uint32_t>() : std::vector<uint32_t>(list, list + count);
    }
    /// The CPUs' NUMA node; empty when the lease holds no CPUs.
    std::optional<uint32_t> numa_node() const {
        int32_t node = get_value<int32_t>(gpud_lease_numa_node);
        if (node == GPUD_NO_NUMA_NODE) {
            return std::nullopt;
        }
        return static_cast<uint32_t>(node);
    }

    /// Changes the reserved VRAM: a shrink is immediate, a grow waits (at most `timeout`) and
    /// throws GPUD_E_TIMED_OUT, leaving the size as it was, when it passes.
    void resize(uint64_t bytes,
                std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
        int64_t ms = timeout ? static_cast<int64_t>(timeout->count()) : GPUD_NO_TIMEOUT;
        detail::check(gpud_lease_resize(held(), bytes, ms));
    }

    /// Changes the reserved host memory, as resize() does the VRAM.
    void resize_host_memory(uint64_t bytes,
                            std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
        int64_t ms = timeout ? static_cast<int64_t>(timeout->count()) : GPUD_NO_TIMEOUT;
        detail::check(gpud_lease_resize_host_memory(held(), bytes, ms));
    }

    /// Releases the lease and waits until the daemon has freed it. The object is empty
    /// afterwards, also when this throws (a revoked lease: GPUD_E_UNKNOWN_LEASE).
    void release() {
        gpud_lease* raw = std::exchange(raw_, nullptr);
        if (raw == nullptr) {
            throw Error(GPUD_E_NULL_ARGUMENT, "the gpud::Lease is empty");
        }
        gpud_code code = gpud_lease_release(raw);
        std::string message = code == GPUD_OK ? std::string() : gpud_last_error();
        gpud_lease_free(raw);
        if (code != GPUD_OK) {
            throw Error(code, message);
        }
    }

    gpud_lease* get() const noexcept { return raw_; }

private:
    gpud_lease* held() const {
        if (raw_ == nullptr) {
            throw Error(GPUD_E_NULL_ARGUMENT, "the gpud::Lease is empty");
        }
        return raw_;
    }
    template <typename T, typename F> T get_value(F f) const {
        T value{};
        detail::check(f(held(), &value));
        return value;
    }
    template <typename F> std::string get_text(F f) const {
        const char* text = nullptr;
        detail::check(f(held(), &text));
        return text;
    }
    gpud_lease* raw_ = nullptr;
};

/// A session with gpud.
class Client {
public:
    /// Connects to `$GPUD_SOCKET`, else /run/gpud/gpud.sock.
    Client() { detail::check(gpud_connect(nullptr, &raw_)); }
    explicit Client(const std::string& socket) {
        detail::check(gpud_connect(socket.c_str(), &raw_));
    }
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;
    Client(Client&& other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
    Client& operator=(Client&& other) noexcept {
        std::swap(raw_, other.raw_);
        return *this;
    }
    ~Client() { gpud_close(raw_); }

    /// Blocks until granted; throws gpud::Error on refusal (or on the request's timeout).
    Lease acquire(const Request& request) const {
        gpud_lease* lease = nullptr;
        detail::check(gpud_acquire(raw_, request.get(), &lease));
        return Lease(lease);
    }
    /// Waits at most `timeout`; empty when not granted in time.
    std::optional<Lease> try_acquire(const Request& request,
                                     std::chrono::milliseconds timeout) const {
        gpud_lease* lease = nullptr;
        detail::check(gpud_try_acquire(raw_, request.get(),
                                       static_cast<uint64_t>(timeout.count()), &lease));
        if (lease == nullptr) {
            return std::nullopt;
        }
        return std::optional<Lease>(std::in_place, lease);
    }
    /// The daemon's status as JSON (docs/PROTOCOL.md, "Status").
    std::string status_json() const {
        char* json = nullptr;
        detail::check(gpud_status_json(raw_, &json));
        std::string text(json);
        gpud_string_free(json);
        return text;
    }
    void ping() const { detail::check(gpud_ping(raw_)); }
    void drain(const std::string& device) const { detail::check(gpud_drain(raw_, device.c_str())); }
    void undrain(const std::string& device) const {
        detail::check(gpud_undrain(raw_, device.c_str()));
    }
    void revoke(uint64_t lease_id) const { detail::check(gpud_revoke(raw_, lease_id)); }
    /// Ends the session now: the daemon frees its leases, which report lost.
    void disconnect() const { detail::check(gpud_disconnect(raw_)); }

    const gpud_client* get() const noexcept { return raw_; }

private:
    gpud_client* raw_ = nullptr;
};

} // namespace gpud

#endif // GPUD_HPP
