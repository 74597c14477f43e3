/* The sampler's two full-vocabulary passes (engine/sampler.py): the greedy argmax, and one draw
 * from softmax(logits / temperature) cut by top-k, top-p and min-p.
 *
 * torch's CPU ops for these are slow where the vocabulary is large: at [32, 49152] fp32, 2
 * threads, exponential_ (the exponential race's noise) takes 55 ms, the sort behind top-p 84 ms,
 * max(-1) 0.9 ms, against a decode step of about 30 ms. Here each row is a few vector passes,
 * rows spread over OpenMP threads:
 *
 * 1. the row's max, then e_i = exp((l_i - max) / T) into a scratch row and their sum;
 * 2. top-k / top-p without sorting the row: the e_i are counted into NBINS bins by their float
 *    bits (exponent and the top 5 mantissa bits, largest values first: each bin 1/32 of an
 *    octave wide), whole bins are kept while every token of them ranks below k and the mass
 *    before them is below p of the total; the one bin where that stops is sorted and cut token
 *    by token (a token stays when fewer than k rank above it and the mass above it is below p,
 *    as sorting the whole row would decide); everything below it is zeroed;
 * 3. min-p: e_i below min_p (the largest e is 1) zeroed;
 * 4. the draw by inverse CDF: the first token whose running sum of the kept e passes u times
 *    their sum, u uniform in [0, 1) from the caller's generator (blocks of 256 summed as vectors,
 *    the block that passes scanned one by one, in double).
 *
 * A token whose e is 0 (cut, or exp underflowed) is never drawn. isa: 0 plain C, 1 AVX2+FMA,
 * 2 AVX-512 (the same loops, vectorized by the compiler for each).
 */
#include "minisgl_kernels.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* libmvec's vector expf (see paged_attention.c) */
__attribute__((__simd__("notinbranch"))) extern float expf(float);
#endif

#define NBIN_EXP 40                           /* octaves binned: e down to 2^-39 */
#define NBIN_SUB 32                           /* bins per octave (top 5 mantissa bits) */
#define NBINS (NBIN_EXP * NBIN_SUB + 1)       /* the last: e below 2^-39, zeros included */
#define BLOCK 256                             /* tokens summed at a time by the draw */
#define AI static inline __attribute__((always_inline))

typedef struct {
    float e;
    int32_t i;
} cand;

AI uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* bin of e in [0, 1]: 0 holds the largest values (e = 1 lands in bin NBIN_SUB - 1) */
AI int bin_of(float e) {
    uint32_t u = bits_of(e);
    int octave = 127 - (int)(u >> 23);  /* 0 for e = 1, k for e in [2^-k, 2^(1-k)) */
    if (octave >= NBIN_EXP) return NBINS - 1;
    return octave * NBIN_SUB + (NBIN_SUB - 1 - (int)((u >> 18) & 31));
}

/* the smallest value bin b holds (0 for the last) */
static float bin_floor(int b) {
    if (b >= NBINS - 1) return 0.0f;
    uint32_t u = ((uint32_t)(127 - b / NBIN_SUB) << 23) |
                 ((uint32_t)(NBIN_SUB - 1 - b % NBIN_SUB) << 18);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int larger_first(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->e != y->e) return x->e > y->e ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;  /* ties: the lower token id ranks first */
}

/* a floor below which no value of e can stay: the largest power of two 2^-4j (j = 1 .. 6) that
 * at least k values reach, or values of at least the mass cap (every value below it then has k
 * values or that mass ranked above it); 0 where none is. A cheap vector pass a level, largest
 * first, so that the candidates gathered next are the few largest values, not the whole row. */
AI float stay_floor(const float *e, int V, int k, double mass_cap) {
    /* the sums are fp32 and only bound the floor: a margin for their rounding */
    float cap = mass_cap < INFINITY ? (float)(mass_cap * 1.001) : INFINITY;
    for (float level = 0x1p-4f; level >= 0x1p-24f; level *= 0x1p-4f) {
        float mass = 0.0f, count = 0.0f;
#pragma omp simd reduction(+ : mass, count)
        for (int i = 0; i < V; i++) {
            mass += e[i] >= level ? e[i] : 0.0f;
            count += e[i] >= level ? 1.0f : 0.0f;
        }
        if (count >= (float)k || mass >= cap) return level;
    }
    return 0.0f;
}

/* zero every e[i] but the top k whose mass before them is below top_p of sum (step 2 above); c
 * has room for V candidates */
AI void cut_top(float *e, int V, int k, float top_p, float sum, cand *c) {
    double mass_cap = top_p < 1.0f ? (double)top_p * sum : INFINITY;
    /* top-p's floor without a pass: below it lie at most V such values, under (1 - p) of the
     * mass, so the mass above any of them reaches p (halved: rounding) */
    float floor_p = top_p < 1.0f ? 0.5f * (1.0f - top_p) * sum / (float)V : 0.0f;
    float floor_ = stay_floor(e, V, k, mass_cap);
    floor_ = floor_p > floor_ ? floor_p : floor_;
    int n = 0;  /* the candidates, in token order: blocks without one skipped by a vector test */
    for (int b0 = 0; b0 < V; b0 += 64) {
        int end = V - b0 < 64 ? V : b0 + 64, any = 0;
#pragma omp simd reduction(| : any)
        for (int i = b0; i < end; i++) any |= e[i] >= floor_;
        if (any)
            for (int i = b0; i < end; i++)
                if (e[i] >= floor_) c[n++] = (cand){e[i], i};
    }
    int count[NBINS] = {0};  /* 15 KB of stack */
    double mass[NBINS] = {0};
    for (int j = 0; j < n; j++) {
        int b = bin_of(c[j].e);
        count[b]++;
        mass[b] += c[j].e;
    }
    int above = 0, b = 0;
    double before = 0.0;
    for (; b < NBINS; b++) {
        if (count[b] == 0) continue;
        if (above + count[b] > k || !(before + mass[b] < mass_cap)) break;
        above += count[b];
        before += mass[b];
    }
    int m = 0;  /* the boundary bin's candidates, sorted, then cut one by one */
    if (b < NBINS) {
        for (int j = 0; j < n; j++)
            if (bin_of(c[j].e) == b) c[m++] = c[j];
        qsort(c, (size_t)m, sizeof *c, larger_first);
        float bottom = bin_floor(b);
        floor_ = bottom > floor_ ? bottom : floor_;
    }
    int keep = 0;
    for (; keep < m && above + keep < k && before < mass_cap; keep++) before += c[keep].e;
#pragma omp simd
    for (int i = 0; i < V; i++) e[i] = e[i] < floor_ ? 0.0f : e[i];
    for (int j = keep; j < m; j++) e[c[j].i] = 0.0f;
}

AI float widen_bf16(uint16_t h) {
    uint32_t w = (uint32_t)h << 16;
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

#define FIND_BLOCK 64  /* the search for the first maximum tests a block at once, then its items */

/* first i with l[i] == max over the row (the first of equal ones, as torch's max(-1); NaNs are
 * passed over; -0 and +0 equal), l fp32 or, with bf16, bf16 bits (fp32's top half, widened) */
AI int64_t first_max(const void *row, int V, int bf16) {
    const uint16_t *h = row;
    const float *l = row;
    float mx = -INFINITY;
    if (bf16) {
#pragma omp simd reduction(max : mx)
        for (int i = 0; i < V; i++) {
            float f = widen_bf16(h[i]);
            mx = f > mx ? f : mx;
        }
    } else {
#pragma omp simd reduction(max : mx)
        for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    }
    /* an early exit does not vectorize: each block is tested whole, the one that holds the
     * maximum then item by item */
    for (int i0 = 0; i0 < V; i0 += FIND_BLOCK) {
        int n = V - i0 < FIND_BLOCK ? V - i0 : FIND_BLOCK, hit = 0;
        if (bf16) {
#pragma omp simd reduction(| : hit)
            for (int i = 0; i < n; i++) hit |= widen_bf16(h[i0 + i]) == mx;
        } else {
#pragma omp simd reduction(| : hit)
            for (int i = 0; i < n; i++) hit |= l[i0 + i] == mx;
        }
        if (!hit) continue;
        for (int i = 0; i < n; i++)
            if ((bf16 ? widen_bf16(h[i0 + i]) : l[i0 + i]) == mx) return i0 + i;
    }
    return 0;  /* NaNs only */
}

AI int64_t draw_row(const float *l, int V, float temperature, int top_k, float top_p,
                    float min_p, double u, float *e, cand *c) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    if (!(mx > -INFINITY) || mx == INFINITY) return first_max(l, V, 0);
    float inv = 1.0f / temperature, sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < V; i++) {
        float v = expf((l[i] - mx) * inv);
        e[i] = v;
        sum += v;
    }
    int k = top_k > 0 && top_k < V ? top_k : V;
    if (k < V || top_p < 1.0f) cut_top(e, V, k, top_p, sum, c);
    if (min_p > 0.0f) {
#pragma omp simd
        for (int i = 0; i < V; i++) e[i] = e[i] < min_p ? 0.0f : e[i];
    }
    double total = 0.0;
#pragma omp simd reduction(+ : total)
    for (int i = 0; i < V; i++) total += e[i];
    double target = u * total, run = 0.0;
    for (int b0 = 0; b0 < V; b0 += BLOCK) {
        int n = V - b0 < BLOCK ? V - b0 : BLOCK;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < n; j++) s += e[b0 + j];
        if (run + s <= target) {
            run += s;
            continue;
        }
        for (int j = 0; j < n; j++) {
            run += e[b0 + j];
            if (run > target && e[b0 + j] > 0.0f) return b0 + j;
        }
    }
    for (int i = V - 1; i >= 0; i--)  /* rounding left the sum just short: the last kept one */
        if (e[i] > 0.0f) return i;
    return first_max(l, V, 0);
}

#define ROWS_ARGS                                                                               \
    const float *logits, int N, int V, const float *temperature, const int *top_k,             \
        const float *top_p, const float *min_p, const double *u, int64_t *out

#define ROWS_BODY                                                                               \
    int failed = 0;                                                                             \
    _Pragma("omp parallel reduction(| : failed)") {                                             \
        float *e = malloc(sizeof(float) * (size_t)V);                                           \
        cand *c = malloc(sizeof(cand) * (size_t)V);                                             \
        if (e == NULL || c == NULL) failed = 1;                                                 \
        else {                                                                                  \
            _Pragma("omp for schedule(dynamic, 1)")                                             \
            for (int r = 0; r < N; r++)                                                         \
                out[r] = draw_row(logits + (int64_t)r * V, V, temperature[r], top_k[r],         \
                                  top_p[r], min_p[r], u[r], e, c);                              \
        }                                                                                       \
        free(e);                                                                                \
        free(c);                                                                                \
    }                                                                                           \
    return failed ? -1 : 0;

#define ARGMAX_BODY                                                                             \
    _Pragma("omp parallel for schedule(static)")                                                \
    for (int r = 0; r < N; r++)                                                                 \
        out[r] = first_max((const char *)logits + (int64_t)r * V * (bf16 ? 2 : 4), V, bf16);

static int draw_c(ROWS_ARGS) { ROWS_BODY }
static void argmax_c(const void *logits, int N, int V, int bf16, int64_t *out) { ARGMAX_BODY }
#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
AVX2 static int draw_avx2(ROWS_ARGS) { ROWS_BODY }
AVX512 static int draw_avx512(ROWS_ARGS) { ROWS_BODY }
AVX2 static void argmax_avx2(const void *logits, int N, int V, int bf16, int64_t *out) {
    ARGMAX_BODY
}
AVX512 static void argmax_avx512(const void *logits, int N, int V, int bf16, int64_t *out) {
    ARGMAX_BODY
}
#endif

int sample_rows(const float *logits, int N, int V, const float *temperature, const int *top_k,
                const float *top_p, const float *min_p, const double *u, int64_t *out,
                int isa) {
    if (N < 0 || V < 1) return -1;
#if defined(__x86_64__)
    if (isa >= 2) return draw_avx512(logits, N, V, temperature, top_k, top_p, min_p, u, out);
    if (isa >= 1) return draw_avx2(logits, N, V, temperature, top_k, top_p, min_p, u, out);
#endif
    (void)isa;
    return draw_c(logits, N, V, temperature, top_k, top_p, min_p, u, out);
}

int argmax_rows(const void *logits, int N, int V, int bf16, int64_t *out, int isa) {
    if (N < 0 || V < 1) return -1;
#if defined(__x86_64__)
    if (isa >= 2) {
        argmax_avx512(logits, N, V, bf16, out);
        return 0;
    }
    if (isa >= 1) {
        argmax_avx2(logits, N, V, bf16, out);
        return 0;
    }
#endif
    (void)isa;
    argmax_c(logits, N, V, bf16, out);
    return 0;
}
