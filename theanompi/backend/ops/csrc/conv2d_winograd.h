/* Winograd F(4x4, 3x3) convolution for float32 (Lavin and Gray, "Fast Algorithms for Convolutional Neural
   Networks", 2016): 3x3 filters, stride 1, any padding up to 2, NCHW in and out. No Python API in here.

   Each 4x4 block ("tile") of outputs comes from a 6x6 block of the padded input:
       Y = A^T [ (G g G^T) (.) (B^T d B) ] A
   with (.) the elementwise product of two 6x6 matrices, so the 36 multiplications per channel pair and tile
   replace the 144 of a direct convolution. Summed over input channels, the products become 36 independent
   GEMMs (one per position xi of the 6x6 matrices):
       M[xi][tile][o] = sum_c V[xi][tile][c] * U[xi][c][o]
   The transforms are exact in real arithmetic; in float32 they cost about one more significant digit than the
   direct sum (measured by the tests and in docs/performance.md).

   The three passes of a training step:
   - forward:       y  = conv(x, W), the 36 GEMMs above, then the output transform A^T M A;
   - input grad:    dx = conv(gy, W'), the same with W' the filters flipped and with in/out channels swapped,
                    padding 2 - pad;
   - weight grad:   dU[xi][c][o] = sum over tiles of V[xi][tile][c] * Z[xi][tile][o], with V the input
                    transform of x and Z = A gy A^T the transform of gy's tiles; then dW = G^T dU G (the
                    adjoint of U = G W G^T).

   Layout: vectors run over channels (TMPI_WG_VL lanes, channels padded with zeros to a multiple), so every
   transform works on whole vectors. An image is first copied into a channel-blocked scratch
   ([C/VL][Hs][Ws][VL], zero border: the padding and the rows and columns past the last whole tile), and
   the output transform writes into the same layout, copied out to NCHW. Images are processed in chunks
   whose transformed data stays in the L2 cache; the chunks go to OpenMP threads.

   The vector type uses GCC's vector extensions, so the code builds for AVX-512, AVX2 or SSE (the width
   follows the -march flags pytensor compiles with). */
#ifndef TMPI_CONV2D_WINOGRAD_H
#define TMPI_CONV2D_WINOGRAD_H

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

/* Bytes of transformed data (V and M, or V and Z) per chunk of images. */
#ifndef TMPI_WG_CHUNK_BYTES
#define TMPI_WG_CHUNK_BYTES (384 << 10)
#endif

/* Larger helpers are called, not inlined: each is used in two or three places, and inlined copies only
   lengthen the compile (every conv op's module builds this file). */
#define TMPI_WG_NOINLINE __attribute__((noinline))

typedef float tmpi_vf __attribute__((vector_size(TMPI_WG_VL * sizeof(float))));

enum { TMPI_WG_XI = 36 };

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

/* The distance between the 36 planes of transformed data holding n floats each: an odd number of cache lines,
   so a tile's 36 values fall into different sets of the L1 cache (a power-of-two distance puts them all
   into one). */
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

/* ---- the one-dimensional transforms (applied to rows, then to columns) ---- */

/* t = B^T d (input, 6 -> 6) */
static inline void wg_bt(const tmpi_vf d[6], tmpi_vf t[6])
{
    const tmpi_vf p = d[4] - d[2], q = d[3] - d[1];
    t[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    t[1] = (d[3] + d[4]) - 4.0f * (d[1] + d[2]);
    t[2] = (d[4] - d[3]) + 4.0f * (d[1] - d[2]);
    t[3] = p + 2.0f * q;
    t[4] = p - 2.0f * q;
    t[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

/* y = A^T m (output, 6 -> 4) */
static inline void wg_at(const tmpi_vf m[6], tmpi_vf y[4])
{
    const tmpi_vf a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], d = m[3] - m[4];
    y[0] = m[0] + a + c;
    y[1] = b + 2.0f * d;
    y[2] = a + 4.0f * c;
    y[3] = b + 8.0f * d + m[5];
}

/* z = A y (output gradient, 4 -> 6: the adjoint of wg_at) */
static inline void wg_a(const tmpi_vf y[4], tmpi_vf z[6])
{
    const tmpi_vf e = y[0] + y[2], o = y[1] + y[3], e4 = y[0] + 4.0f * y[2], o2 = 2.0f * y[1] + 8.0f * y[3];
    z[0] = y[0];
    z[1] = e + o;
    z[2] = e - o;
    z[3] = e4 + o2;
    z[4] = e4 - o2;
    z[5] = y[3];
}

/* u = G g (filter, 3 -> 6) */
static inline void wg_g(const tmpi_vf g[3], tmpi_vf u[6])
{
    const tmpi_vf s = g[0] + g[2], p = g[0] * (1.0f / 24) + g[2] * (1.0f / 6), h = g[1] * (1.0f / 12);
    u[0] = g[0] * 0.25f;
    u[1] = (s + g[1]) * (-1.0f / 6);
    u[2] = (s - g[1]) * (-1.0f / 6);
    u[3] = p + h;
    u[4] = p - h;
    u[5] = g[2];
}

/* g = G^T u (filter gradient, 6 -> 3: the adjoint of wg_g) */
static inline void wg_gt(const tmpi_vf u[6], tmpi_vf g[3])
{
    const tmpi_vf s12 = u[1] + u[2], s34 = u[3] + u[4];
    g[0] = u[0] * 0.25f - s12 * (1.0f / 6) + s34 * (1.0f / 24);
    g[1] = (u[2] - u[1]) * (1.0f / 6) + (u[3] - u[4]) * (1.0f / 12);
    g[2] = (s34 - s12) * (1.0f / 6) + u[5];
}

/* ---- two-dimensional tile transforms on channel vectors ---- */

/* V[xi * vs] = (B^T d B)[xi] for the 6x6 block d at src (rows `row` floats apart, columns VL apart). */
static inline void wg_input_tile(const float* src, size_t row, float* v, size_t vs)
{
    tmpi_vf t[6][6];
    for (int j = 0; j < 6; ++j) {
        tmpi_vf d[6], c[6];
        for (int i = 0; i < 6; ++i) d[i] = wg_load(src + i * row + j * TMPI_WG_VL);
        wg_bt(d, c);
        for (int i = 0; i < 6; ++i) t[i][j] = c[i];
    }
    for (int i = 0; i < 6; ++i) {
        tmpi_vf r[6];
        wg_bt(t[i], r);
        for (int j = 0; j < 6; ++j) wg_store(v + (size_t)(i * 6 + j) * vs, r[j]);
    }
}

/* The 4x4 block at dst (rows `row` floats apart, columns VL apart) = A^T M A (+ bias) for M[xi * ms]. */
static inline void wg_output_tile(const float* m, size_t ms, const float* bias, float* dst, size_t row)
{
    tmpi_vf t[6][4];
    for (int i = 0; i < 6; ++i) {
        tmpi_vf r[6], y[4];
        for (int j = 0; j < 6; ++j) r[j] = wg_load(m + (size_t)(i * 6 + j) * ms);
        wg_at(r, y);
        for (int j = 0; j < 4; ++j) t[i][j] = y[j];
    }
    const tmpi_vf b = bias ? wg_load(bias) : (tmpi_vf){};
    for (int j = 0; j < 4; ++j) {
        tmpi_vf c[6], y[4];
        for (int i = 0; i < 6; ++i) c[i] = t[i][j];
        wg_at(c, y);
        for (int i = 0; i < 4; ++i) wg_store(dst + i * row + j * TMPI_WG_VL, y[i] + b);
    }
}

/* Z[xi * zs] = (A y A^T)[xi] for the 4x4 block y at src (rows `row` floats apart, columns VL apart). */
static inline void wg_grad_output_tile(const float* src, size_t row, float* z, size_t zs)
{
    tmpi_vf t[6][4];
    for (int j = 0; j < 4; ++j) {
        tmpi_vf y[4], c[6];
        for (int i = 0; i < 4; ++i) y[i] = wg_load(src + i * row + j * TMPI_WG_VL);
        wg_a(y, c);
        for (int i = 0; i < 6; ++i) t[i][j] = c[i];
    }
    for (int i = 0; i < 6; ++i) {
        tmpi_vf r[6];
        wg_a(t[i], r);
        for (int j = 0; j < 6; ++j) wg_store(z + (size_t)(i * 6 + j) * zs, r[j]);
    }
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

/* ---- geometry and the channel-blocked scratch images ---- */

struct tmpi_wg_geom {
    int N, C, H, W, O, ph, pw;  /* input N x C x H x W, O output channels, padding */
    int Ho, Wo, TH, TW, T1;     /* output size, tiles per column / row / image */
    int Cb, Ob;                 /* channel blocks of VL */
    int Hs, Ws;                 /* the padded scratch image: 4*TH + 2 x 4*TW + 2 */
};

static inline tmpi_wg_geom wg_geom(int N, int C, int H, int W, int O, int ph, int pw)
{
    tmpi_wg_geom g;
    g.N = N; g.C = C; g.H = H; g.W = W; g.O = O; g.ph = ph; g.pw = pw;
    g.Ho = H + 2 * ph - 2;
    g.Wo = W + 2 * pw - 2;
    g.TH = (g.Ho + 3) / 4;
    g.TW = (g.Wo + 3) / 4;
    g.T1 = g.TH * g.TW;
    g.Cb = (C + TMPI_WG_VL - 1) / TMPI_WG_VL;
    g.Ob = (O + TMPI_WG_VL - 1) / TMPI_WG_VL;
    g.Hs = 4 * g.TH + 2;
    g.Ws = 4 * g.TW + 2;
    return g;
}

/* Images per chunk: the chunk's transformed input and output (or output gradient) fill about
   TMPI_WG_CHUNK_BYTES; at least one image. */
static inline int wg_chunk_images(const tmpi_wg_geom& g)
{
    const size_t per_image = (size_t)TMPI_WG_XI * g.T1 * (g.Cb + g.Ob) * TMPI_WG_VL * sizeof(float);
    size_t nb = TMPI_WG_CHUNK_BYTES / (per_image ? per_image : 1);
    if (nb < 1) nb = 1;
    if (nb > (size_t)g.N) nb = g.N;
    return (int)nb;
}

typedef int tmpi_vi __attribute__((vector_size(TMPI_WG_VL * sizeof(int))));

/* r[i][j] <-> r[j][i] for VL vectors of VL lanes: log2(VL) rounds of two-source shuffles, round `bit` swapping
   the lanes whose row and column differ in that bit. */
static inline void wg_transpose(tmpi_vf r[TMPI_WG_VL])
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

/* ---- filter transforms ---- */

/* U[xi][c][o] (c < Cin rows of Opad = Ob*VL floats, lanes past Cout zero) = (G g G^T)[xi] for the filter g
   joining input channel c to output channel o: w[o][c] when not `swap`, else w[c][o] rotated by 180 degrees
   (the input gradient's filters). w is Cout x Cin x 3 x 3 (or, swapped, Cin x Cout x 3 x 3). */
TMPI_WG_NOINLINE static void wg_filter_transform(const float* w, int Cin, int Cout, int swap, float* U)
{
    const int Ob = (Cout + TMPI_WG_VL - 1) / TMPI_WG_VL;
    const size_t ld = (size_t)Ob * TMPI_WG_VL, xs = (size_t)Cin * ld;
    for (int c = 0; c < Cin; ++c) {
        for (int ob = 0; ob < Ob; ++ob) {
            float taps[9][TMPI_WG_VL] __attribute__((aligned(64)));
            for (int l = 0; l < TMPI_WG_VL; ++l) {
                const int o = ob * TMPI_WG_VL + l;
                for (int k = 0; k < 9; ++k) {
                    float v = 0.0f;
                    if (o < Cout) v = swap ? w[((size_t)c * Cout + o) * 9 + 8 - k] : w[((size_t)o * Cin + c) * 9 + k];
                    taps[k][l] = v;
                }
            }
            tmpi_vf t[6][3];
            for (int j = 0; j < 3; ++j) {
                tmpi_vf g[3], u[6];
                for (int i = 0; i < 3; ++i) g[i] = wg_load(taps[i * 3 + j]);
                wg_g(g, u);
                for (int i = 0; i < 6; ++i) t[i][j] = u[i];
            }
            for (int i = 0; i < 6; ++i) {
                tmpi_vf u[6];
                wg_g(t[i], u);
                for (int j = 0; j < 6; ++j) wg_store(U + (i * 6 + j) * xs + c * ld + ob * TMPI_WG_VL, u[j]);
            }
        }
    }
}

/* dw[o][c] (O x C x 3 x 3) = G^T dU[.][c][o] G, dU laid out as U (C rows of Ob*VL floats per xi). */
TMPI_WG_NOINLINE static void wg_filter_grad_transform(const float* dU, int C, int O, float* dw)
{
    const int Ob = (O + TMPI_WG_VL - 1) / TMPI_WG_VL;
    const size_t ld = (size_t)Ob * TMPI_WG_VL, xs = (size_t)C * ld;
    for (int c = 0; c < C; ++c) {
        for (int ob = 0; ob < Ob; ++ob) {
            tmpi_vf t[3][6];
            for (int j = 0; j < 6; ++j) {
                tmpi_vf u[6], g[3];
                for (int i = 0; i < 6; ++i) u[i] = wg_load(dU + (i * 6 + j) * xs + c * ld + ob * TMPI_WG_VL);
                wg_gt(u, g);
                for (int i = 0; i < 3; ++i) t[i][j] = g[i];
            }
            float taps[9][TMPI_WG_VL] __attribute__((aligned(64)));
            for (int i = 0; i < 3; ++i) {
                tmpi_vf g[3];
                wg_gt(t[i], g);
                for (int j = 0; j < 3; ++j) wg_store(taps[i * 3 + j], g[j]);
            }
            for (int l = 0; l < TMPI_WG_VL && ob * TMPI_WG_VL + l < O; ++l)
                for (int k = 0; k < 9; ++k) dw[((size_t)(ob * TMPI_WG_VL + l) * C + c) * 9 + k] = taps[k][l];
        }
    }
}

/* ---- the chunk loops ---- */

static inline int wg_threads(int nchunks)
{
    const int t = omp_get_max_threads();
    return t > 1 && nchunks > 1 ? (t < nchunks ? t : nchunks) : 1;
}

/* V[xi * vs + t * Cpad + c] for the tiles of images n0 .. n0+m of x (N x C x H x W), through the scratch xs. */
TMPI_WG_NOINLINE static void wg_input_chunk(const float* x, const tmpi_wg_geom& g, int n0, int m, float* xs, float* V, size_t vs)
{
    const size_t ld = (size_t)g.Cb * TMPI_WG_VL, plane = (size_t)g.Hs * g.Ws * TMPI_WG_VL;
    const size_t row = (size_t)g.Ws * TMPI_WG_VL;
    for (int i = 0; i < m; ++i) {
        wg_block_image(x + (size_t)(n0 + i) * g.C * g.H * g.W, g.C, g.H, g.W, xs, g.Hs, g.Ws, g.ph, g.pw);
        for (int ty = 0; ty < g.TH; ++ty)
            for (int tx = 0; tx < g.TW; ++tx) {
                const size_t t = (size_t)i * g.T1 + ty * g.TW + tx;
                for (int cb = 0; cb < g.Cb; ++cb)
                    wg_input_tile(xs + cb * plane + (size_t)4 * ty * row + (size_t)4 * tx * TMPI_WG_VL, row,
                                  V + t * ld + cb * TMPI_WG_VL, vs);
            }
    }
}

/* y = conv(x, filters transformed into U) + bias for x N x C x H x W, y N x O x Ho x Wo. 0, or -1 when
   memory ran out. */
TMPI_WG_NOINLINE static int tmpi_wg_conv(const float* x, const float* U, const float* bias, float* y, const tmpi_wg_geom& g)
{
    const int nb = wg_chunk_images(g), nchunks = (g.N + nb - 1) / nb, threads = wg_threads(nchunks);
    const size_t ci = (size_t)g.Cb * TMPI_WG_VL, co = (size_t)g.Ob * TMPI_WG_VL, Tmax = (size_t)nb * g.T1;
    float* bpad = NULL;
    if (bias) {
        bpad = wg_alloc(co, 1);
        if (!bpad) return -1;
        memcpy(bpad, bias, sizeof(float) * g.O);
    }
    int failed = 0;
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float* xs = wg_alloc((size_t)g.Cb * g.Hs * g.Ws * TMPI_WG_VL, 1);
        float* ys = wg_alloc((size_t)g.Ob * 4 * g.TH * 4 * g.TW * TMPI_WG_VL, 0);
        float* V = wg_alloc(TMPI_WG_XI * wg_plane_stride(Tmax * ci), 0);
        float* M = wg_alloc(TMPI_WG_XI * wg_plane_stride(Tmax * co), 0);
        const int ok = xs && ys && V && M;
        if (!ok) {
            #pragma omp atomic write
            failed = 1;
        }
        const size_t row = (size_t)4 * g.TW * TMPI_WG_VL, plane = (size_t)4 * g.TH * row;
        #pragma omp for schedule(static)
        for (int chunk = 0; chunk < nchunks; ++chunk) {
            if (!ok) continue;
            const int n0 = chunk * nb, m = g.N - n0 < nb ? g.N - n0 : nb;
            const size_t T = (size_t)m * g.T1, vs = wg_plane_stride(T * ci), ms = wg_plane_stride(T * co);
            wg_input_chunk(x, g, n0, m, xs, V, vs);
            for (int xi = 0; xi < TMPI_WG_XI; ++xi)
                wg_gemm((int)T, g.Ob, V + xi * vs, ci, 1, U + xi * (size_t)g.C * co, co, g.C, M + xi * ms, co, 0);
            for (int i = 0; i < m; ++i) {
                for (int ty = 0; ty < g.TH; ++ty)
                    for (int tx = 0; tx < g.TW; ++tx) {
                        const size_t t = (size_t)i * g.T1 + ty * g.TW + tx;
                        for (int ob = 0; ob < g.Ob; ++ob)
                            wg_output_tile(M + t * co + ob * TMPI_WG_VL, ms,
                                           bpad ? bpad + ob * TMPI_WG_VL : NULL,
                                           ys + ob * plane + (size_t)4 * ty * row + (size_t)4 * tx * TMPI_WG_VL, row);
                    }
                wg_unblock_image(ys, 4 * g.TH, 4 * g.TW, y + (size_t)(n0 + i) * g.O * g.Ho * g.Wo, g.O, g.Ho, g.Wo);
            }
        }
        free(xs);
        free(ys);
        free(V);
        free(M);
    }
    free(bpad);
    return failed ? -1 : 0;
}

/* out = conv2d(x, w) (+ bias) for x N x C x H x W, w O x C x 3 x 3, stride 1, padding (ph, pw). */
static int tmpi_wg_forward(const float* x, const float* w, const float* bias, float* out, int N, int C, int H,
                           int W, int O, int ph, int pw)
{
    const tmpi_wg_geom g = wg_geom(N, C, H, W, O, ph, pw);
    float* U = wg_alloc((size_t)TMPI_WG_XI * C * g.Ob * TMPI_WG_VL, 1);
    if (!U) return -1;
    wg_filter_transform(w, C, O, 0, U);
    const int rc = tmpi_wg_conv(x, U, bias, out, g);
    free(U);
    return rc;
}

/* dx = d conv2d(x, w) / dx contracted with gy: the convolution of gy (N x O x Ho x Wo) with w's filters
   rotated and its channels swapped, padding 2 - (ph, pw); dx is N x C x (Ho + 2 - 2 ph) x (Wo + 2 - 2 pw). */
static int tmpi_wg_grad_inputs(const float* w, const float* gy, float* dx, int N, int C, int O, int Ho, int Wo,
                               int ph, int pw)
{
    const tmpi_wg_geom g = wg_geom(N, O, Ho, Wo, C, 2 - ph, 2 - pw);
    float* U = wg_alloc((size_t)TMPI_WG_XI * O * g.Ob * TMPI_WG_VL, 1);
    if (!U) return -1;
    wg_filter_transform(w, O, C, 1, U);
    const int rc = tmpi_wg_conv(gy, U, NULL, dx, g);
    free(U);
    return rc;
}

/* dw (O x C x 3 x 3) = d conv2d(x, w) / dw contracted with gy (N x O x Ho x Wo), x N x C x H x W. */
static int tmpi_wg_grad_weights(const float* x, const float* gy, float* dw, int N, int C, int H, int W, int O,
                                int ph, int pw)
{
    const tmpi_wg_geom g = wg_geom(N, C, H, W, O, ph, pw);
    const int nb = wg_chunk_images(g), nchunks = (g.N + nb - 1) / nb, threads = wg_threads(nchunks);
    const size_t ci = (size_t)g.Cb * TMPI_WG_VL, co = (size_t)g.Ob * TMPI_WG_VL, Tmax = (size_t)nb * g.T1;
    const size_t usize = (size_t)TMPI_WG_XI * C * co;
    /* one dU per thread, summed at the end */
    float* dU = wg_alloc(usize * threads, 1);
    if (!dU) return -1;
    int failed = 0;
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float* xs = wg_alloc((size_t)g.Cb * g.Hs * g.Ws * TMPI_WG_VL, 1);
        float* gs = wg_alloc((size_t)g.Ob * 4 * g.TH * 4 * g.TW * TMPI_WG_VL, 1);
        float* V = wg_alloc(TMPI_WG_XI * wg_plane_stride(Tmax * ci), 0);
        float* Z = wg_alloc(TMPI_WG_XI * wg_plane_stride(Tmax * co), 0);
        const int ok = xs && gs && V && Z;
        if (!ok) {
            #pragma omp atomic write
            failed = 1;
        }
        float* mine = dU + usize * omp_get_thread_num();
        const size_t row = (size_t)4 * g.TW * TMPI_WG_VL, plane = (size_t)4 * g.TH * row;
        #pragma omp for schedule(static)
        for (int chunk = 0; chunk < nchunks; ++chunk) {
            if (!ok) continue;
            const int n0 = chunk * nb, m = g.N - n0 < nb ? g.N - n0 : nb;
            const size_t T = (size_t)m * g.T1, vs = wg_plane_stride(T * ci), zs = wg_plane_stride(T * co);
            wg_input_chunk(x, g, n0, m, xs, V, vs);
            for (int i = 0; i < m; ++i) {
                wg_block_image(gy + (size_t)(n0 + i) * g.O * g.Ho * g.Wo, g.O, g.Ho, g.Wo, gs, 4 * g.TH, 4 * g.TW,
                               0, 0);
                for (int ty = 0; ty < g.TH; ++ty)
                    for (int tx = 0; tx < g.TW; ++tx) {
                        const size_t t = (size_t)i * g.T1 + ty * g.TW + tx;
                        for (int ob = 0; ob < g.Ob; ++ob)
                            wg_grad_output_tile(gs + ob * plane + (size_t)4 * ty * row + (size_t)4 * tx * TMPI_WG_VL,
                                                row, Z + t * co + ob * TMPI_WG_VL, zs);
                    }
            }
            for (int xi = 0; xi < TMPI_WG_XI; ++xi)
                wg_gemm(g.C, g.Ob, V + xi * vs, 1, ci, Z + xi * zs, co, (int)T, mine + xi * (size_t)g.C * co, co, 1);
        }
        free(xs);
        free(gs);
        free(V);
        free(Z);
    }
    for (int t = 1; t < threads; ++t) {
        const float* part = dU + usize * t;
        for (size_t e = 0; e < usize; ++e) dU[e] += part[e];
    }
    if (!failed) wg_filter_grad_transform(dU, C, O, dw);
    free(dU);
    return failed ? -1 : 0;
}

#endif
