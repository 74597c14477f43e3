/* Linear layers with bf16 inputs on AMX's tile multiply (tdpbf16ps): int4 and int8 weights from
 * a few rows up, where the dot-product kernels (avx512/wo_int4_bf16.c, portable/wo_matmul.c) pay
 * for unpacking every weight again for every row, and bf16 weights as they lie in the HF
 * [out, in] tensor.
 *
 * The weight is the A operand: a tile is 16 output rows by one group of 32 inputs. int4 is
 * dequantized into a 1 KB bf16 buffer (row r = output n0 + r, the group's 32 weights in order)
 * exactly as wo_int4_dequant_bf16 rounds it (nib * scale + min in fp32, then to nearest bf16);
 * int8 weights are integers, exact in bf16, and their per-row scale multiplies the sums at the
 * end; bf16 tiles are loaded straight from the weight. The inputs are the B operand, laid out
 * once per call in AMX's pair order: B tile (group g, token tile t) row k2 holds, for each of 16
 * tokens, inputs 2 k2 and 2 k2 + 1 of the group (zeros past the row's end and the last token).
 * Four C tiles hold 16 outputs by up to 64 tokens in fp32 across all groups (at 17-32 tokens 32
 * outputs by 32 tokens: pairs()); each weight tile is unpacked once for all of them, so from a
 * few rows on the unpacking, not the multiply, is the cost, and it hardly grows with the rows.
 * Output row blocks are spread over OpenMP threads; each thread configures its tiles and
 * releases them at the end of the call. int4 in 16-output panels (avx512/wo_panels.c's layout)
 * is dequantized the same way: a panel's group is 4 vectors of 64 bytes, lane l of vector k
 * holding output l's group bytes 4k..4k+3, so a 4 x 4 transpose of 32-bit lanes gives each
 * output's 16 bytes in order, and its scales and mins lie [groups][16] per panel.
 */
#define _GNU_SOURCE  /* syscall() */
#include "../minisgl_kernels.h"
#include "../portable/wo_shared.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GROUP 32
#define CTILES 4                 /* C tiles: tokens a pass = 16 * CTILES */
#define BTILE_ELEMS (16 * 32)    /* bf16 values in one B tile */
#define AHEAD 1                  /* weight blocks prefetched ahead (2 and 4: no faster) */

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>

#include "../cpu_features.h"
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* AMX-BF16 and AMX-TILE in cpuid, AVX512-BF16 for the conversions, and the kernel's leave to
 * use the tile registers (Linux asks each process to request it once) */
int wo_has_amx(void) {
    static int has = -1;
    if (has >= 0) return has;
    unsigned a, b, c, d;
    has = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
        return has;
    __builtin_cpu_init();
    /* every CPU with AMX so far has AVX512-VBMI (the panels' table lookup) too */
    if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512bw")
        || !__builtin_cpu_supports("avx512vbmi"))
        return has;
    if (!cpu_feature_allowed("amx")) return has;
    has = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return has;
}

#define TA __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16," \
                                 "avx512vbmi,f16c,fma")))

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

TA static void configure(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {  /* every tile 16 rows of 64 bytes */
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
}

/* r[i] lane j -> r[j] lane i: a 16 x 16 transpose of 32-bit lanes in registers */
TA static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
    __m512 u[16];
    for (int i = 0; i < 16; i += 2) {  /* pairs of rows interleaved, then quads, then 4x4 lanes */
        u[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(u[i], u[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(u[i], u[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(u[i + 1], u[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(u[i + 1], u[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        u[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        u[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        u[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        u[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(u[i], u[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(u[i], u[i + 8], 0xDD);
    }
}

/* x [T, in] bf16 -> B tiles [groups][tiles][16 pairs][16 tokens][2], tiles = ceil(T / 16): a
 * token's 32 inputs of a group are 16 pairs (32-bit lanes), so a tile is their transpose */
TA static void lay_out_inputs(const uint16_t *x, int T, int in, int groups, int tiles,
                              uint16_t *xb) {
#pragma omp for schedule(static) collapse(2)
    for (int g = 0; g < groups; g++)
        for (int tt = 0; tt < tiles; tt++) {
            float *tile = (float *)(xb + ((size_t)g * tiles + tt) * BTILE_ELEMS);
            int left = in - g * GROUP;
            __mmask32 m = left >= GROUP ? ~(__mmask32)0 : (((__mmask32)1 << left) - 1);
            __m512 r[16];
            for (int t = 0; t < 16; t++) {
                int token = tt * 16 + t;
                r[t] = token < T ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(
                                       m, x + (int64_t)token * in + g * GROUP))
                                 : _mm512_setzero_ps();
            }
            transpose16(r);
            for (int k2 = 0; k2 < 16; k2++) _mm512_store_ps(tile + k2 * 16, r[k2]);
        }
}

/* The scales and mins of rows n0 .. n0 + nr - 1 in fp32, [nr][groups] each: loaded by the
 * dequantizing as broadcasts, which take load ports rather than the vector ones it is bound by */
TA static void block_scales(const uint16_t *scale, const uint16_t *mn, int groups, int n0,
                            int nr, float *s32, float *m32) {
    int64_t n = (int64_t)nr * groups, base = (int64_t)n0 * groups;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 s = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, scale + base + i));
        _mm512_mask_storeu_ps(s32 + i, m, s);
        __m512 mins = mn ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, mn + base + i))
                         : _mm512_mul_ps(s, _mm512_set1_ps(-8.0f));  /* Q4_0: min = -8 scale */
        _mm512_mask_storeu_ps(m32 + i, m, mins);
    }
}

/* One group's weights for rows n0 .. n0 + nr - 1 into a[16][32] bf16: byte j of the group is
 * element j (low nibble) and j + 16 (high one) */
TA static inline void dequant_int4(const uint8_t *q, const float *s32, const float *m32,
                                   int groups, int n0, int nr, int g, uint16_t *a) {
    const __m512i low4 = _mm512_set1_epi32(0x0f);
    for (int r = 0; r < nr; r++) {
        __m512i b = _mm512_cvtepu8_epi32(
            _mm_loadu_si128((const __m128i *)(q + ((int64_t)(n0 + r) * groups + g) * 16)));
        __m512 s = _mm512_set1_ps(s32[r * groups + g]), m = _mm512_set1_ps(m32[r * groups + g]);
        __m512 lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(b, low4)), s, m);
        __m512 hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4)), s, m);
        _mm512_store_si512(a + r * 32, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

/* The same from int4 panels: q [panels][groups][4][16][4], s32 / m32 [panel][groups][16]
 * (block_scales of whole panels); rows n0 .. n0 + nr - 1 lie in one panel (n0 a multiple of 16).
 * A row's 16 possible weights (nib * scale + min in fp32, rounded once: the values above) are a
 * table, and one vpermw looks its 32 nibbles up: fewer vector ops a row than converting each
 * nibble (5 against 9), for the same bits. */
TA static inline void dequant_panels4(const uint8_t *q, const float *s32, const float *m32,
                                      int groups, int n0, int nr, int g, uint16_t *a) {
    const uint8_t *src = q + ((int64_t)(n0 / 16) * groups + g) * 256;
    __m512i v0 = _mm512_loadu_si512(src), v1 = _mm512_loadu_si512(src + 64);
    __m512i v2 = _mm512_loadu_si512(src + 128), v3 = _mm512_loadu_si512(src + 192);
    __m512i t0 = _mm512_unpacklo_epi32(v0, v1), t1 = _mm512_unpackhi_epi32(v0, v1);
    __m512i t2 = _mm512_unpacklo_epi32(v2, v3), t3 = _mm512_unpackhi_epi32(v2, v3);
    /* u[i] 128-bit lane j: output 4 j + i's 16 bytes, then their low and high nibbles */
    __m512i u[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                    _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512i lo[4], hi[4];
    for (int i = 0; i < 4; i++) {
        lo[i] = _mm512_and_si512(u[i], low4);
        hi[i] = _mm512_and_si512(_mm512_srli_epi16(u[i], 4), low4);
    }
    /* the lookup's indices for lane j: word w < 16 is byte 16 j + w of lo, word 16 + w byte
     * 16 j + w of hi (vpermt2b's second table, index bit 6); the words' high bytes zeroed */
    const __mmask64 even = 0x5555555555555555ull;
    const __m512 iota = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i lane0 = _mm512_set_epi16(79, 78, 77, 76, 75, 74, 73, 72, 71, 70, 69, 68, 67,
                                           66, 65, 64, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4,
                                           3, 2, 1, 0);
    __m512i pick[4];
    for (int j = 0; j < 4; j++) pick[j] = _mm512_add_epi16(lane0, _mm512_set1_epi16(16 * j));
    for (int r = 0; r < nr; r++) {
        __m512i idx = _mm512_maskz_permutex2var_epi8(even, lo[r & 3], pick[r >> 2], hi[r & 3]);
        __m512 w = _mm512_fmadd_ps(iota, _mm512_set1_ps(s32[g * 16 + r]),
                                   _mm512_set1_ps(m32[g * 16 + r]));
        __m512i table = _mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(w));
        _mm512_store_si512(a + r * 32, _mm512_permutexvar_epi16(idx, table));
    }
}

TA static inline void dequant_int8(const int8_t *q, int in, int n0, int nr, int g, uint16_t *a) {
    int left = in - g * GROUP;
    __mmask32 m = left >= GROUP ? ~(__mmask32)0 : (((__mmask32)1 << left) - 1);
    for (int r = 0; r < nr; r++) {
        __m256i raw = _mm256_maskz_loadu_epi8(m, q + (int64_t)(n0 + r) * in + g * GROUP);
        __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(raw)));
        __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(raw, 1)));
        _mm512_store_si512(a + r * 32, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

/* C tile ct += A (tile areg) x the B tile at b + i tiles, loaded into tile breg. Tile registers
 * are not renamed: a load into one waits for the multiplies that read it, so consecutive groups
 * use different A and B tiles where there are enough */
#define DP(ct, i, areg, breg) do { _tile_loadd(breg, b + (i) * BTILE_ELEMS, 64); \
                                   _tile_dpbf16ps(ct, areg, breg); } while (0)

/* c [16 outputs][16 tokens] (times the rows' int8 scales when scale is given) into y's rows
 * for tokens t0 .. t0 + nt - 1, outputs n0 .. n0 + nr - 1: a 16 x 16 transpose in registers,
 * then residual (y's dtype, [T, out]) added in fp32 where given, then y in fp32 or bf16 */
TA static void write_tokens(const float c[16][16], const float *scale, void *y, int y_bf16,
                            const void *residual, int64_t out, int n0, int nr, int t0, int nt) {
    __m512 r[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_load_ps(c[i]);
    transpose16(r);
    /* r[t]: token t's 16 outputs */
    __mmask16 m = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __m512 s = scale ? _mm512_maskz_loadu_ps(m, scale + n0) : _mm512_set1_ps(1.0f);
    for (int t = 0; t < nt; t++) {
        int64_t at = (int64_t)(t0 + t) * out + n0;
        __m512 v = _mm512_mul_ps(r[t], s);
        if (y_bf16) {
            if (residual) v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)residual + at)), 16)));
            _mm256_mask_storeu_epi16((uint16_t *)y + at, m, (__m256i)_mm512_cvtneps_pbh(v));
        } else {
            if (residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, (const float *)residual + at));
            _mm512_mask_storeu_ps((float *)y + at, m, v);
        }
    }
}

/* rows n0 .. n0 + nr - 1 of a bf16 weight [out, in], inputs of group g, into a[16][32] (zeros
 * past the row's end): where a tile load straight from the weight would read past it */
TA static inline void copy_bf16(const uint16_t *w, int in, int n0, int nr, int g, uint16_t *a) {
    int left = in - g * GROUP;
    __mmask32 m = left >= GROUP ? ~(__mmask32)0 : (((__mmask32)1 << left) - 1);
    for (int r = 0; r < nr; r++)
        _mm512_store_si512(a + r * 32,
                           _mm512_maskz_loadu_epi16(m, w + (int64_t)(n0 + r) * in + g * GROUP));
}

enum weight_kind { W_INT4, W_INT8, W_BF16, W_PANELS4 };

/* the rows block_scales converts for nr outputs: panels' scales lie [groups][16] a panel, so
 * whole panels (a panel's outputs past the weight's are zeros) */
static inline int scaled_rows(enum weight_kind kind, int nr) {
    return kind == W_PANELS4 ? (nr + 15) / 16 * 16 : nr;
}

/* the weight tile of rows n0 .. n0 + nr - 1, group g: a bf16 weight's own rows where a whole
 * tile lies in it (*stride = its row bytes), else buf (64 bytes a row) dequantized or copied */
TA static inline const void *a_tile(enum weight_kind kind, const void *q, const float *s32,
                                    const float *m32, int in, int groups, int64_t row_bytes,
                                    int n0, int nr, int g, uint16_t *buf, int64_t *stride) {
    *stride = 64;
    if (kind == W_BF16 && nr == 16 && (g + 1) * GROUP <= in) {
        *stride = row_bytes;
        return (const uint16_t *)q + (int64_t)n0 * in + g * GROUP;
    }
    if (kind == W_INT4) dequant_int4((const uint8_t *)q, s32, m32, groups, n0, nr, g, buf);
    else if (kind == W_PANELS4)
        dequant_panels4((const uint8_t *)q, s32, m32, groups, n0, nr, g, buf);
    else if (kind == W_INT8) dequant_int8((const int8_t *)q, in, n0, nr, g, buf);
    else copy_bf16((const uint16_t *)q, in, n0, nr, g, buf);
    return buf;
}

/* 17-32 tokens (two token tiles): blocks of 32 outputs, two weight tiles against the two token
 * tiles, so a group takes four tile loads for four multiplies, where a block of 16 outputs takes
 * three for two. Tile loads, not the multiplies, bound this kernel at these sizes (on a 2-core
 * Xeon: 13-16 ns a multiply alone, 29 ns with one tile load beside it). Called inside run()'s
 * parallel region, its tiles configured; a missing second block (odd blocks) repeats the first
 * and writes nothing. */
TA static void pairs(int T, int in, enum weight_kind kind, const void *q, const void *scale,
                     const uint16_t *mn, int out, void *y, int y_bf16, const void *residual,
                     int groups, int blocks, int64_t row_bytes, const uint16_t *xb, float *s32,
                     float *m32) {
    uint16_t a4[2][2][16 * 32] __attribute__((aligned(64)));  /* [group parity][tile] */
    float c[4][16][16] __attribute__((aligned(64)));
    memset(a4, 0, sizeof a4);
    int npairs = (blocks + 1) / 2;
#pragma omp for schedule(runtime)
    for (int p = 0; p < npairs; p++) {
        int n0 = p * 32, na = out - n0 < 16 ? out - n0 : 16, nb = out - n0 - 16;
        nb = nb > 16 ? 16 : nb;  /* <= 0: no second block */
        if (kind == W_INT4 || kind == W_PANELS4)
            block_scales(scale, mn, groups, n0, scaled_rows(kind, na + (nb > 0 ? nb : 0)), s32,
                         m32);
        const char *ahead = (const char *)q + (int64_t)(n0 + 32) * row_bytes;
        int64_t ahead_step = p + 1 < npairs ? 32 * row_bytes / groups : 0;
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (int g = 0; g < groups; g++) {
            for (int64_t i = 0; i < ahead_step; i += 64)
                _mm_prefetch(ahead + (int64_t)g * ahead_step + i, _MM_HINT_T1);
            int64_t sa, sb = 0;
            const void *wa = a_tile(kind, q, s32, m32, in, groups, row_bytes, n0, na, g,
                                    a4[g & 1][0], &sa);
            const void *wb = nb > 0 ? a_tile(kind, q, s32 + 16 * groups, m32 + 16 * groups, in,
                                             groups, row_bytes, n0 + 16, nb, g, a4[g & 1][1],
                                             &sb) : wa;
            const uint16_t *b = xb + (size_t)g * 2 * BTILE_ELEMS;
            _tile_loadd(4, wa, sa);
            _tile_loadd(5, wb, nb > 0 ? sb : sa);
            _tile_loadd(6, b, 64);
            _tile_loadd(7, b + BTILE_ELEMS, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, c[0], 64); _tile_stored(1, c[1], 64);
        _tile_stored(2, c[2], 64); _tile_stored(3, c[3], 64);
        const float *rs = kind == W_INT8 ? scale : NULL;
        write_tokens((const float (*)[16])c[0], rs, y, y_bf16, residual, out, n0, na, 0, 16);
        write_tokens((const float (*)[16])c[1], rs, y, y_bf16, residual, out, n0, na, 16, T - 16);
        if (nb > 0) {
            write_tokens((const float (*)[16])c[2], rs, y, y_bf16, residual, out, n0 + 16, nb, 0,
                         16);
            write_tokens((const float (*)[16])c[3], rs, y, y_bf16, residual, out, n0 + 16, nb,
                         16, T - 16);
        }
    }
}

/* y [T, out] = x [T, in] bf16 @ W^T (+ residual): W int4 (q, scale, mn as wo_matmul.c), int8
 * (q [out, in] int8, scale [out] fp32) or bf16 (q [out, in], loaded into tiles as it is) */
TA static int run(const uint16_t *x, int T, int in, enum weight_kind kind, const void *q,
                  const void *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                  const void *residual, int threads) {
    if (!wo_has_amx()) return -1;
    int groups = (in + GROUP - 1) / GROUP, tiles = (T + 15) / 16, blocks = (out + 15) / 16;
    /* panels: 16 outputs of groups * 256 bytes, so ahead (below) is the next panels' bytes */
    int64_t row_bytes = kind == W_INT4 || kind == W_PANELS4 ? (int64_t)groups * 16
                        : kind == W_INT8 ? in : 2 * in;
    uint16_t *xb = aligned_alloc(64, (size_t)groups * tiles * BTILE_ELEMS * 2);
    /* int4: each thread's copy of its block's scales and mins in fp32 (block_scales) */
    int scaled = kind == W_INT4 || kind == W_PANELS4;
    float *sm = scaled ? malloc(sizeof(float) * 64 * groups * threads) : NULL;
    if (xb == NULL || (scaled && sm == NULL)) {
        free(xb);
        free(sm);
        return -1;
    }
    wo_schedule(T);  /* the output blocks' loops below */
#pragma omp parallel num_threads(threads)
    {
        lay_out_inputs(x, T, in, groups, tiles, xb);  /* ends in the omp for's barrier */
        configure();
        /* two weight buffers in turn: the next group's stores need not wait for the tile load
         * of this one (5.8 against 6.0 ms for the default model's layers at 1-4 rows) */
        uint16_t a2[2][16 * 32] __attribute__((aligned(64)));
        float c[CTILES][16][16] __attribute__((aligned(64)));
        memset(a2, 0, sizeof a2);  /* rows past the last output stay zero */
        /* 32 rows of scales, then of mins: a pair of blocks (below) */
        float *s32 = sm ? sm + (size_t)64 * groups * omp_get_thread_num() : NULL;
        float *m32 = s32 ? s32 + 32 * groups : NULL;
        if (tiles == 2) {
            pairs(T, in, kind, q, scale, mn, out, y, y_bf16, residual, groups, blocks, row_bytes,
                  xb, s32, m32);
        } else {
#pragma omp for schedule(runtime)
            for (int blk = 0; blk < blocks; blk++) {
                int n0 = blk * 16, nr = out - n0 < 16 ? out - n0 : 16;
                if (kind == W_INT4 || kind == W_PANELS4)
                    block_scales(scale, mn, groups, n0, scaled_rows(kind, nr), s32, m32);
                /* the block AHEAD blocks on: 16 rows of row_bytes, a 1 / groups slice per group */
                const char *ahead = (const char *)q + (int64_t)(n0 + 16 * AHEAD) * row_bytes;
                int64_t ahead_step = blk + AHEAD < blocks ? 16 * row_bytes / groups : 0;
                for (int t0 = 0; t0 < tiles; t0 += CTILES) {
                    int nt = tiles - t0 < CTILES ? tiles - t0 : CTILES;
                    /* at 1-2 token tiles, odd groups sum into two other C tiles: two chains of
                     * dependent multiplies instead of one */
                    int split = nt <= 2;
                    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
                    for (int g = 0; g < groups; g++) {
                        uint16_t *a = a2[g & 1];
                        if (t0 == 0)  /* a slice of a block ahead (the rows' strided reads defeat
                                       * the hardware prefetcher) */
                            for (int64_t i = 0; i < ahead_step; i += 64)
                                _mm_prefetch(ahead + (int64_t)g * ahead_step + i, _MM_HINT_T1);
                        int64_t stride;  /* the weight tile: 16 rows */
                        const void *src = a_tile(kind, q, s32, m32, in, groups, row_bytes, n0, nr,
                                                 g, a, &stride);
                        const uint16_t *b = xb + ((size_t)g * tiles + t0) * BTILE_ELEMS;
                        if (!split) {
                            _tile_loadd(4, src, stride);
                            DP(0, 0, 4, 5);
                            DP(1, 1, 4, 6);
                            if (nt > 2) DP(2, 2, 4, 7);
                            if (nt > 3) DP(3, 3, 4, 5);
                        } else if (!(g & 1)) {  /* even groups: A in tile 4, sums in tiles 0-1 */
                            _tile_loadd(4, src, stride);
                            if (nt > 1) { DP(0, 0, 4, 6); DP(1, 1, 4, 7); }
                            else DP(0, 0, 4, 6);
                        } else {  /* odd ones: A in tile 5, sums in tiles 2-3 */
                            _tile_loadd(5, src, stride);
                            if (nt > 1) { DP(2, 0, 5, 6); DP(3, 1, 5, 7); }
                            else DP(2, 0, 5, 7);
                        }
                    }
                    _tile_stored(0, c[0], 64); _tile_stored(1, c[1], 64);
                    _tile_stored(2, c[2], 64); _tile_stored(3, c[3], 64);
                    /* c[i][r][t]: output n0 + r, token 16 (t0 + i) + t */
                    for (int i = 0; i < nt; i++) {
                        if (split)
                            for (int r = 0; r < 16; r++)
                                _mm512_store_ps(c[i][r],
                                                _mm512_add_ps(_mm512_load_ps(c[i][r]),
                                                              _mm512_load_ps(c[i + 2][r])));
                        int first = 16 * (t0 + i), left = T - first;
                        write_tokens((const float (*)[16])c[i], kind == W_INT8 ? scale : NULL, y,
                                     y_bf16, residual, out, n0, nr, first, left < 16 ? left : 16);
                    }
                }
            }
        }
        _tile_release();
    }
    free(xb);
    free(sm);
    return 0;
}

/* The entry points: y [T, out] (+ residual, y's dtype and shape, or NULL) in bf16 when y_bf16,
 * else fp32; 0 when done, -1 where the CPU has no AMX or a buffer could not be had */
int wo_amx_int4(const uint16_t *x, int T, int in, const uint8_t *q, const uint16_t *scale,
                const uint16_t *mn, int out, void *y, int y_bf16, const void *residual,
                int threads) {
    return run(x, T, in, W_INT4, q, scale, mn, out, y, y_bf16, residual, threads);
}

int wo_amx_int4_panels(const uint16_t *x, int T, int in, const uint8_t *q,
                       const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                       const void *residual, int threads) {
    return run(x, T, in, W_PANELS4, q, scale, mn, out, y, y_bf16, residual, threads);
}

int wo_amx_int8(const uint16_t *x, int T, int in, const int8_t *q, const float *scale, int out,
                void *y, int y_bf16, const void *residual, int threads) {
    return run(x, T, in, W_INT8, q, scale, NULL, out, y, y_bf16, residual, threads);
}

int wo_amx_bf16(const uint16_t *x, int T, int in, const uint16_t *w, int out, void *y,
                int y_bf16, const void *residual, int threads) {
    return run(x, T, in, W_BF16, w, NULL, NULL, out, y, y_bf16, residual, threads);
}
#else
int wo_has_amx(void) { return 0; }
int wo_amx_int4(const uint16_t *x, int T, int in, const uint8_t *q, const uint16_t *scale,
                const uint16_t *mn, int out, void *y, int y_bf16, const void *residual,
                int threads) {
    return -1;
}
int wo_amx_int4_panels(const uint16_t *x, int T, int in, const uint8_t *q,
                       const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                       const void *residual, int threads) {
    return -1;
}
int wo_amx_int8(const uint16_t *x, int T, int in, const int8_t *q, const float *scale, int out,
                void *y, int y_bf16, const void *residual, int threads) {
    return -1;
}
int wo_amx_bf16(const uint16_t *x, int T, int in, const uint16_t *w, int out, void *y,
                int y_bf16, const void *residual, int threads) {
    return -1;
}
#endif
