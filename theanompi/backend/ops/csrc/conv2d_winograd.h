/* Winograd convolution for float32 (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016):
   3x3 filters, stride 1 or 2, padding up to 2, NCHW in and out. No Python API in here.

   Stride 1, F(4x4, 3x3): each 4x4 block ("tile") of outputs comes from a 6x6 block of the padded input,
       Y = A^T [ (G g G^T) (.) (B^T d B) ] A
   with (.) the elementwise product of two 6x6 matrices, so 36 multiplications per channel pair and tile
   replace the 144 of a direct convolution. Summed over input channels, the products become independent
   GEMMs, one per position xi of the 6x6 matrices:
       M[xi][tile][o] = sum_c V[xi][tile][c] * U[xi][c][o]

   Stride 2, four phases and F(4x4, 2x2): with xp the padded input and its phases
   P[q][r][i][j] = xp[2i + q][2j + r] (q, r in {0, 1}), a 3x3 stride-2 convolution is a 2x2 stride-1
   convolution over 4C channels, the phases, whose filters hold the taps of each phase (phase 0 of a dimension
   takes taps 0 and 2 of the 3x3 filter, phase 1 tap 1 and a zero). F(4x4, 2x2) (a 5x5 domain) does it with
   4 x 25 multiplications per channel pair and 16 outputs, against 9 x 16 directly.

   The passes of a training step:
   - forward:       y  = conv(x, W), the GEMMs above, then the output transform A^T M A;
   - input grad:    dx = conv(gy, W') with W' the filters rotated by 180 degrees and in/out channels swapped,
                    padding 2 - pad (stride 1 only: for stride 2 the gradient of the phases needs more tiles
                    than there are outputs, and the im2col path is faster);
   - weight grad:   dU[xi][c][o] = sum over tiles of V[xi][tile][c] * Z[xi][tile][o], with V the input
                    transform of x and Z = A gy A^T the transform of gy's tiles; then dW = G^T dU G (the
                    adjoint of U = G W G^T).
   The transforms are exact in real arithmetic; in float32 they cost about one more significant digit than
   the direct sum (measured by the tests and in docs/performance.md).

   Layout (conv2d_vec.h): vectors run over channels, so every transform works on whole vectors. An image is
   first copied into a channel-blocked scratch ([C/VL][Hs][Ws][VL], zero border: the padding and the rows and
   columns past the last whole tile), and the output transform writes into the same layout, copied out to
   NCHW. Images are processed in chunks whose transformed data stays in the L2 cache; the chunks go to OpenMP
   threads. */
#ifndef TMPI_CONV2D_WINOGRAD_H
#define TMPI_CONV2D_WINOGRAD_H

/* Bytes of transformed data (V and M, or V and Z) per chunk of images. */
#ifndef TMPI_WG_CHUNK_BYTES
#define TMPI_WG_CHUNK_BYTES (384 << 10)
#endif

/* ---- the one-dimensional transforms of F(M, R) over an A = M + R - 1 domain: input bt (A -> A), output
   at (A -> M), output gradient a (M -> A, the adjoint of at), filter g (R -> A), filter gradient gt (A -> R,
   the adjoint of g) ---- */

/* F(4, 3), the points 0, 1, -1, 2, -2 and infinity */
struct tmpi_wg_f43 {
    enum { M = 4, R = 3, A = 6 };

    static inline void bt(const tmpi_vf d[6], tmpi_vf t[6])
    {
        const tmpi_vf p = d[4] - d[2], q = d[3] - d[1];
        t[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
        t[1] = (d[3] + d[4]) - 4.0f * (d[1] + d[2]);
        t[2] = (d[4] - d[3]) + 4.0f * (d[1] - d[2]);
        t[3] = p + 2.0f * q;
        t[4] = p - 2.0f * q;
        t[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
    }

    static inline void at(const tmpi_vf m[6], tmpi_vf y[4])
    {
        const tmpi_vf a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], d = m[3] - m[4];
        y[0] = m[0] + a + c;
        y[1] = b + 2.0f * d;
        y[2] = a + 4.0f * c;
        y[3] = b + 8.0f * d + m[5];
    }

    static inline void a(const tmpi_vf y[4], tmpi_vf z[6])
    {
        const tmpi_vf e = y[0] + y[2], o = y[1] + y[3], e4 = y[0] + 4.0f * y[2], o2 = 2.0f * y[1] + 8.0f * y[3];
        z[0] = y[0];
        z[1] = e + o;
        z[2] = e - o;
        z[3] = e4 + o2;
        z[4] = e4 - o2;
        z[5] = y[3];
    }

    static inline void g(const tmpi_vf w[3], tmpi_vf u[6])
    {
        const tmpi_vf s = w[0] + w[2], p = w[0] * (1.0f / 24) + w[2] * (1.0f / 6), h = w[1] * (1.0f / 12);
        u[0] = w[0] * 0.25f;
        u[1] = (s + w[1]) * (-1.0f / 6);
        u[2] = (s - w[1]) * (-1.0f / 6);
        u[3] = p + h;
        u[4] = p - h;
        u[5] = w[2];
    }

    static inline void gt(const tmpi_vf u[6], tmpi_vf w[3])
    {
        const tmpi_vf s12 = u[1] + u[2], s34 = u[3] + u[4];
        w[0] = u[0] * 0.25f - s12 * (1.0f / 6) + s34 * (1.0f / 24);
        w[1] = (u[2] - u[1]) * (1.0f / 6) + (u[3] - u[4]) * (1.0f / 12);
        w[2] = (s34 - s12) * (1.0f / 6) + u[5];
    }
};

/* F(4, 2), the points 0, 1, -1, 2 and infinity */
struct tmpi_wg_f42 {
    enum { M = 4, R = 2, A = 5 };

    static inline void bt(const tmpi_vf d[5], tmpi_vf t[5])
    {
        const tmpi_vf s = d[3] - d[1];
        t[0] = 2.0f * (d[0] - d[2]) + s;
        t[1] = d[3] - 2.0f * d[1] - d[2];
        t[2] = 2.0f * d[1] - 3.0f * d[2] + d[3];
        t[3] = s;
        t[4] = 2.0f * (d[1] - d[3]) - d[2] + d[4];
    }

    static inline void at(const tmpi_vf m[5], tmpi_vf y[4])
    {
        const tmpi_vf a = m[1] + m[2], b = m[1] - m[2];
        y[0] = m[0] + a + m[3];
        y[1] = b + 2.0f * m[3];
        y[2] = a + 4.0f * m[3];
        y[3] = b + 8.0f * m[3] + m[4];
    }

    static inline void a(const tmpi_vf y[4], tmpi_vf z[5])
    {
        const tmpi_vf e = y[0] + y[2], o = y[1] + y[3];
        z[0] = y[0];
        z[1] = e + o;
        z[2] = e - o;
        z[3] = y[0] + 2.0f * y[1] + 4.0f * y[2] + 8.0f * y[3];
        z[4] = y[3];
    }

    static inline void g(const tmpi_vf w[2], tmpi_vf u[5])
    {
        u[0] = w[0] * 0.5f;
        u[1] = (w[0] + w[1]) * -0.5f;
        u[2] = (w[1] - w[0]) * (1.0f / 6);
        u[3] = w[0] * (1.0f / 6) + w[1] * (1.0f / 3);
        u[4] = w[1];
    }

    static inline void gt(const tmpi_vf u[5], tmpi_vf w[2])
    {
        w[0] = (u[0] - u[1]) * 0.5f + (u[3] - u[2]) * (1.0f / 6);
        w[1] = u[1] * -0.5f + u[2] * (1.0f / 6) + u[3] * (1.0f / 3) + u[4];
    }
};

/* ---- two-dimensional tile transforms on channel vectors (columns VL floats apart, rows `row` apart) ---- */

/* v[xi * vs] = (B^T d B)[xi] for the A x A block d at src. */
template <class F>
static inline void wg_input_tile(const float* src, size_t row, float* v, size_t vs)
{
    tmpi_vf t[F::A][F::A];
    for (int j = 0; j < F::A; ++j) {
        tmpi_vf d[F::A], c[F::A];
        for (int i = 0; i < F::A; ++i) d[i] = wg_load(src + i * row + j * TMPI_WG_VL);
        F::bt(d, c);
        for (int i = 0; i < F::A; ++i) t[i][j] = c[i];
    }
    for (int i = 0; i < F::A; ++i) {
        tmpi_vf r[F::A];
        F::bt(t[i], r);
        for (int j = 0; j < F::A; ++j) wg_store(v + (size_t)(i * F::A + j) * vs, r[j]);
    }
}

/* The M x M block at dst = A^T m A (+ bias) for m[xi * ms]. */
template <class F>
static inline void wg_output_tile(const float* m, size_t ms, const float* bias, float* dst, size_t row)
{
    tmpi_vf t[F::A][F::M];
    for (int i = 0; i < F::A; ++i) {
        tmpi_vf r[F::A], y[F::M];
        for (int j = 0; j < F::A; ++j) r[j] = wg_load(m + (size_t)(i * F::A + j) * ms);
        F::at(r, y);
        for (int j = 0; j < F::M; ++j) t[i][j] = y[j];
    }
    const tmpi_vf b = bias ? wg_load(bias) : (tmpi_vf){};
    for (int j = 0; j < F::M; ++j) {
        tmpi_vf c[F::A], y[F::M];
        for (int i = 0; i < F::A; ++i) c[i] = t[i][j];
        F::at(c, y);
        for (int i = 0; i < F::M; ++i) wg_store(dst + i * row + j * TMPI_WG_VL, y[i] + b);
    }
}

/* z[xi * zs] = (A y A^T)[xi] for the M x M block y at src. */
template <class F>
static inline void wg_grad_output_tile(const float* src, size_t row, float* z, size_t zs)
{
    tmpi_vf t[F::A][F::M];
    for (int j = 0; j < F::M; ++j) {
        tmpi_vf y[F::M], c[F::A];
        for (int i = 0; i < F::M; ++i) y[i] = wg_load(src + i * row + j * TMPI_WG_VL);
        F::a(y, c);
        for (int i = 0; i < F::A; ++i) t[i][j] = c[i];
    }
    for (int i = 0; i < F::A; ++i) {
        tmpi_vf r[F::A];
        F::a(t[i], r);
        for (int j = 0; j < F::A; ++j) wg_store(z + (size_t)(i * F::A + j) * zs, r[j]);
    }
}

/* ---- filter transforms ---- */

/* U[xi][c][o] (Cin rows of Ob*VL floats per xi, lanes past Cout zero) = (G g G^T)[xi] for the R x R filter g
   joining input channel c to output channel o: w[o][c] when not `swap`, else w[c][o] rotated by 180 degrees
   (the input gradient's filters). w is Cout x Cin x R x R (or, swapped, Cin x Cout x R x R). */
template <class F>
TMPI_WG_NOINLINE static void wg_filter_transform(const float* w, int Cin, int Cout, int swap, float* U)
{
    enum { K = F::R * F::R };
    const int Ob = (Cout + TMPI_WG_VL - 1) / TMPI_WG_VL;
    const size_t ld = (size_t)Ob * TMPI_WG_VL, xs = (size_t)Cin * ld;
    for (int c = 0; c < Cin; ++c) {
        for (int ob = 0; ob < Ob; ++ob) {
            float taps[K][TMPI_WG_VL] __attribute__((aligned(64)));
            for (int l = 0; l < TMPI_WG_VL; ++l) {
                const int o = ob * TMPI_WG_VL + l;
                for (int k = 0; k < K; ++k) {
                    float v = 0.0f;
                    if (o < Cout) v = swap ? w[((size_t)c * Cout + o) * K + K - 1 - k] : w[((size_t)o * Cin + c) * K + k];
                    taps[k][l] = v;
                }
            }
            tmpi_vf t[F::A][F::R];
            for (int j = 0; j < F::R; ++j) {
                tmpi_vf g[F::R], u[F::A];
                for (int i = 0; i < F::R; ++i) g[i] = wg_load(taps[i * F::R + j]);
                F::g(g, u);
                for (int i = 0; i < F::A; ++i) t[i][j] = u[i];
            }
            for (int i = 0; i < F::A; ++i) {
                tmpi_vf u[F::A];
                F::g(t[i], u);
                for (int j = 0; j < F::A; ++j) wg_store(U + (i * F::A + j) * xs + c * ld + ob * TMPI_WG_VL, u[j]);
            }
        }
    }
}

/* dw[o][c] (O x C x R x R) = G^T dU[.][c][o] G, dU laid out as U. */
template <class F>
TMPI_WG_NOINLINE static void wg_filter_grad_transform(const float* dU, int C, int O, float* dw)
{
    enum { K = F::R * F::R };
    const int Ob = (O + TMPI_WG_VL - 1) / TMPI_WG_VL;
    const size_t ld = (size_t)Ob * TMPI_WG_VL, xs = (size_t)C * ld;
    for (int c = 0; c < C; ++c) {
        for (int ob = 0; ob < Ob; ++ob) {
            tmpi_vf t[F::R][F::A];
            for (int j = 0; j < F::A; ++j) {
                tmpi_vf u[F::A], g[F::R];
                for (int i = 0; i < F::A; ++i) u[i] = wg_load(dU + (i * F::A + j) * xs + c * ld + ob * TMPI_WG_VL);
                F::gt(u, g);
                for (int i = 0; i < F::R; ++i) t[i][j] = g[i];
            }
            float taps[K][TMPI_WG_VL] __attribute__((aligned(64)));
            for (int i = 0; i < F::R; ++i) {
                tmpi_vf g[F::R];
                F::gt(t[i], g);
                for (int j = 0; j < F::R; ++j) wg_store(taps[i * F::R + j], g[j]);
            }
            for (int l = 0; l < TMPI_WG_VL && ob * TMPI_WG_VL + l < O; ++l)
                for (int k = 0; k < K; ++k) dw[((size_t)(ob * TMPI_WG_VL + l) * C + c) * K + k] = taps[k][l];
        }
    }
}

/* ---- geometry, sources, chunks ---- */

struct tmpi_wg_geom {
    int N, C, H, W, O, ph, pw;  /* input N x C x H x W, O output channels, padding */
    int Ho, Wo, TH, TW, T1;     /* output size, tiles per column / row / image */
    int Cb, Ob;                 /* channel blocks of VL */
    int Hs, Ws;                 /* the padded scratch image: M*TH + R - 1 x M*TW + R - 1 */
};

template <class F>
static inline tmpi_wg_geom wg_geom(int N, int C, int H, int W, int O, int ph, int pw)
{
    tmpi_wg_geom g;
    g.N = N; g.C = C; g.H = H; g.W = W; g.O = O; g.ph = ph; g.pw = pw;
    g.Ho = H + 2 * ph - (F::R - 1);
    g.Wo = W + 2 * pw - (F::R - 1);
    g.TH = (g.Ho + F::M - 1) / F::M;
    g.TW = (g.Wo + F::M - 1) / F::M;
    g.T1 = g.TH * g.TW;
    g.Cb = (C + TMPI_WG_VL - 1) / TMPI_WG_VL;
    g.Ob = (O + TMPI_WG_VL - 1) / TMPI_WG_VL;
    g.Hs = F::M * g.TH + F::R - 1;
    g.Ws = F::M * g.TW + F::R - 1;
    return g;
}

/* Images per chunk: the chunk's transformed input and output (or output gradient) fill about
   TMPI_WG_CHUNK_BYTES, and with several threads there are at least 4 chunks per thread where the batch
   allows (the threads' shares stay even); at least one image. */
template <class F>
static inline int wg_chunk_images(const tmpi_wg_geom& g)
{
    const size_t per_image = (size_t)F::A * F::A * g.T1 * (g.Cb + g.Ob) * TMPI_WG_VL * sizeof(float);
    size_t nb = TMPI_WG_CHUNK_BYTES / (per_image ? per_image : 1);
    const size_t threads = omp_get_max_threads(), even = (size_t)g.N / (4 * threads);
    if (threads > 1 && even >= 1 && nb > even) nb = even;
    if (nb < 1) nb = 1;
    if (nb > (size_t)g.N) nb = g.N;
    return (int)nb;
}

static inline int wg_threads(int nchunks)
{
    const int t = omp_get_max_threads();
    return t > 1 && nchunks > 1 ? (t < nchunks ? t : nchunks) : 1;
}

/* Where a convolution's input images come from: N images of C x H x W, used as they are (phases 1), or split
   into the four phases of the image padded by (ph, pw) (phases 4: images of 4C channels, phase (q, r) of
   channel c being channel (2q + r)C + c, each ceil((H + 2 ph) / 2) x ceil((W + 2 pw) / 2)). */
struct tmpi_wg_source {
    const float* x;
    int C, H, W, ph, pw, phases;
};

/* The four phases of image x (C x H x W), padded by (ph, pw), into the channel-blocked scratch xs
   ([4C/VL][rows][cols][VL]): channel (2q + r)C + c at (i, j) is xpad[c][2i + q][2j + r]. Positions that hold
   padding are not written (the scratch's zeros). VL channels by VL columns at a time are transposed in
   registers and each column goes to its phase; the rest one value at a time. */
TMPI_WG_NOINLINE static void wg_block_phases(const float* __restrict x, int C, int H, int W, int ph, int pw,
                                             float* __restrict xs, int rows, int cols)
{
    const size_t plane = (size_t)H * W, block = (size_t)rows * cols * TMPI_WG_VL;
    /* the scratch address of channel c's value at (y, xx) */
    auto at = [&](int c, int y, int xx) {
        const int q = (y + ph) & 1, r = (xx + pw) & 1, cp = (2 * q + r) * C + c;
        return xs + (size_t)(cp / TMPI_WG_VL) * block + (((size_t)((y + ph) >> 1) * cols + ((xx + pw) >> 1)) *
                                                          TMPI_WG_VL) + cp % TMPI_WG_VL;
    };
    int c0 = 0;
    if (C % TMPI_WG_VL == 0) {
        for (; c0 < C; c0 += TMPI_WG_VL) {
            const float* src = x + (size_t)c0 * plane;
            for (int y = 0; y < H; ++y) {
                int xx = 0;
                for (; xx + TMPI_WG_VL <= W; xx += TMPI_WG_VL) {
                    tmpi_vf r[TMPI_WG_VL];
                    for (int l = 0; l < TMPI_WG_VL; ++l) r[l] = wg_loadu(src + l * plane + (size_t)y * W + xx);
                    wg_transpose(r);
                    /* columns xx, xx + 2, ... go to one phase, xx + 1, xx + 3, ... to the other */
                    float* even = at(c0, y, xx);
                    float* odd = at(c0, y, xx + 1);
                    for (int k = 0; k < TMPI_WG_VL; k += 2) {
                        wg_store(even + (k >> 1) * TMPI_WG_VL, r[k]);
                        wg_store(odd + (k >> 1) * TMPI_WG_VL, r[k + 1]);
                    }
                }
                for (; xx < W; ++xx)
                    for (int l = 0; l < TMPI_WG_VL; ++l) at(c0, y, xx)[l] = src[l * plane + (size_t)y * W + xx];
            }
        }
    }
    for (int c = c0; c < C; ++c)
        for (int y = 0; y < H; ++y)
            for (int xx = 0; xx < W; ++xx) *at(c, y, xx) = x[(c * plane) + (size_t)y * W + xx];
}

/* The blocked scratch xs of image n of the source. */
static void wg_load_image(const tmpi_wg_source& s, int n, const tmpi_wg_geom& g, float* xs)
{
    const float* x = s.x + (size_t)n * s.C * s.H * s.W;
    if (s.phases == 1)
        wg_block_image(x, s.C, s.H, s.W, xs, g.Hs, g.Ws, g.ph, g.pw);
    else
        wg_block_phases(x, s.C, s.H, s.W, s.ph, s.pw, xs, g.Hs, g.Ws);
}

/* Per-thread scratch of the chunk loops. */
struct tmpi_wg_scratch {
    float *xs, *V, *out, *M;
    int init(const tmpi_wg_geom& g, int M_, size_t Tmax, size_t xi_count)
    {
        const size_t ci = (size_t)g.Cb * TMPI_WG_VL, co = (size_t)g.Ob * TMPI_WG_VL;
        xs = wg_alloc((size_t)g.Cb * g.Hs * g.Ws * TMPI_WG_VL, 1);
        V = wg_alloc(xi_count * wg_plane_stride(Tmax * ci), 0);
        out = wg_alloc((size_t)g.Ob * M_ * g.TH * M_ * g.TW * TMPI_WG_VL, 1);
        M = wg_alloc(xi_count * wg_plane_stride(Tmax * co), 0);
        return xs && V && out && M ? 0 : -1;
    }
    void release() { free(xs); free(V); free(out); free(M); }
};

/* V[xi * vs + t * Cpad + c] for the tiles of images n0 .. n0+m of the source, through the scratch. */
template <class F>
TMPI_WG_NOINLINE static void wg_input_chunk(const tmpi_wg_source& s, const tmpi_wg_geom& g, int n0, int m,
                                            tmpi_wg_scratch& sc, size_t vs)
{
    const size_t ld = (size_t)g.Cb * TMPI_WG_VL, plane = (size_t)g.Hs * g.Ws * TMPI_WG_VL;
    const size_t row = (size_t)g.Ws * TMPI_WG_VL;
    for (int i = 0; i < m; ++i) {
        wg_load_image(s, n0 + i, g, sc.xs);
        for (int ty = 0; ty < g.TH; ++ty)
            for (int tx = 0; tx < g.TW; ++tx) {
                const size_t t = (size_t)i * g.T1 + ty * g.TW + tx;
                for (int cb = 0; cb < g.Cb; ++cb)
                    wg_input_tile<F>(sc.xs + cb * plane + (size_t)F::M * (ty * row + tx * TMPI_WG_VL), row,
                                     sc.V + t * ld + cb * TMPI_WG_VL, vs);
            }
    }
}

/* y = conv(source, filters transformed into U) + bias, y N x O x Ho x Wo (g: the geometry of the convolution
   the transforms see, its input the source's images or their phases). 0, or -1 when memory ran out. */
template <class F>
TMPI_WG_NOINLINE static int tmpi_wg_conv(const tmpi_wg_source& s, const float* U, const float* bias, float* y,
                                         const tmpi_wg_geom& g)
{
    enum { XI = F::A * F::A };
    const int nb = wg_chunk_images<F>(g), nchunks = (g.N + nb - 1) / nb, threads = wg_threads(nchunks);
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
        tmpi_wg_scratch sc;
        const int ok = sc.init(g, F::M, Tmax, XI) == 0;
        if (!ok) {
            #pragma omp atomic write
            failed = 1;
        }
        const size_t row = (size_t)F::M * g.TW * TMPI_WG_VL, plane = (size_t)F::M * g.TH * row;
        #pragma omp for schedule(static)
        for (int chunk = 0; chunk < nchunks; ++chunk) {
            if (!ok) continue;
            const int n0 = chunk * nb, m = g.N - n0 < nb ? g.N - n0 : nb;
            const size_t T = (size_t)m * g.T1, vs = wg_plane_stride(T * ci), ms = wg_plane_stride(T * co);
            wg_input_chunk<F>(s, g, n0, m, sc, vs);
            for (int xi = 0; xi < XI; ++xi)
                wg_gemm((int)T, g.Ob, sc.V + xi * vs, ci, 1, U + xi * (size_t)g.C * co, co, g.C, sc.M + xi * ms, co,
                        0);
            for (int i = 0; i < m; ++i) {
                for (int ty = 0; ty < g.TH; ++ty)
                    for (int tx = 0; tx < g.TW; ++tx) {
                        const size_t t = (size_t)i * g.T1 + ty * g.TW + tx;
                        for (int ob = 0; ob < g.Ob; ++ob)
                            wg_output_tile<F>(sc.M + t * co + ob * TMPI_WG_VL, ms, bpad ? bpad + ob * TMPI_WG_VL : NULL,
                                              sc.out + ob * plane + (size_t)F::M * (ty * row + tx * TMPI_WG_VL), row);
                    }
                wg_unblock_image(sc.out, F::M * g.TH, F::M * g.TW, y + (size_t)(n0 + i) * g.O * g.Ho * g.Wo, g.O, g.Ho,
                                 g.Wo);
            }
        }
        sc.release();
    }
    free(bpad);
    return failed ? -1 : 0;
}

/* dU (XI x C rows of Ob*VL floats, as U) = sum over the tiles of V[xi][tile][c] * Z[xi][tile][o] for the source
   and gy (N x O x Ho x Wo). 0, or -1 when memory ran out. */
template <class F>
TMPI_WG_NOINLINE static int tmpi_wg_filter_grad(const tmpi_wg_source& s, const float* gy, float* dU,
                                                const tmpi_wg_geom& g)
{
    enum { XI = F::A * F::A };
    const int nb = wg_chunk_images<F>(g), nchunks = (g.N + nb - 1) / nb, threads = wg_threads(nchunks);
    const size_t ci = (size_t)g.Cb * TMPI_WG_VL, co = (size_t)g.Ob * TMPI_WG_VL, Tmax = (size_t)nb * g.T1;
    const size_t usize = (size_t)XI * g.C * co;
    /* every thread but the first sums into its own dU, added at the end */
    float* partial = threads > 1 ? wg_alloc(usize * (threads - 1), 1) : NULL;
    if (threads > 1 && !partial) return -1;
    memset(dU, 0, sizeof(float) * usize);
    int failed = 0;
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        tmpi_wg_scratch sc;
        const int ok = sc.init(g, F::M, Tmax, XI) == 0;
        if (!ok) {
            #pragma omp atomic write
            failed = 1;
        }
        const int thread = omp_get_thread_num();
        float* mine = thread == 0 ? dU : partial + usize * (thread - 1);
        const size_t row = (size_t)F::M * g.TW * TMPI_WG_VL, plane = (size_t)F::M * g.TH * row;
        #pragma omp for schedule(static)
        for (int chunk = 0; chunk < nchunks; ++chunk) {
            if (!ok) continue;
            const int n0 = chunk * nb, m = g.N - n0 < nb ? g.N - n0 : nb;
            const size_t T = (size_t)m * g.T1, vs = wg_plane_stride(T * ci), zs = wg_plane_stride(T * co);
            wg_input_chunk<F>(s, g, n0, m, sc, vs);
            for (int i = 0; i < m; ++i) {
                wg_block_image(gy + (size_t)(n0 + i) * g.O * g.Ho * g.Wo, g.O, g.Ho, g.Wo, sc.out, F::M * g.TH,
                               F::M * g.TW, 0, 0);
                for (int ty = 0; ty < g.TH; ++ty)
                    for (int tx = 0; tx < g.TW; ++tx) {
                        const size_t t = (size_t)i * g.T1 + ty * g.TW + tx;
                        for (int ob = 0; ob < g.Ob; ++ob)
                            wg_grad_output_tile<F>(sc.out + ob * plane + (size_t)F::M * (ty * row + tx * TMPI_WG_VL),
                                                   row, sc.M + t * co + ob * TMPI_WG_VL, zs);
                    }
            }
            for (int xi = 0; xi < XI; ++xi)
                wg_gemm(g.C, g.Ob, sc.V + xi * vs, 1, ci, sc.M + xi * zs, co, (int)T, mine + xi * (size_t)g.C * co, co,
                        1);
        }
        sc.release();
    }
    for (int t = 1; t < threads; ++t) {
        const float* part = partial + usize * (t - 1);
        for (size_t e = 0; e < usize; ++e) dU[e] += part[e];
    }
    free(partial);
    return failed ? -1 : 0;
}

/* ---- stride 1: F(4x4, 3x3) ---- */

/* out = conv2d(x, w) (+ bias) for x N x C x H x W, w O x C x 3 x 3, stride 1, padding (ph, pw). */
static int tmpi_wg_forward(const float* x, const float* w, const float* bias, float* out, int N, int C, int H,
                           int W, int O, int ph, int pw)
{
    typedef tmpi_wg_f43 F;
    const tmpi_wg_geom g = wg_geom<F>(N, C, H, W, O, ph, pw);
    float* U = wg_alloc((size_t)F::A * F::A * C * g.Ob * TMPI_WG_VL, 1);
    if (!U) return -1;
    wg_filter_transform<F>(w, C, O, 0, U);
    const tmpi_wg_source s = {x, C, H, W, ph, pw, 1};
    const int rc = tmpi_wg_conv<F>(s, U, bias, out, g);
    free(U);
    return rc;
}

/* dx = d conv2d(x, w) / dx contracted with gy: the convolution of gy (N x O x Ho x Wo) with w's filters
   rotated and its channels swapped, padding 2 - (ph, pw); dx is N x C x (Ho + 2 - 2 ph) x (Wo + 2 - 2 pw). */
static int tmpi_wg_grad_inputs(const float* w, const float* gy, float* dx, int N, int C, int O, int Ho, int Wo,
                               int ph, int pw)
{
    typedef tmpi_wg_f43 F;
    const tmpi_wg_geom g = wg_geom<F>(N, O, Ho, Wo, C, 2 - ph, 2 - pw);
    float* U = wg_alloc((size_t)F::A * F::A * O * g.Ob * TMPI_WG_VL, 1);
    if (!U) return -1;
    wg_filter_transform<F>(w, O, C, 1, U);
    const tmpi_wg_source s = {gy, O, Ho, Wo, 2 - ph, 2 - pw, 1};
    const int rc = tmpi_wg_conv<F>(s, U, NULL, dx, g);
    free(U);
    return rc;
}

/* dw (O x C x 3 x 3) = d conv2d(x, w) / dw contracted with gy (N x O x Ho x Wo), x N x C x H x W. */
static int tmpi_wg_grad_weights(const float* x, const float* gy, float* dw, int N, int C, int H, int W, int O,
                                int ph, int pw)
{
    typedef tmpi_wg_f43 F;
    const tmpi_wg_geom g = wg_geom<F>(N, C, H, W, O, ph, pw);
    float* dU = wg_alloc((size_t)F::A * F::A * C * g.Ob * TMPI_WG_VL, 0);
    if (!dU) return -1;
    const tmpi_wg_source s = {x, C, H, W, ph, pw, 1};
    const int rc = tmpi_wg_filter_grad<F>(s, gy, dU, g);
    if (rc == 0) wg_filter_grad_transform<F>(dU, C, O, dw);
    free(dU);
    return rc;
}

/* ---- stride 2: four phases, F(4x4, 2x2) ---- */

/* The 3x3 tap of phase q (0 or 1) and offset d (0 or 1) in one dimension, or -1 (a zero weight). */
static inline int wg_phase_tap(int q, int d) { return q == 0 ? 2 * d : (d == 0 ? 1 : -1); }

/* The phase filters: k[o][(2q + r)C + c][da][db] = w[o][c][tap(q, da)][tap(r, db)] (0 where a tap is -1). */
static void wg_phase_filters(const float* w, int C, int O, float* k)
{
    for (int o = 0; o < O; ++o)
        for (int q = 0; q < 2; ++q)
            for (int r = 0; r < 2; ++r)
                for (int c = 0; c < C; ++c)
                    for (int da = 0; da < 2; ++da)
                        for (int db = 0; db < 2; ++db) {
                            const int a = wg_phase_tap(q, da), b = wg_phase_tap(r, db);
                            k[((((size_t)o * 4 + 2 * q + r) * C + c) * 2 + da) * 2 + db] =
                                a < 0 || b < 0 ? 0.0f : w[(((size_t)o * C + c) * 3 + a) * 3 + b];
                        }
}

/* The phase images' geometry of a stride-2 convolution of C x H x W images padded by (ph, pw). */
static inline tmpi_wg_geom wg_phase_geom(int N, int C, int H, int W, int O, int ph, int pw)
{
    return wg_geom<tmpi_wg_f42>(N, 4 * C, (H + 2 * ph + 1) / 2, (W + 2 * pw + 1) / 2, O, 0, 0);
}

/* out = conv2d(x, w, stride 2) (+ bias) for x N x C x H x W, w O x C x 3 x 3, padding (ph, pw). */
static int tmpi_wg_forward_s2(const float* x, const float* w, const float* bias, float* out, int N, int C, int H,
                              int W, int O, int ph, int pw)
{
    typedef tmpi_wg_f42 F;
    const tmpi_wg_geom g = wg_phase_geom(N, C, H, W, O, ph, pw);
    float* k = wg_alloc((size_t)O * 4 * C * 4, 0);
    float* U = wg_alloc((size_t)F::A * F::A * g.C * g.Ob * TMPI_WG_VL, 1);
    int rc = -1;
    if (k && U) {
        wg_phase_filters(w, C, O, k);
        wg_filter_transform<F>(k, g.C, O, 0, U);
        const tmpi_wg_source s = {x, C, H, W, ph, pw, 4};
        rc = tmpi_wg_conv<F>(s, U, bias, out, g);
    }
    free(k);
    free(U);
    return rc;
}

/* dw (O x C x 3 x 3) = d conv2d(x, w, stride 2) / dw contracted with gy (N x O x Ho x Wo): the phase
   filters' gradient, the taps that are weights gathered back. */
static int tmpi_wg_grad_weights_s2(const float* x, const float* gy, float* dw, int N, int C, int H, int W, int O,
                                   int ph, int pw)
{
    typedef tmpi_wg_f42 F;
    const tmpi_wg_geom g = wg_phase_geom(N, C, H, W, O, ph, pw);
    float* dU = wg_alloc((size_t)F::A * F::A * g.C * g.Ob * TMPI_WG_VL, 0);
    float* dk = wg_alloc((size_t)O * 4 * C * 4, 0);
    int rc = -1;
    if (dU && dk) {
        const tmpi_wg_source s = {x, C, H, W, ph, pw, 4};
        rc = tmpi_wg_filter_grad<F>(s, gy, dU, g);
        if (rc == 0) {
            wg_filter_grad_transform<F>(dU, g.C, O, dk);
            for (int o = 0; o < O; ++o)
                for (int c = 0; c < C; ++c)
                    for (int a = 0; a < 3; ++a)
                        for (int b = 0; b < 3; ++b) {
                            const int q = a & 1, r = b & 1, da = a >> 1, db = b >> 1;
                            dw[(((size_t)o * C + c) * 3 + a) * 3 + b] =
                                dk[((((size_t)o * 4 + 2 * q + r) * C + c) * 2 + da) * 2 + db];
                        }
        }
    }
    free(dU);
    free(dk);
    return rc;
}

#endif
