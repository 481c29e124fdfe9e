/* Vectors over channels for the convolution kernels: the vector type, a small GEMM whose B and C rows are
   vectors, and the channel-blocked image layout ([C/VL][rows][cols][VL], channels padded with zeros to a
   multiple of VL). No Python API in here.

   The vector type uses GCC's vector extensions, so the code builds for AVX-512, AVX2 or SSE: TMPI_WG_VL lanes
   and TMPI_WG_ACC accumulator registers follow the -march flags pytensor compiles with. */
#ifndef TMPI_CONV2D_VEC_H
#define TMPI_CONV2D_VEC_H

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define TMPI_WG_VL 16
#define TMPI_WG_ACC 16
#elif defined(__AVX__)
#define TMPI_WG_VL 8
#define TMPI_WG_ACC 8
#else
#define TMPI_WG_VL 4
#define TMPI_WG_ACC 8
#endif

/* Larger helpers are called, not inlined: each is used in two or three places, and inlined copies only
   lengthen the compile (every conv op's module builds these files). */
#define TMPI_WG_NOINLINE __attribute__((noinline, noclone))

typedef float tmpi_vf __attribute__((vector_size(TMPI_WG_VL * sizeof(float))));

static inline tmpi_vf wg_load(const float* p) { return *(const tmpi_vf*)p; }
static inline void wg_store(float* p, tmpi_vf v) { *(tmpi_vf*)p = v; }
/* unaligned */
static inline tmpi_vf wg_loadu(const float* p)
{
    tmpi_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void wg_storeu(float* p, tmpi_vf v) { memcpy(p, &v, sizeof v); }

/* s - (+0) is s for every s, -0 included, so this folds to one broadcast ((tmpi_vf){} + s cannot: it is an
   addition that turns -0 into +0). */
static inline tmpi_vf wg_splat(float s) { return s - (tmpi_vf){}; }

static inline size_t wg_round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* The distance between planes of n floats each that are read or written together (a Winograd tile's 25 or 36
   values): an odd number of cache lines, so they fall into different sets of the L1 cache (a power-of-two
   distance puts them all into one). */
static inline size_t wg_plane_stride(size_t n)
{
    const size_t line = 64 / sizeof(float);
    return (wg_round_up(n, line) / line | 1) * line;
}

static inline float* wg_alloc(size_t floats, int zero)
{
    const size_t bytes = wg_round_up(floats * sizeof(float) + 64, 64);
    float* p = (float*)aligned_alloc(64, bytes);
    if (p && zero) memset(p, 0, bytes);
    return p;
}

/* ---- the GEMMs: c[r][v] (+)= sum_k a[r*ars + k*aks] * b[k*ldb + v], v over nv vectors ---- */

template <int RT, int NV>
static inline void wg_kernel(const float* __restrict a, size_t ars, size_t aks, const float* __restrict b,
                             size_t ldb, int K, float* __restrict c, size_t ldc, int accumulate)
{
    tmpi_vf acc[RT][NV];
    #pragma GCC unroll 16
    for (int r = 0; r < RT; ++r)
        #pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = accumulate ? wg_loadu(c + r * ldc + v * TMPI_WG_VL) : (tmpi_vf){};
    for (int k = 0; k < K; ++k) {
        tmpi_vf bv[NV];
        #pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
            bv[v] = wg_loadu(b + (size_t)k * ldb + v * TMPI_WG_VL);
            /* in a register: GCC would otherwise fold the load into each of the RT multiply-adds using it */
            __asm__("" : "+v"(bv[v]));
        }
        const float* ak = a + (size_t)k * aks;
        #pragma GCC unroll 16
        for (int r = 0; r < RT; ++r) {
            const tmpi_vf s = wg_splat(ak[r * ars]);
            #pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[r][v] += s * bv[v];
        }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < RT; ++r)
        #pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) wg_storeu(c + r * ldc + v * TMPI_WG_VL, acc[r][v]);
}

/* `rows` rows of c, RT at a time, the rest by halves. */
template <int RT, int NV>
static void wg_gemm_rows(int rows, const float* a, size_t ars, size_t aks, const float* b, size_t ldb, int K,
                         float* c, size_t ldc, int accumulate)
{
    for (; rows >= RT; rows -= RT, a += RT * ars, c += RT * ldc)
        wg_kernel<RT, NV>(a, ars, aks, b, ldb, K, c, ldc, accumulate);
    if constexpr (RT > 1) {
        if (rows > 0) wg_gemm_rows<RT / 2, NV>(rows, a, ars, aks, b, ldb, K, c, ldc, accumulate);
    }
}

/* c (rows x nv vectors, row stride ldc) (+)= a (rows x K, strides ars/aks) * b (K x nv vectors). */
TMPI_WG_NOINLINE static void wg_gemm(int rows, int nv, const float* a, size_t ars, size_t aks, const float* b, size_t ldb, int K,
                    float* c, size_t ldc, int accumulate)
{
    int v = 0;
    for (; v + 4 <= nv; v += 4)
        wg_gemm_rows<TMPI_WG_ACC / 4, 4>(rows, a, ars, aks, b + v * TMPI_WG_VL, ldb, K, c + v * TMPI_WG_VL, ldc,
                                         accumulate);
    if (nv - v >= 2) {
        wg_gemm_rows<TMPI_WG_ACC / 2, 2>(rows, a, ars, aks, b + v * TMPI_WG_VL, ldb, K, c + v * TMPI_WG_VL, ldc,
                                         accumulate);
        v += 2;
    }
    if (nv - v >= 1)
        wg_gemm_rows<TMPI_WG_ACC, 1>(rows, a, ars, aks, b + v * TMPI_WG_VL, ldb, K, c + v * TMPI_WG_VL, ldc,
                                     accumulate);
}

typedef int tmpi_vi __attribute__((vector_size(TMPI_WG_VL * sizeof(int))));

/* r[i][j] <-> r[j][i] for VL vectors of VL lanes: log2(VL) rounds of two-source shuffles, round `bit` swapping
   the lanes whose row and column differ in that bit. */
TMPI_WG_NOINLINE static void wg_transpose(tmpi_vf r[TMPI_WG_VL])
{
    #pragma GCC unroll 4
    for (int bit = 1; bit < TMPI_WG_VL; bit <<= 1) {
        tmpi_vi lo, hi;
        #pragma GCC unroll 16
        for (int c = 0; c < TMPI_WG_VL; ++c) {
            lo[c] = (c & bit) ? TMPI_WG_VL + (c ^ bit) : c;
            hi[c] = (c & bit) ? TMPI_WG_VL + c : (c ^ bit);
        }
        #pragma GCC unroll 16
        for (int i = 0; i < TMPI_WG_VL; ++i) {
            if (i & bit) continue;
            const tmpi_vf a = r[i], b = r[i | bit];
            r[i] = __builtin_shuffle(a, b, lo);
            r[i | bit] = __builtin_shuffle(a, b, hi);
        }
    }
}

/* Channel-blocked copy of image x (C x H x W) into xs ([Cb][rows][cols][VL]) at row offset oy, column
   offset ox; lanes past C are left as they are (zero). VL pixels (in row-major order) of VL channels at a
   time are transposed in registers. */
TMPI_WG_NOINLINE static void wg_block_image(const float* __restrict x, int C, int H, int W, float* __restrict xs, int rows,
                           int cols, int oy, int ox)
{
    const size_t plane = (size_t)H * W, P = plane;
    for (int cb = 0; cb * TMPI_WG_VL < C; ++cb) {
        const int lanes = C - cb * TMPI_WG_VL < TMPI_WG_VL ? C - cb * TMPI_WG_VL : TMPI_WG_VL;
        const float* src = x + (size_t)cb * TMPI_WG_VL * plane;
        float* dst = xs + (size_t)cb * rows * cols * TMPI_WG_VL;
        size_t p = 0;
        if (lanes == TMPI_WG_VL) {
            for (; p + TMPI_WG_VL <= P; p += TMPI_WG_VL) {
                tmpi_vf r[TMPI_WG_VL];
                #pragma GCC unroll 16
                for (int l = 0; l < TMPI_WG_VL; ++l) r[l] = wg_loadu(src + l * plane + p);
                wg_transpose(r);
                int y = (int)(p / W), i = (int)(p % W);
                #pragma GCC unroll 16
                for (int k = 0; k < TMPI_WG_VL; ++k) {
                    wg_store(dst + ((size_t)(y + oy) * cols + i + ox) * TMPI_WG_VL, r[k]);
                    if (++i == W) { i = 0; ++y; }
                }
            }
        }
        for (; p < P; ++p) {
            const int y = (int)(p / W), i = (int)(p % W);
            float* d = dst + ((size_t)(y + oy) * cols + i + ox) * TMPI_WG_VL;
            for (int l = 0; l < lanes; ++l) d[l] = src[l * plane + p];
        }
    }
}

/* The first H x W pixels of the channel-blocked ys ([Ob][rows][cols][VL]) into y (O x H x W). */
TMPI_WG_NOINLINE static void wg_unblock_image(const float* __restrict ys, int rows, int cols, float* __restrict y, int O, int H,
                             int W)
{
    const size_t plane = (size_t)H * W, P = plane;
    for (int ob = 0; ob * TMPI_WG_VL < O; ++ob) {
        const int lanes = O - ob * TMPI_WG_VL < TMPI_WG_VL ? O - ob * TMPI_WG_VL : TMPI_WG_VL;
        const float* src = ys + (size_t)ob * rows * cols * TMPI_WG_VL;
        float* dst = y + (size_t)ob * TMPI_WG_VL * plane;
        size_t p = 0;
        if (lanes == TMPI_WG_VL) {
            for (; p + TMPI_WG_VL <= P; p += TMPI_WG_VL) {
                tmpi_vf r[TMPI_WG_VL];
                int yy = (int)(p / W), i = (int)(p % W);
                #pragma GCC unroll 16
                for (int k = 0; k < TMPI_WG_VL; ++k) {
                    r[k] = wg_load(src + ((size_t)yy * cols + i) * TMPI_WG_VL);
                    if (++i == W) { i = 0; ++yy; }
                }
                wg_transpose(r);
                #pragma GCC unroll 16
                for (int l = 0; l < TMPI_WG_VL; ++l) wg_storeu(dst + l * plane + p, r[l]);
            }
        }
        for (; p < P; ++p) {
            const int yy = (int)(p / W), i = (int)(p % W);
            const float* s = src + ((size_t)yy * cols + i) * TMPI_WG_VL;
            for (int l = 0; l < lanes; ++l) dst[l * plane + p] = s[l];
        }
    }
}

#endif
