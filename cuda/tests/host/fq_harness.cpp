// Host harness for the BLS12-381 field, curve and MSM code in cuda/kernels.
//
// Compiled with a plain C++ compiler by cuda/tests/msm_host.rs, which feeds it inputs drawn
// with blstrs and checks the outputs against blstrs. The headers are the very ones NVRTC
// compiles for the GPU; here their PTX carry chains run on an emulated carry flag and each
// kernel body runs once per thread index, in order.
//
// Protocol: binary on stdin, binary on stdout, little-endian.
//   u32 mode, then the mode's input; see the run_* functions.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../kernels/g1.cuh"
#include "../../kernels/g2.cuh"
#include "../../kernels/msm.cuh"

using namespace gpud;

namespace {

void fail(const char* what) {
    std::fprintf(stderr, "fq_harness: %s\n", what);
    std::exit(2);
}

void read_exact(void* dst, size_t len) {
    if (len != 0 && std::fread(dst, 1, len, stdin) != len) fail("short input");
}

uint32_t read_u32() {
    uint32_t v;
    read_exact(&v, 4);
    return v;
}

template <class T>
T read_val() {
    T v;
    read_exact(&v, sizeof(T));
    return v;
}

template <class T>
void write_val(const T& v) {
    if (std::fwrite(&v, sizeof(T), 1, stdout) != 1) fail("write failed");
}

g1_xyzz scaled(const g1_affine& p, const fq_t& l) {
    if (g1_affine_is_inf(p)) return g1_xyzz_inf();
    g1_xyzz r;
    r.zz = fq_sqr(l);
    r.zzz = fq_mul(r.zz, l);
    r.x = fq_mul(p.x, r.zz);
    r.y = fq_mul(p.y, r.zzz);
    return r;
}

g2_xyzz scaled2(const g2_affine& p, const fq2_t& l) {
    if (g2_affine_is_inf(p)) return g2_xyzz_inf();
    g2_xyzz r;
    r.zz = fq2_sqr(l);
    r.zzz = fq2_mul(r.zz, l);
    r.x = fq2_mul(p.x, r.zz);
    r.y = fq2_mul(p.y, r.zzz);
    return r;
}

// Mode 1: u32 count, then count x (a, b) field elements (Montgomery). Output per pair:
// a*b, a^2, a+b, a-b, -a, a^-1 (0 for 0), a with Montgomery form removed (a / R).
void run_fq() {
    uint32_t count = read_u32();
    for (uint32_t i = 0; i < count; i++) {
        fq_t a = read_val<fq_t>();
        fq_t b = read_val<fq_t>();
        write_val(fq_mul(a, b));
        write_val(fq_sqr(a));
        write_val(fq_add(a, b));
        write_val(fq_sub(a, b));
        write_val(fq_neg(a));
        write_val(fq_is_zero(a) ? fq_zero() : fq_inv(a));
        fq_t plain;
        mont_from<FqParams>(plain.l, a.l);
        write_val(plain);
    }
}

// Mode 2: u32 count, then count x (P, Q affine, l1, l2 field elements, u32 k). P and Q are
// lifted to XYZZ with the scale factors l1, l2 (x l^2, y l^3, l^2, l^3). Output per case, as
// Jacobian points: P+Q (mixed), P+Q (XYZZ), 2P, inf+Q (mixed), k*P; then P as affine.
void run_g1() {
    uint32_t count = read_u32();
    for (uint32_t i = 0; i < count; i++) {
        g1_affine p = read_val<g1_affine>();
        g1_affine q = read_val<g1_affine>();
        fq_t l1 = read_val<fq_t>();
        fq_t l2 = read_val<fq_t>();
        uint32_t k = read_u32();
        g1_xyzz sp = scaled(p, l1);
        g1_xyzz sq = scaled(q, l2);

        g1_xyzz madd = sp;
        g1_xyzz_add_affine(madd, q);
        write_val(g1_xyzz_to_jacobian(madd));

        g1_xyzz add = sp;
        g1_xyzz_add(add, sq);
        write_val(g1_xyzz_to_jacobian(add));

        write_val(g1_xyzz_to_jacobian(g1_xyzz_dbl(sp)));

        g1_xyzz from_inf = g1_xyzz_inf();
        g1_xyzz_add_affine(from_inf, q);
        write_val(g1_xyzz_to_jacobian(from_inf));

        write_val(g1_xyzz_to_jacobian(g1_xyzz_mul_small(sp, k)));

        write_val(g1_xyzz_to_affine(sp));
    }
}

// Mode 4: u32 count, then count x (a, b) Fq2 elements. Output per pair: a*b, a^2, a+b, a-b,
// -a, 2a, a^-1 (0 for 0).
void run_fq2() {
    uint32_t count = read_u32();
    for (uint32_t i = 0; i < count; i++) {
        fq2_t a = read_val<fq2_t>();
        fq2_t b = read_val<fq2_t>();
        write_val(fq2_mul(a, b));
        write_val(fq2_sqr(a));
        write_val(fq2_add(a, b));
        write_val(fq2_sub(a, b));
        write_val(fq2_neg(a));
        write_val(fq2_dbl(a));
        write_val(fq2_is_zero(a) ? fq2_zero() : fq2_inv(a));
    }
}

// Mode 5: mode 2 for G2: count x (P, Q affine, l1, l2 in Fq2, u32 k); the same outputs.
void run_g2() {
    uint32_t count = read_u32();
    for (uint32_t i = 0; i < count; i++) {
        g2_affine p = read_val<g2_affine>();
        g2_affine q = read_val<g2_affine>();
        fq2_t l1 = read_val<fq2_t>();
        fq2_t l2 = read_val<fq2_t>();
        uint32_t k = read_u32();
        g2_xyzz sp = scaled2(p, l1);
        g2_xyzz sq = scaled2(q, l2);

        g2_xyzz madd = sp;
        g2_xyzz_add_affine(madd, q);
        write_val(g2_xyzz_to_jacobian(madd));

        g2_xyzz add = sp;
        g2_xyzz_add(add, sq);
        write_val(g2_xyzz_to_jacobian(add));

        write_val(g2_xyzz_to_jacobian(g2_xyzz_dbl(sp)));

        g2_xyzz from_inf = g2_xyzz_inf();
        g2_xyzz_add_affine(from_inf, q);
        write_val(g2_xyzz_to_jacobian(from_inf));

        write_val(g2_xyzz_to_jacobian(g2_xyzz_mul_small(sp, k)));

        write_val(g2_xyzz_to_affine(sp));
    }
}

void scan(std::vector<uint32_t>& data, uint32_t len, uint32_t chunk) {
    if (len <= chunk) {
        msm_scan_chunk_apply(0, len, chunk, data.data(), nullptr);
        return;
    }
    uint32_t threads = (len + chunk - 1) / chunk;
    std::vector<uint32_t> sums(threads);
    for (uint32_t t = 0; t < threads; t++) msm_scan_chunk_sum(t, len, chunk, data.data(), sums.data());
    scan(sums, threads, chunk);
    for (uint32_t t = 0; t < threads; t++) msm_scan_chunk_apply(t, len, chunk, data.data(), sums.data());
}

// Mode 3 (G1) and 6 (G2): u32 n, c, seg, seg2, m, group, scan_chunk; n bases (affine, 96 or
// 192 bytes); n scalars (Montgomery Fr, 32 bytes). Output: u32 W and the W window sums
// (Jacobian), the MSM combined here (Jacobian), u32 M (sorted entries), u32 passes (segmented
// passes, the first included). The same generic steps the GPU module of each group runs.
template <class C>
void run_msm() {
    typedef typename C::affine affine;
    typedef typename C::xyzz xyzz;
    typedef typename C::jacobian jacobian;
    uint32_t n = read_u32();
    uint32_t c = read_u32();
    uint32_t seg = read_u32();
    uint32_t seg2 = read_u32();
    uint32_t m = read_u32();
    uint32_t group = read_u32();
    uint32_t scan_chunk = read_u32();
    if (c < 2 || c > 24 || seg < 1 || seg2 < 4 || m < 1 || group < 2 || scan_chunk < 2) {
        fail("bad parameters");
    }
    std::vector<affine> bases(n);
    read_exact(bases.data(), (size_t)n * sizeof(affine));
    std::vector<uint32_t> mont((size_t)n * 8);
    read_exact(mont.data(), (size_t)n * 32);

    uint32_t windows = (255 + c - 1) / c;
    uint32_t b = 1u << (c - 1);
    uint32_t keys = windows * b;

    std::vector<uint32_t> prepared((size_t)n * 8);
    std::vector<uint32_t> offsets(keys + 1, 0);
    for (uint32_t i = 0; i < n; i++) {
        msm_scalar_prepare(i, n, c, windows, mont.data(), prepared.data(), offsets.data());
    }
    scan(offsets, keys + 1, scan_chunk);
    uint32_t total = offsets[keys];
    std::vector<uint32_t> fill(keys, 0);
    std::vector<uint64_t> entries((size_t)n * windows + 1);
    for (uint32_t i = 0; i < n; i++) {
        msm_scatter(i, n, c, windows, prepared.data(), offsets.data(), fill.data(), entries.data());
    }
    for (uint32_t k = 0; k < keys; k++) {
        if (offsets[k] + fill[k] != offsets[k + 1]) fail("scatter did not fill its bucket");
    }
    for (uint32_t e = 0; e < total; e++) {
        uint32_t k = (uint32_t)(entries[e] >> 32);
        if (k >= keys || e < offsets[k] || e >= offsets[k + 1]) fail("entry outside its bucket");
    }

    // Buckets start as garbage on the GPU; poison them here too.
    std::vector<xyzz> buckets(keys);
    std::memset(static_cast<void*>(buckets.data()), 0x5a, buckets.size() * sizeof(xyzz));

    uint64_t worst = (uint64_t)n * windows;
    uint32_t threads = (uint32_t)((worst + seg - 1) / seg);
    if (threads == 0) threads = 1;
    std::vector<uint32_t> keys_a(2 * (size_t)threads), keys_b;
    std::vector<xyzz> pts_a(2 * (size_t)threads), pts_b;
    msm_entry_source<C> src{entries.data(), bases.data()};
    for (uint32_t t = 0; t < threads; t++) {
        msm_segment_accumulate(t, seg, total, src, buckets.data(), keys_a.data(), pts_a.data());
    }
    uint32_t passes = 1;
    while (threads > 1) {
        uint32_t count = 2 * threads;
        uint32_t next = (count + seg2 - 1) / seg2;
        keys_b.assign(2 * (size_t)next, 0);
        pts_b.assign(2 * (size_t)next, C::inf());
        msm_slot_source<C> ssrc{keys_a.data(), pts_a.data()};
        for (uint32_t t = 0; t < next; t++) {
            msm_segment_accumulate(t, seg2, count, ssrc, buckets.data(), keys_b.data(), pts_b.data());
        }
        keys_a.swap(keys_b);
        pts_a.swap(pts_b);
        threads = next;
        passes++;
    }

    uint32_t mm = m < b ? m : b;
    uint32_t per = b / mm;
    std::vector<xyzz> red((size_t)windows * per);
    for (uint32_t t = 0; t < windows * per; t++) {
        msm_bucket_reduce<C>(t, windows, b, mm, offsets.data(), buckets.data(), red.data());
    }
    while (per > 1) {
        uint32_t groups = (per + group - 1) / group;
        std::vector<xyzz> next((size_t)windows * groups);
        for (uint32_t t = 0; t < windows * groups; t++) {
            msm_group_sum<C>(t, windows, per, group, red.data(), next.data());
        }
        red.swap(next);
        per = groups;
    }
    std::vector<jacobian> jac(windows);
    for (uint32_t t = 0; t < windows; t++) msm_to_jacobian<C>(t, windows, red.data(), jac.data());
    write_val(windows);
    for (uint32_t t = 0; t < windows; t++) write_val(jac[t]);
    // Horner over the windows, here in XYZZ (the Rust launcher does it with blstrs).
    xyzz acc = red[windows - 1];
    for (uint32_t j = windows - 1; j-- > 0;) {
        for (uint32_t d = 0; d < c; d++) acc = C::dbl(acc);
        C::add(acc, red[j]);
    }
    write_val(C::to_jacobian(acc));
    write_val(total);
    write_val(passes);
}

}  // namespace

int main() {
    uint32_t mode = read_u32();
    switch (mode) {
        case 1: run_fq(); break;
        case 2: run_g1(); break;
        case 3: run_msm<g1_ops>(); break;
        case 4: run_fq2(); break;
        case 5: run_g2(); break;
        case 6: run_msm<g2_ops>(); break;
        default: fail("unknown mode");
    }
    if (std::fflush(stdout) != 0) fail("flush failed");
    return 0;
}
