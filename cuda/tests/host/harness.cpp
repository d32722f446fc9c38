// Runs the kernels' arithmetic (fr.cuh, ntt.cuh) on the CPU for the Rust tests, which compare
// its output with blstrs. The kernels are thin loops over these same functions; here each
// block's threads run one after another, with the barriers between stages kept as loop order.
//
// stdin (little endian):  u32 command, then
//   1 (field ops):  u64 count, count x { a[8 x u32], b[8 x u32], e u64 }
//                   -> stdout count x { a+b, a-b, a*b, a^2, -a, a^e } (8 x u32 each)
//   2 (program):    u64 len, len elements; u32 tables, each { u64 len, len elements };
//                   u32 steps, each 13 x u64 (see run_step) -> stdout the len elements
//   3 (products):   u64 count, count x { a, b } -> stdout count x a*b
//
// Built once as is and once with -DFR_MUL_KARATSUBA=1 (fr_mul = fr_mul_karatsuba).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fr.cuh"
#include "ntt.cuh"

typedef std::vector<fr_t> poly;

static void read_exact(void *dst, size_t n) {
    if (fread(dst, 1, n, stdin) != n) {
        fprintf(stderr, "harness: short input\n");
        exit(2);
    }
}

static void write_exact(const void *src, size_t n) {
    if (fwrite(src, 1, n, stdout) != n) {
        fprintf(stderr, "harness: short output\n");
        exit(2);
    }
}

template <typename T> static T read_val() {
    T v;
    read_exact(&v, sizeof v);
    return v;
}

static poly read_poly(fr_u64 len) {
    poly v(len);
    if (len) read_exact(v.data(), len * sizeof(fr_t));
    return v;
}

static void field_ops() {
    fr_u64 count = read_val<fr_u64>();
    for (fr_u64 i = 0; i < count; i++) {
        fr_t a = read_val<fr_t>(), b = read_val<fr_t>();
        fr_u64 e = read_val<fr_u64>();
        fr_t out[6] = {fr_add(a, b), fr_sub(a, b), fr_mul(a, b), fr_sqr(a), fr_neg(a), fr_pow_u64(a, e)};
        write_exact(out, sizeof out);
    }
}

static void products() {
    fr_u64 count = read_val<fr_u64>();
    for (fr_u64 i = 0; i < count; i++) {
        fr_t a = read_val<fr_t>(), b = read_val<fr_t>();
        fr_t p = fr_mul(a, b);
        write_exact(&p, sizeof p);
    }
}

enum {
    OP_TWIDDLES = 1,
    OP_PASS = 2,
    OP_BITREV = 3,
    OP_POINTWISE = 5,
    OP_RADIX_PASS = 6,
    OP_BITREV_TILED = 7,
    OP_RADIX4_PASS = 8,
    OP_POINTWISE_TILED = 9
};

static void run_pass(const ntt_pass &p, fr_t *data, const fr_t *tw, const fr_t *scale) {
    const fr_u32 E = ntt_block_elems(p);
    const fr_u64 subs = ntt_subproblems(p);
    const fr_u64 blocks = (subs + (1u << p.log_subs) - 1) >> p.log_subs;
    // Sized exactly like the kernel's dynamic shared memory (PassParams::shared_bytes), so the
    // tests' address sanitizer catches any slot outside it.
    std::vector<fr_u32> sm((size_t)ntt_plane(p) * FR_LIMBS);
    for (fr_u64 block = 0; block < blocks; block++) {
        for (fr_u32 i = 0; i < E; i++) ntt_pass_load(p, data, scale, block, sm.data(), i);
        for (fr_u32 r = 0; r < p.k; r++) {
            fr_u32 log_hp = ntt_stage_log_hp(p, r);
            for (fr_u32 b = 0; b < E / 2; b++) ntt_butterfly(p, tw, block, sm.data(), b, log_hp);
        }
        for (fr_u32 i = 0; i < E; i++) ntt_pass_store(p, data, scale, block, sm.data(), i);
    }
}

// The radix pass kernel (ntt_radix_kernel): rounds separated by barriers; within a round the
// block's threads run one after another. Shared memory is sized exactly as the launch's.
static void run_radix_pass(const ntt_pass &p, fr_u32 lr, fr_t *data, const fr_t *tw, const fr_t *scale) {
    const fr_u64 subs = ntt_subproblems(p);
    const fr_u64 blocks = (subs + (1u << p.log_subs) - 1) >> p.log_subs;
    const fr_u32 threads = nttr_threads(p, lr), rounds = nttr_rounds(p, lr);
    std::vector<fr_u32> sm((size_t)ntt_block_elems(p) * FR_LIMBS);
    for (fr_u64 block = 0; block < blocks; block++) {
        for (fr_u32 j = 0; j < rounds; j++) {
            for (fr_u32 t = 0; t < threads; t++) nttr_round(p, lr, data, tw, scale, block, sm.data(), t, j);
        }
    }
}

// A tiled kernel (ntt_bitrev_tiled_kernel, h_pointwise_tiled_kernel): every block's load phase
// load(block, sm, tid), barrier, store phase.
template <class Load>
static void run_tiles(fr_t *data, fr_u64 total, fr_u32 log_n, Load load) {
    std::vector<fr_u32> sm(NTT_BR_SMEM_WORDS);
    const fr_u64 blocks = ntt_bitrev_tiled_blocks(total);
    for (fr_u64 b = 0; b < blocks; b++) {
        for (fr_u32 t = 0; t < NTT_BR_THREADS; t++) load(b, sm.data(), t);
        for (fr_u32 t = 0; t < NTT_BR_THREADS; t++) ntt_bitrev_tile_store(data, b, log_n, sm.data(), t);
    }
}

// Step fields: op, off, total, log_n, then per op:
//   TWIDDLES: [9] power table, [11] destination table
//   PASS, RADIX_PASS, RADIX4_PASS: [4] log_stride, [5] k, [6] log_subs, [7] inverse, [8] dit,
//         [9] twiddle table, [10] scale table, [11] scale mode, [12] scale by bit-reversed index
//   BITREV, BITREV_TILED: -
//   POINTWISE, POINTWISE_TILED: [11] offset of b, [12] offset of c (a at off)
static void run_step(const fr_u64 *s, poly &data, std::vector<poly> &tables) {
    const fr_u64 op = s[0], off = s[1], total = s[2];
    const fr_u32 log_n = (fr_u32)s[3];
    const fr_u64 table = s[9];
    const bool pass = op == OP_PASS || op == OP_RADIX_PASS || op == OP_RADIX4_PASS;
    if (table >= tables.size() || off + total > data.size() || (pass && s[10] >= tables.size())) {
        fprintf(stderr, "harness: step out of range\n");
        exit(2);
    }
    fr_t *d = data.data() + off;
    switch (op) {
    case OP_TWIDDLES: {
        // Table s[11] <- omega^e, e < total, from the power table `table`.
        poly tw(total);
        for (fr_u64 e = 0; e < total; e++) tw[e] = ntt_twiddle_entry(tables[table].data(), e);
        if (s[11] >= tables.size()) tables.resize(s[11] + 1);
        tables[s[11]] = tw;
        break;
    }
    case OP_PASS:
    case OP_RADIX_PASS:
    case OP_RADIX4_PASS: {
        ntt_pass p;
        p.log_n = log_n;
        p.log_stride = (fr_u32)s[4];
        p.k = (fr_u32)s[5];
        p.log_subs = (fr_u32)s[6];
        p.total = total;
        p.inverse = (fr_u32)s[7];
        p.dit = (fr_u32)s[8];
        p.scale = (fr_u32)s[11];
        p.scale_bitrev = (fr_u32)s[12];
        if (op == OP_PASS) run_pass(p, d, tables[table].data(), tables[s[10]].data());
        else run_radix_pass(p, op == OP_RADIX_PASS ? NTTR_MAX_LOG_RADIX : 2u, d, tables[table].data(),
                            tables[s[10]].data());
        break;
    }
    case OP_BITREV:
        for (fr_u64 g = 0; g < total; g++) ntt_bitrev_one(d, g, log_n);
        break;
    case OP_BITREV_TILED:
        if (log_n < 2 * NTT_BR_TILE_BITS) {
            fprintf(stderr, "harness: tiled bit reversal below 2^8\n");
            exit(2);
        }
        run_tiles(d, total, log_n,
                  [&](fr_u64 b, fr_u32 *sm, fr_u32 t) { ntt_bitrev_tile_load(d, b, log_n, sm, t); });
        break;
    case OP_POINTWISE_TILED: {
        // h_pointwise_tiled_kernel: load phase (a * b - c into the tiles), barrier, store phase.
        if (log_n < 2 * NTT_BR_TILE_BITS || total != (1ull << log_n)) {
            fprintf(stderr, "harness: tiled pointwise needs one polynomial of 2^8 points or more\n");
            exit(2);
        }
        const fr_t *b = data.data() + s[11], *c = data.data() + s[12];
        run_tiles(d, total, log_n, [&](fr_u64 blk, fr_u32 *sm, fr_u32 t) {
            h_pointwise_tile_load(d, b, c, blk, log_n, sm, t);
        });
        break;
    }
    case OP_POINTWISE:
        for (fr_u64 i = 0; i < (1ull << log_n); i++)
            h_pointwise_one(d, data.data() + s[11], data.data() + s[12], i, log_n);
        break;
    default:
        fprintf(stderr, "harness: unknown op %llu\n", (unsigned long long)op);
        exit(2);
    }
}

static void program() {
    poly data = read_poly(read_val<fr_u64>());
    std::vector<poly> tables(read_val<fr_u32>());
    for (auto &t : tables) t = read_poly(read_val<fr_u64>());
    fr_u32 steps = read_val<fr_u32>();
    for (fr_u32 i = 0; i < steps; i++) {
        fr_u64 s[13];
        read_exact(s, sizeof s);
        run_step(s, data, tables);
    }
    write_exact(data.data(), data.size() * sizeof(fr_t));
}

int main() {
    fr_u32 cmd = read_val<fr_u32>();
    if (cmd == 1) field_ops();
    else if (cmd == 2) program();
    else if (cmd == 3) products();
    else {
        fprintf(stderr, "harness: unknown command %u\n", cmd);
        return 2;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
