/* A fake CUDA driver (libcuda.so.1) for testing libgpud_preload.so without a GPU: the
 * allocation entry points over a byte counter per device against a fixed total, the entry
 * points a runtime needs around them, and cuGetProcAddress(_v2) handing them out by base
 * name as the real driver does. Devices are named like gpud's simulated devices
 * (GPU-5e1a0000-0000-4000-8000-<index as 12 hex digits>), so that a gpud started with
 * --simulate NxSIZE leases the device this driver reports.
 *
 * FAKE_CUDA_TOTAL: bytes per device (default 16 GiB); FAKE_CUDA_DEVICES: how many (1..8).
 * Build: cc -shared -fPIC -Wl,-Bsymbolic -o libcuda.so.1 libcuda.c -lpthread (-Bsymbolic: its own
 * references bind inside it, as the real driver's do, so that cuGetProcAddress hands out its own
 * functions and not the interposer's same-named exports). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_DEVICE = 101, INVALID_CONTEXT = 201,
       NOT_FOUND = 500 };
enum { MAX_DEVICES = 8, MAX_BLOCKS = 65536 };
enum kind { FREE_SLOT = 0, BLOCK, ASYNC, HANDLE };

struct block {
    unsigned long long key; /* device pointer or VMM handle */
    unsigned long long size;
    int dev;
    enum kind kind;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int ndev = -1;
static unsigned long long total_bytes;
static unsigned long long used[MAX_DEVICES];
static unsigned long long pool_reserved[MAX_DEVICES];
static struct block blocks[MAX_BLOCKS];
static unsigned long long next_addr = 0x7f0000000000ULL;
static unsigned long long next_handle = 1;
static __thread int current = -1;

/* FAKE_CUDA_BUSY_ALLOCS=N: the first N allocations fail with out-of-memory, as on a device
   where a process that just ended still holds the memory its lease gave back. */
static int busy_allocs;

static void setup(void) {
    if (ndev >= 0) return;
    const char *busy = getenv("FAKE_CUDA_BUSY_ALLOCS");
    busy_allocs = busy ? atoi(busy) : 0;
    const char *t = getenv("FAKE_CUDA_TOTAL");
    const char *n = getenv("FAKE_CUDA_DEVICES");
    total_bytes = t ? strtoull(t, NULL, 10) : (16ULL << 30);
    ndev = n ? atoi(n) : 1;
    if (ndev < 1) ndev = 1;
    if (ndev > MAX_DEVICES) ndev = MAX_DEVICES;
}

static CUresult take(int dev, unsigned long long size, enum kind kind, unsigned long long *key) {
    pthread_mutex_lock(&mu);
    setup();
    if (dev < 0 || dev >= ndev) { pthread_mutex_unlock(&mu); return INVALID_DEVICE; }
    if (used[dev] + size > total_bytes) { pthread_mutex_unlock(&mu); return OUT_OF_MEMORY; }
    if (busy_allocs > 0) { busy_allocs--; pthread_mutex_unlock(&mu); return OUT_OF_MEMORY; }
    for (int i = 0; i < MAX_BLOCKS; i++) {
        if (blocks[i].kind == FREE_SLOT) {
            if (kind == HANDLE) {
                *key = next_handle++;
            } else {
                *key = next_addr;
                next_addr += (size + 0xfffff) & ~0xfffffULL; /* 1 MiB apart */
                if (size == 0) next_addr += 0x100000;
            }
            blocks[i] = (struct block){*key, size, dev, kind};
            used[dev] += size;
            if (kind == ASYNC) pool_reserved[dev] += size;
            pthread_mutex_unlock(&mu);
            return OK;
        }
    }
    pthread_mutex_unlock(&mu);
    return OUT_OF_MEMORY;
}

static CUresult give(unsigned long long key, enum kind kind) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_BLOCKS; i++) {
        if (blocks[i].kind == kind && blocks[i].key == key) {
            used[blocks[i].dev] -= blocks[i].size;
            /* The fake's pools keep nothing: a freed block leaves the reservation at once. */
            if (kind == ASYNC) pool_reserved[blocks[i].dev] -= blocks[i].size;
            blocks[i].kind = FREE_SLOT;
            pthread_mutex_unlock(&mu);
            return OK;
        }
    }
    pthread_mutex_unlock(&mu);
    return INVALID_VALUE;
}

CUresult cuInit(unsigned int flags) { (void)flags; pthread_mutex_lock(&mu); setup(); pthread_mutex_unlock(&mu); return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *n) { setup(); *n = ndev; return OK; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    setup();
    if (ordinal < 0 || ordinal >= ndev) return INVALID_DEVICE;
    *d = ordinal;
    return OK;
}
CUresult cuDeviceGetUuid_v2(unsigned char *bytes, CUdevice dev) {
    setup();
    if (dev < 0 || dev >= ndev) return INVALID_DEVICE;
    static const unsigned char prefix[10] = {0x5e, 0x1a, 0, 0, 0, 0, 0x40, 0, 0x80, 0};
    memcpy(bytes, prefix, 10);
    memset(bytes + 10, 0, 6);
    bytes[15] = (unsigned char)dev;
    return OK;
}
CUresult cuDeviceGetUuid(unsigned char *bytes, CUdevice dev) { return cuDeviceGetUuid_v2(bytes, dev); }
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    setup();
    if (dev < 0 || dev >= ndev) return INVALID_DEVICE;
    *bytes = total_bytes;
    return OK;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice dev) {
    setup();
    if (dev < 0 || dev >= ndev) return INVALID_DEVICE;
    *ctx = (void *)(intptr_t)(dev + 1);
    return OK;
}
CUresult cuCtxCreate_v2(void **ctx, unsigned int flags, CUdevice dev) {
    (void)flags;
    CUresult r = cuDevicePrimaryCtxRetain(ctx, dev);
    if (r == OK) current = dev;
    return r;
}
CUresult cuCtxSetCurrent(void *ctx) { current = (int)(intptr_t)ctx - 1; return OK; }
CUresult cuCtxGetDevice(CUdevice *dev) {
    if (current < 0) return INVALID_CONTEXT;
    *dev = current;
    return OK;
}
CUresult cuCtxGetCurrent(void **ctx) { *ctx = current < 0 ? NULL : (void *)(intptr_t)(current + 1); return OK; }
/* Fails on a thread with no current context, as the real one does: whoever synchronises on
 * the program's behalf must make its context current first. */
CUresult cuCtxSynchronize(void) { return current < 0 ? INVALID_CONTEXT : OK; }
static unsigned long long launches;
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared;
    (void)stream; (void)params; (void)extra;
    if (current < 0) return INVALID_CONTEXT;
    __atomic_add_fetch(&launches, 1, __ATOMIC_SEQ_CST);
    return OK;
}
CUresult cuMemPoolTrimTo(void *pool, size_t keep) { (void)pool; (void)keep; return OK; }
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return dev >= 0 && dev < ndev ? OK : INVALID_DEVICE; }

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
    if (current < 0) return INVALID_CONTEXT;
    return take(current, size, BLOCK, p);
}
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height,
                            unsigned int element) {
    (void)element;
    if (current < 0) return INVALID_CONTEXT;
    size_t row = (width + 511) & ~(size_t)511;
    CUresult r = take(current, (unsigned long long)row * height, BLOCK, p);
    if (r == OK) *pitch = row;
    return r;
}
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned int flags) {
    (void)flags;
    if (current < 0) return INVALID_CONTEXT;
    return take(current, size, BLOCK, p);
}
CUresult cuMemFree_v2(CUdeviceptr p) { return give(p, BLOCK); }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, void *stream) {
    (void)stream;
    if (current < 0) return INVALID_CONTEXT;
    return take(current, size, ASYNC, p);
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, void *pool, void *stream) {
    (void)stream;
    int dev = (int)((intptr_t)pool - 0x1000);
    return take(dev, size, ASYNC, p);
}
CUresult cuMemFreeAsync(CUdeviceptr p, void *stream) { (void)stream; return give(p, ASYNC); }
CUresult cuDeviceGetMemPool(void **pool, CUdevice dev) {
    setup();
    if (dev < 0 || dev >= ndev) return INVALID_DEVICE;
    *pool = (void *)(intptr_t)(0x1000 + dev);
    return OK;
}
CUresult cuMemPoolGetAttribute(void *pool, int attr, void *value) {
    int dev = (int)((intptr_t)pool - 0x1000);
    if (dev < 0 || dev >= MAX_DEVICES) return INVALID_VALUE;
    /* RESERVED_MEM_CURRENT (5) and USED_MEM_CURRENT (7): equal, the fake keeps nothing. */
    if (attr != 5 && attr != 7) return INVALID_VALUE;
    pthread_mutex_lock(&mu);
    *(unsigned long long *)value = pool_reserved[dev];
    pthread_mutex_unlock(&mu);
    return OK;
}
struct prop_head { int type, handle_types, location_type, location_id; };
CUresult cuMemCreate(unsigned long long *handle, size_t size, const void *prop, unsigned long long flags) {
    (void)flags;
    const struct prop_head *h = prop;
    if (!h || h->location_type != 1) return INVALID_VALUE;
    return take(h->location_id, size, HANDLE, handle);
}
CUresult cuMemRelease(unsigned long long handle) { return give(handle, HANDLE); }
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    if (current < 0) return INVALID_CONTEXT;
    pthread_mutex_lock(&mu);
    *free_bytes = total_bytes - used[current];
    *total = total_bytes;
    pthread_mutex_unlock(&mu);
    return OK;
}
/* Not a CUDA entry point: what the fake device really has allocated (for the tests). */
unsigned long long fakeCudaUsed(int dev) {
    pthread_mutex_lock(&mu);
    unsigned long long u = (dev >= 0 && dev < MAX_DEVICES) ? used[dev] : 0;
    pthread_mutex_unlock(&mu);
    return u;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                             int *status);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags);

/* What the real driver does: base names, resolved to the variant for the asked version. */
static const struct { const char *name; void *fn; } table[] = {
    {"cuInit", (void *)cuInit},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount},
    {"cuDeviceGet", (void *)cuDeviceGet},
    {"cuDeviceGetUuid", (void *)cuDeviceGetUuid_v2},
    {"cuDeviceTotalMem", (void *)cuDeviceTotalMem_v2},
    {"cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain},
    {"cuCtxCreate", (void *)cuCtxCreate_v2},
    {"cuCtxSetCurrent", (void *)cuCtxSetCurrent},
    {"cuCtxGetDevice", (void *)cuCtxGetDevice},
    {"cuCtxSynchronize", (void *)cuCtxSynchronize},
    {"cuCtxGetCurrent", (void *)cuCtxGetCurrent},
    {"cuLaunchKernel", (void *)cuLaunchKernel},
    {"cuMemPoolTrimTo", (void *)cuMemPoolTrimTo},
    {"cuDevicePrimaryCtxReset", (void *)cuDevicePrimaryCtxReset_v2},
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemAllocPitch", (void *)cuMemAllocPitch_v2},
    {"cuMemAllocManaged", (void *)cuMemAllocManaged},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemAllocAsync", (void *)cuMemAllocAsync},
    {"cuMemAllocFromPoolAsync", (void *)cuMemAllocFromPoolAsync},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync},
    {"cuDeviceGetMemPool", (void *)cuDeviceGetMemPool},
    {"cuMemPoolGetAttribute", (void *)cuMemPoolGetAttribute},
    {"cuMemCreate", (void *)cuMemCreate},
    {"cuMemRelease", (void *)cuMemRelease},
    {"cuMemGetInfo", (void *)cuMemGetInfo_v2},
    {"cuGetProcAddress", (void *)cuGetProcAddress_v2},
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                             int *status) {
    (void)version;
    (void)flags;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) == 0) {
            *pfn = table[i].fn;
            if (status) *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
            return OK;
        }
    }
    *pfn = NULL;
    if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return NOT_FOUND;
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
