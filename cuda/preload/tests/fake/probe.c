/* Drives a CUDA driver (the fake libcuda.so.1, or a real one) the three ways programs reach
 * it, one command per line on stdin, one answer per line on stdout ("ok ..." or "err CODE"):
 *   probe dlsym   dlopen("libcuda.so.1") and dlsym of each entry point's exact name
 *   probe proc    dlsym of cuGetProcAddress_v2 only, everything else through it by base name
 *                 at CUDA 12.0 (as a statically linked runtime does)
 *   probe-linked  linked against libcuda (built with -DLINKED): the symbols themselves
 * Commands: init | alloc BYTES | pitch WIDTH HEIGHT | managed BYTES | free I | async BYTES |
 *   pool BYTES | freeasync I | create BYTES | release I | info | total | used | launch | sync |
 *   quit
 * (I: the index an allocation answered with). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#ifdef LINKED
CUresult cuInit(unsigned int);
CUresult cuDeviceGet(int *, int);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned int);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, void *);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, void *, void *);
CUresult cuMemFreeAsync(CUdeviceptr, void *);
CUresult cuDeviceGetMemPool(void **, int);
CUresult cuMemCreate(unsigned long long *, size_t, const void *, unsigned long long);
CUresult cuMemRelease(unsigned long long);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuDeviceTotalMem_v2(size_t *, int);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);
CUresult cuCtxSynchronize(void);
#endif

static CUresult (*p_init)(unsigned int);
static CUresult (*p_device_get)(int *, int);
static CUresult (*p_retain)(void **, int);
static CUresult (*p_set_current)(void *);
static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
static CUresult (*p_managed)(CUdeviceptr *, size_t, unsigned int);
static CUresult (*p_free)(CUdeviceptr);
static CUresult (*p_async)(CUdeviceptr *, size_t, void *);
static CUresult (*p_from_pool)(CUdeviceptr *, size_t, void *, void *);
static CUresult (*p_free_async)(CUdeviceptr, void *);
static CUresult (*p_get_pool)(void **, int);
static CUresult (*p_create)(unsigned long long *, size_t, const void *, unsigned long long);
static CUresult (*p_release)(unsigned long long);
static CUresult (*p_info)(size_t *, size_t *);
static CUresult (*p_total)(size_t *, int);
static unsigned long long (*p_used)(int);
static CUresult (*p_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, void *, void **, void **);
static CUresult (*p_sync)(void);

__attribute__((unused)) static void *need(void *p, const char *name) {
    if (!p) {
        fprintf(stderr, "probe: no %s\n", name);
        exit(3);
    }
    return p;
}

static void *lib;
#ifndef LINKED
static CUresult (*get_proc)(const char *, void **, int, unsigned long long, int *);

static void *by_dlsym(const char *name) { return need(dlsym(lib, name), name); }
static void *by_proc(const char *base) {
    void *fn = NULL;
    int status = -1;
    CUresult r = get_proc(base, &fn, 12000, 0, &status);
    if (r != 0 || status != 0) {
        fprintf(stderr, "probe: cuGetProcAddress(%s) = %d, status %d\n", base, r, status);
        exit(3);
    }
    return need(fn, base);
}

#define BIND(var, exact, base) var = (proc ? by_proc(base) : by_dlsym(exact))
#endif

static void resolve(const char *mode) {
#ifdef LINKED
    (void)mode;
    p_init = cuInit; p_device_get = cuDeviceGet; p_retain = cuDevicePrimaryCtxRetain;
    p_set_current = cuCtxSetCurrent; p_alloc = cuMemAlloc_v2; p_pitch = cuMemAllocPitch_v2;
    p_managed = cuMemAllocManaged; p_free = cuMemFree_v2; p_async = cuMemAllocAsync;
    p_from_pool = cuMemAllocFromPoolAsync; p_free_async = cuMemFreeAsync;
    p_get_pool = cuDeviceGetMemPool; p_create = cuMemCreate; p_release = cuMemRelease;
    p_info = cuMemGetInfo_v2; p_total = cuDeviceTotalMem_v2;
    p_launch = cuLaunchKernel; p_sync = cuCtxSynchronize;
    lib = dlopen("libcuda.so.1", RTLD_NOW);
#else
    int proc = strcmp(mode, "proc") == 0;
    if (!proc && strcmp(mode, "dlsym") != 0) {
        fprintf(stderr, "usage: probe dlsym|proc\n");
        exit(2);
    }
    lib = need(dlopen("libcuda.so.1", RTLD_NOW), "libcuda.so.1");
    if (proc) get_proc = by_dlsym("cuGetProcAddress_v2");
    BIND(p_init, "cuInit", "cuInit");
    BIND(p_device_get, "cuDeviceGet", "cuDeviceGet");
    BIND(p_retain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
    BIND(p_set_current, "cuCtxSetCurrent", "cuCtxSetCurrent");
    BIND(p_alloc, "cuMemAlloc_v2", "cuMemAlloc");
    BIND(p_pitch, "cuMemAllocPitch_v2", "cuMemAllocPitch");
    BIND(p_managed, "cuMemAllocManaged", "cuMemAllocManaged");
    BIND(p_free, "cuMemFree_v2", "cuMemFree");
    BIND(p_async, "cuMemAllocAsync", "cuMemAllocAsync");
    BIND(p_from_pool, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync");
    BIND(p_free_async, "cuMemFreeAsync", "cuMemFreeAsync");
    BIND(p_get_pool, "cuDeviceGetMemPool", "cuDeviceGetMemPool");
    BIND(p_create, "cuMemCreate", "cuMemCreate");
    BIND(p_release, "cuMemRelease", "cuMemRelease");
    BIND(p_info, "cuMemGetInfo_v2", "cuMemGetInfo");
    BIND(p_total, "cuDeviceTotalMem_v2", "cuDeviceTotalMem");
    BIND(p_launch, "cuLaunchKernel", "cuLaunchKernel");
    BIND(p_sync, "cuCtxSynchronize", "cuCtxSynchronize");
#endif
    p_used = lib ? dlsym(lib, "fakeCudaUsed") : NULL;
}

struct prop { int type, handle_types, location_type, location_id; void *meta; unsigned char flags[8]; };

int main(int argc, char **argv) {
    resolve(argc > 1 ? argv[1] : "linked");
    static unsigned long long keys[65536];
    int n = 0;
    char line[256];
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "";
        unsigned long long a = 0, b = 0;
        sscanf(line, "%31s %llu %llu", cmd, &a, &b);
        CUresult r = 0;
        if (!strcmp(cmd, "quit")) break;
        if (!strcmp(cmd, "init")) {
            int dev = 0;
            void *ctx = NULL;
            r = p_init(0);
            if (!r) r = p_device_get(&dev, (int)a);
            if (!r) r = p_retain(&ctx, dev);
            if (!r) r = p_set_current(ctx);
            printf(r ? "err %d\n" : "ok\n", r);
        } else if (!strcmp(cmd, "alloc") || !strcmp(cmd, "managed") || !strcmp(cmd, "async") ||
                   !strcmp(cmd, "pool") || !strcmp(cmd, "pitch")) {
            CUdeviceptr p = 0;
            if (!strcmp(cmd, "alloc")) r = p_alloc(&p, a);
            else if (!strcmp(cmd, "managed")) r = p_managed(&p, a, 1);
            else if (!strcmp(cmd, "async")) r = p_async(&p, a, NULL);
            else if (!strcmp(cmd, "pitch")) { size_t pitch = 0; r = p_pitch(&p, &pitch, a, b, 4); }
            else {
                void *pool = NULL;
                r = p_get_pool(&pool, 0);
                if (!r) r = p_from_pool(&p, a, pool, NULL);
            }
            if (r) printf("err %d\n", r);
            else { keys[n] = p; printf("ok %d\n", n++); }
        } else if (!strcmp(cmd, "create")) {
            struct prop prop;
            memset(&prop, 0, sizeof prop);
            prop.type = 1;          /* CU_MEM_ALLOCATION_TYPE_PINNED */
            prop.location_type = 1; /* CU_MEM_LOCATION_TYPE_DEVICE */
            prop.location_id = 0;
            unsigned long long h = 0;
            r = p_create(&h, a, &prop, 0);
            if (r) printf("err %d\n", r);
            else { keys[n] = h; printf("ok %d\n", n++); }
        } else if (!strcmp(cmd, "free") || !strcmp(cmd, "freeasync") || !strcmp(cmd, "release")) {
            if (a >= (unsigned long long)n) { printf("err -1\n"); continue; }
            if (!strcmp(cmd, "free")) r = p_free(keys[a]);
            else if (!strcmp(cmd, "freeasync")) r = p_free_async(keys[a], NULL);
            else r = p_release(keys[a]);
            printf(r ? "err %d\n" : "ok\n", r);
        } else if (!strcmp(cmd, "info")) {
            size_t f = 0, t = 0;
            r = p_info(&f, &t);
            if (r) printf("err %d\n", r);
            else printf("ok %zu %zu\n", f, t);
        } else if (!strcmp(cmd, "total")) {
            size_t t = 0;
            r = p_total(&t, 0);
            if (r) printf("err %d\n", r);
            else printf("ok %zu\n", t);
        } else if (!strcmp(cmd, "launch")) {
            r = p_launch((void *)0x1, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
            printf(r ? "err %d\n" : "ok\n", r);
        } else if (!strcmp(cmd, "sync")) {
            r = p_sync();
            printf(r ? "err %d\n" : "ok\n", r);
        } else if (!strcmp(cmd, "used")) {
            printf("ok %llu\n", p_used ? p_used(0) : 0ULL);
        } else {
            printf("err -2\n");
        }
    }
    return 0;
}
