// Host harness for kernels/fixed_base.cuh: the per-thread code of the fixed-base kernel (sums
// and the batched conversion to affine), compiled with g++ (PTX carry chains emulated), checked
// against blstrs by cuda/tests/fixed_base_host.rs, in G1 and G2.
//
// Protocol (stdin, little-endian): u32 group (1 or 2); u32 n; 32 * 255 affine points (the
// table: 96 bytes each in G1, 192 in G2); n scalars (32 bytes each, canonical). stdout: n
// affine points, made in batches of GPUD_FB_BATCH as the kernel makes them.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../../kernels/g1.cuh"
#include "../../kernels/g2.cuh"
#include "../../kernels/fixed_base.cuh"

using namespace gpud;

static void read_exact(void* dst, size_t len) {
    if (len != 0 && std::fread(dst, 1, len, stdin) != len) {
        std::fprintf(stderr, "fixed_base_harness: short input\n");
        std::exit(2);
    }
}

template <class Ops>
static int run(uint32_t n) {
    std::vector<typename Ops::affine> table(GPUD_FB_WINDOWS * GPUD_FB_DIGITS);
    read_exact(table.data(), table.size() * sizeof(typename Ops::affine));
    std::vector<uint32_t> scalars((size_t)n * 8);
    read_exact(scalars.data(), scalars.size() * 4);
    std::vector<typename Ops::xyzz> scratch(n);
    std::vector<typename Ops::affine> out(n);
    for (uint32_t first = 0; first < n; first += GPUD_FB_BATCH) {
        uint32_t count = n - first < GPUD_FB_BATCH ? n - first : GPUD_FB_BATCH;
        fixed_base_batch<Ops>(table.data(), &scalars[(size_t)first * 8], &scratch[first],
                              &out[first], count);
    }
    if (n != 0 && std::fwrite(out.data(), sizeof(typename Ops::affine), n, stdout) != n) return 3;
    return 0;
}

int main() {
    uint32_t group, n;
    read_exact(&group, 4);
    read_exact(&n, 4);
    if (group == 1) return run<g1_ops>(n);
    if (group == 2) return run<g2_ops>(n);
    std::fprintf(stderr, "fixed_base_harness: group %u is neither 1 nor 2\n", group);
    return 2;
}
