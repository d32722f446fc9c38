// Host harness for kernels/fixed_base.cuh: the per-thread function of the fixed-base kernel,
// compiled with g++ (PTX carry chains emulated), checked against blstrs by
// cuda/tests/fixed_base_host.rs.
//
// Protocol (stdin, little-endian): u32 n; 32 * 255 affine points (96 bytes each: the table);
// n scalars (32 bytes each, canonical). stdout: n affine points (96 bytes each).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../../kernels/fixed_base.cuh"

using namespace gpud;

static void read_exact(void* dst, size_t len) {
    if (len != 0 && std::fread(dst, 1, len, stdin) != len) {
        std::fprintf(stderr, "fixed_base_harness: short input\n");
        std::exit(2);
    }
}

int main() {
    uint32_t n;
    read_exact(&n, 4);
    std::vector<g1_affine> table(GPUD_FB_WINDOWS * GPUD_FB_DIGITS);
    read_exact(table.data(), table.size() * sizeof(g1_affine));
    std::vector<uint32_t> scalars((size_t)n * 8);
    read_exact(scalars.data(), scalars.size() * 4);
    for (uint32_t i = 0; i < n; i++) {
        g1_affine p = fixed_base_mul(table.data(), &scalars[(size_t)i * 8]);
        if (std::fwrite(&p, sizeof(p), 1, stdout) != 1) return 3;
    }
    return 0;
}
