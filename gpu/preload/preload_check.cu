// The interposer's GPU check: one allocation path per run, through the static CUDA runtime
// (which reaches the driver through cuGetProcAddress) or the driver API linked directly (VMM).
//   preload_check malloc GIB | async GIB | vmm GIB   allocate, write, free: exit 0 when the
//       allocation succeeded, 10 when it failed with out-of-memory, 1 on any other error.
//       Prints "meminfo FREE TOTAL" (cudaMemGetInfo) before and after, and "held" while it
//       holds the memory for PRELOAD_CHECK_HOLD_MS milliseconds (default 0).
//   preload_check bench N BYTES   median latency of cudaMalloc and cudaFree of BYTES over N
//       rounds (after 100 warm-up rounds): "bench malloc_us=X free_us=Y".
// Build: nvcc -O2 -arch=sm_90 -o preload_check preload_check.cu -L<stubs> -lcuda
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unistd.h>
#include <vector>

static int oom_or_fail(const char *what, int code, bool oom) {
    printf("%s failed: %d (%s)\n", what, code, oom ? "out of memory" : "other error");
    return oom ? 10 : 1;
}

static void meminfo() {
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    if (e == cudaSuccess) printf("meminfo %zu %zu\n", f, t);
    else printf("meminfo error %d\n", (int)e);
    fflush(stdout);
}

static void hold() {
    printf("held\n");
    fflush(stdout);
    const char *ms = getenv("PRELOAD_CHECK_HOLD_MS");
    if (ms) usleep((useconds_t)atoi(ms) * 1000);
}

static double now_us() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: preload_check malloc|async|vmm GIB | bench N BYTES\n");
        return 2;
    }
    const char *mode = argv[1];
    cudaError_t e = cudaFree(0);  // the runtime's context
    if (e != cudaSuccess) return oom_or_fail("cudaFree(0)", e, false);
    meminfo();
    if (!strcmp(mode, "bench")) {
        int n = atoi(argv[2]);
        size_t bytes = strtoull(argv[3], nullptr, 10);
        std::vector<double> a, f;
        for (int i = 0; i < n + 100; i++) {
            void *p = nullptr;
            double t0 = now_us();
            e = cudaMalloc(&p, bytes);
            double t1 = now_us();
            if (e != cudaSuccess) return oom_or_fail("cudaMalloc", e, e == cudaErrorMemoryAllocation);
            e = cudaFree(p);
            double t2 = now_us();
            if (e != cudaSuccess) return oom_or_fail("cudaFree", e, false);
            if (i >= 100) {
                a.push_back(t1 - t0);
                f.push_back(t2 - t1);
            }
        }
        printf("bench malloc_us=%.3f free_us=%.3f\n", median(a), median(f));
        return 0;
    }
    size_t bytes = (size_t)(atof(argv[2]) * (double)(1ULL << 30));
    if (!strcmp(mode, "malloc")) {
        void *p = nullptr;
        e = cudaMalloc(&p, bytes);
        if (e != cudaSuccess) return oom_or_fail("cudaMalloc", e, e == cudaErrorMemoryAllocation);
        if ((e = cudaMemset(p, 1, bytes)) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess)
            return oom_or_fail("cudaMemset", e, false);
        meminfo();
        hold();
        cudaFree(p);
    } else if (!strcmp(mode, "async")) {
        void *p = nullptr;
        e = cudaMallocAsync(&p, bytes, 0);
        if (e != cudaSuccess) return oom_or_fail("cudaMallocAsync", e, e == cudaErrorMemoryAllocation);
        if ((e = cudaMemsetAsync(p, 1, bytes, 0)) != cudaSuccess || (e = cudaStreamSynchronize(0)) != cudaSuccess)
            return oom_or_fail("cudaMemsetAsync", e, e == cudaErrorMemoryAllocation);
        meminfo();
        hold();
        cudaFreeAsync(p, 0);
        cudaStreamSynchronize(0);
    } else if (!strcmp(mode, "vmm")) {
        CUdevice dev;
        CUresult r = cuCtxGetDevice(&dev);
        if (r != CUDA_SUCCESS) return oom_or_fail("cuCtxGetDevice", r, false);
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        size_t gran = 0;
        r = cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (r != CUDA_SUCCESS) return oom_or_fail("cuMemGetAllocationGranularity", r, false);
        bytes = (bytes + gran - 1) / gran * gran;
        CUmemGenericAllocationHandle h;
        r = cuMemCreate(&h, bytes, &prop, 0);
        if (r != CUDA_SUCCESS) return oom_or_fail("cuMemCreate", r, r == CUDA_ERROR_OUT_OF_MEMORY);
        CUdeviceptr va;
        if ((r = cuMemAddressReserve(&va, bytes, 0, 0, 0)) != CUDA_SUCCESS) return oom_or_fail("cuMemAddressReserve", r, false);
        if ((r = cuMemMap(va, bytes, 0, h, 0)) != CUDA_SUCCESS) return oom_or_fail("cuMemMap", r, false);
        CUmemAccessDesc access;
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if ((r = cuMemSetAccess(va, bytes, &access, 1)) != CUDA_SUCCESS) return oom_or_fail("cuMemSetAccess", r, false);
        if ((e = cudaMemset((void *)va, 1, bytes)) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess)
            return oom_or_fail("cudaMemset", e, false);
        meminfo();
        hold();
        cuMemUnmap(va, bytes);
        cuMemAddressFree(va, bytes);
        cuMemRelease(h);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("allocated %zu bytes (%s)\n", bytes, mode);
    return 0;
}
