#include <string.h>
#include <stdlib.h>
#include <omp.h>

/* Row-major C(m x n) = alpha * op(A)(m x k) * op(B)(k x n) + beta * C. */
static inline void tmpi_gemm(char ta, char tb, int m, int n, int k, float alpha,
                             const float* a, int lda, const float* b, int ldb,
                             float beta, float* c, int ldc)
{
    sgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

static inline void tmpi_gemm(char ta, char tb, int m, int n, int k, double alpha,
                             const double* a, int lda, const double* b, int ldb,
                             double beta, double* c, int ldc)
{
    dgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

/* Row-major C (m x n) = op(A) (m x k) * B (k x n), op(A) = A ('N', lda apart) or A^T ('T': A is k x m). float32
   on the vector kernel of conv2d_vec.h (faster than BLAS on these shapes: no packing, B and C rows are
   vectors) when n is a multiple of its vector width and the caller runs on a thread of its own (BLAS would
   use several); otherwise, and for float64, BLAS. */
static inline void tmpi_gemm_ab(char ta, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                                float* c, int ldc, int own_thread)
{
    if (own_thread && n % TMPI_WG_VL == 0) {
        if (ta == 'N') wg_gemm(m, n / TMPI_WG_VL, a, lda, 1, b, ldb, k, c, ldc, 0);
        else wg_gemm(m, n / TMPI_WG_VL, a, 1, lda, b, ldb, k, c, ldc, 0);
        return;
    }
    tmpi_gemm(ta, 'N', m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

static inline void tmpi_gemm_ab(char ta, int m, int n, int k, const double* a, int lda, const double* b, int ldb,
                                double* c, int ldc, int)
{
    tmpi_gemm(ta, 'N', m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}

struct tmpi_geom {
    int N, C, H, W, O, kh, kw, sh, sw, ph, pw, Ho, Wo;
};

/* Bytes of column buffer per GEMM: images are processed in chunks of
   nb = budget / (C*kh*kw*Ho*Wo*sizeof(T)) so small layers still get wide GEMMs
   while the buffer stays cache-resident. */
#ifndef TMPI_COLS_BUDGET
#define TMPI_COLS_BUDGET (1 << 20)
#endif

/* One zero-bordered image (C x Hp x Wp) so that im2col/col2im need no bounds
   checks. The border is zeroed once; only the interior changes per image. */
template <typename T>
struct tmpi_padded {
    T* buf;
    int Hp, Wp;
    int init(const tmpi_geom& g)
    {
        Hp = g.H + 2 * g.ph;
        Wp = g.W + 2 * g.pw;
        buf = (T*)calloc((size_t)g.C * Hp * Wp, sizeof(T));
        return buf ? 0 : -1;
    }
    /* Copy image x (C x H x W) into the interior. */
    void load(const T* __restrict x, const tmpi_geom& g)
    {
        for (int c = 0; c < g.C; ++c)
            for (int h = 0; h < g.H; ++h)
                memcpy(buf + ((size_t)c * Hp + h + g.ph) * Wp + g.pw,
                       x + ((size_t)c * g.H + h) * g.W, sizeof(T) * g.W);
    }
    /* Copy the interior out to dx (C x H x W), dropping the border. */
    void store(T* __restrict dx, const tmpi_geom& g) const
    {
        for (int c = 0; c < g.C; ++c)
            for (int h = 0; h < g.H; ++h)
                memcpy(dx + ((size_t)c * g.H + h) * g.W,
                       buf + ((size_t)c * Hp + h + g.ph) * Wp + g.pw, sizeof(T) * g.W);
    }
};

/* cols[(c*kh + i)*kw + j][oh*Wo + ow] = xp[c][oh*sh + i][ow*sw + j] for a padded
   image xp (Hp x Wp planes); cols rows are ld apart (several images share one
   row, P columns each). Rows are short (Wo values): plain loops the compiler
   vectorises beat a memcpy call per row, so keep GCC from turning them into one. */
template <typename T>
__attribute__((optimize("no-tree-loop-distribute-patterns")))
static void tmpi_im2col(const T* __restrict xp, int Hp, int Wp, const tmpi_geom& g,
                        T* __restrict cols, size_t ld)
{
    for (int c = 0; c < g.C; ++c) {
        for (int i = 0; i < g.kh; ++i) {
            for (int j = 0; j < g.kw; ++j) {
                T* row = cols + ((size_t)(c * g.kh + i) * g.kw + j) * ld;
                const T* src = xp + ((size_t)c * Hp + i) * Wp + j;
                for (int oh = 0; oh < g.Ho; ++oh) {
                    const T* s = src + (size_t)oh * g.sh * Wp;
                    T* d = row + (size_t)oh * g.Wo;
                    if (g.sw == 1) {
                        for (int ow = 0; ow < g.Wo; ++ow) d[ow] = s[ow];
                    } else if (g.sw == 2) {  /* a constant stride the compiler vectorises */
                        for (int ow = 0; ow < g.Wo; ++ow) d[ow] = s[2 * ow];
                    } else {
                        for (int ow = 0; ow < g.Wo; ++ow) d[ow] = s[ow * g.sw];
                    }
                }
            }
        }
    }
}

/* dxp[c][oh*sh + i][ow*sw + j] += cols[(c*kh + i)*kw + j][oh*Wo + ow] (padded image). */
template <typename T>
static void tmpi_col2im(const T* __restrict cols, size_t ld, const tmpi_geom& g,
                        T* __restrict dxp, int Hp, int Wp)
{
    for (int c = 0; c < g.C; ++c) {
        for (int i = 0; i < g.kh; ++i) {
            for (int j = 0; j < g.kw; ++j) {
                const T* row = cols + ((size_t)(c * g.kh + i) * g.kw + j) * ld;
                T* dst = dxp + ((size_t)c * Hp + i) * Wp + j;
                for (int oh = 0; oh < g.Ho; ++oh) {
                    const T* s = row + (size_t)oh * g.Wo;
                    T* d = dst + (size_t)oh * g.sh * Wp;
                    if (g.sw == 1) {
                        for (int ow = 0; ow < g.Wo; ++ow) d[ow] += s[ow];
                    } else if (g.sw == 2) {
                        for (int ow = 0; ow < g.Wo; ++ow) d[2 * ow] += s[ow];
                    } else {
                        for (int ow = 0; ow < g.Wo; ++ow) d[ow * g.sw] += s[ow];
                    }
                }
            }
        }
    }
}

static inline int tmpi_is_pointwise(const tmpi_geom& g)
{
    return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

/* Images per GEMM (1 for pointwise convolutions, which need no column buffer). */
static inline int tmpi_chunk(const tmpi_geom& g, size_t itemsize)
{
    if (tmpi_is_pointwise(g)) return 1;
    const size_t per_image = (size_t)g.C * g.kh * g.kw * g.Ho * g.Wo * itemsize;
    size_t nb = per_image ? TMPI_COLS_BUDGET / per_image : 1;
    if (nb < 1) nb = 1;
    if (nb > (size_t)g.N) nb = g.N;
    return (int)nb;
}

/* Chunks of images go to OpenMP threads, each running single-threaded GEMMs on
   its own buffers: one synchronisation per call instead of one per GEMM (a
   multi-threaded GEMM per chunk waits for every BLAS thread each time, which
   costs a scheduler slice per GEMM on a loaded machine), and im2col/col2im run
   in parallel too. Needs the scipy-openblas thread-count functions (weak
   symbols: without them, or with fewer chunks than threads, chunks run in
   order on multi-threaded GEMMs as before). */
extern "C" {
void scipy_openblas_set_num_threads(int) __attribute__((weak));
int scipy_openblas_get_num_threads(void) __attribute__((weak));
}

static int tmpi_chunk_threads(int nchunks)
{
    if (!scipy_openblas_set_num_threads || !scipy_openblas_get_num_threads) return 1;
    const int t = omp_get_max_threads();
    return t > 1 && nchunks >= t ? t : 1;
}

/* BLAS single-threaded while the chunks run in parallel; restored by release(). */
struct tmpi_blas_serial {
    int saved;
    explicit tmpi_blas_serial(int threads) : saved(0)
    {
        if (threads > 1) { saved = scipy_openblas_get_num_threads(); scipy_openblas_set_num_threads(1); }
    }
    ~tmpi_blas_serial() { if (saved) scipy_openblas_set_num_threads(saved); }
};

/* dst (O x m*P, row stride m*P) <- gy[n0 .. n0+m) (each O x P). */
template <typename T>
static void tmpi_gather_gy(const T* gy, const tmpi_geom& g, int n0, int m, T* dst)
{
    const size_t P = (size_t)g.Ho * g.Wo, ld = (size_t)m * P;
    for (int i = 0; i < m; ++i)
        for (int o = 0; o < g.O; ++o)
            memcpy(dst + o * ld + i * P, gy + ((size_t)(n0 + i) * g.O + o) * P, sizeof(T) * P);
}

/* The GEMM operand of images n0 .. n0+m: their im2col columns (K x m*P, written into cols), or the
   images themselves for a pointwise convolution. */
template <typename T>
static const T* tmpi_columns(const T* x, const tmpi_geom& g, int n0, int m, T* cols, tmpi_padded<T>& xp)
{
    const size_t P = (size_t)g.Ho * g.Wo, ld = (size_t)m * P, image = (size_t)g.C * g.H * g.W;
    if (tmpi_is_pointwise(g)) return x + (size_t)n0 * image;
    for (int i = 0; i < m; ++i) {
        xp.load(x + (size_t)(n0 + i) * image, g);
        tmpi_im2col(xp.buf, xp.Hp, xp.Wp, g, cols + i * P, ld);
    }
    return cols;
}

/* Per-thread scratch of a chunk loop: im2col columns (none for a pointwise convolution), a block of
   O x nb*P values (a gathered gy or a GEMM result; none when a chunk holds one image), a padded image. */
template <typename T>
struct tmpi_scratch {
    T* cols;
    T* block;
    tmpi_padded<T> padded;
};

/* body(n0, m, scratch, thread) for every chunk of (at most) nb images, the chunks shared out over
   `threads` OpenMP threads, each with its own scratch. 0, or -1 with MemoryError set when a scratch
   buffer could not be allocated. */
template <typename T, typename Body>
static int tmpi_for_chunks(const tmpi_geom& g, int nb, int threads, Body body)
{
    const size_t K = (size_t)g.C * g.kh * g.kw, P = (size_t)g.Ho * g.Wo;
    const int pointwise = tmpi_is_pointwise(g), nchunks = (g.N + nb - 1) / nb;
    int failed = 0;
    tmpi_blas_serial blas(threads);
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        tmpi_scratch<T> s = {pointwise ? NULL : (T*)malloc(sizeof(T) * K * nb * P),
                             nb > 1 ? (T*)malloc(sizeof(T) * (size_t)g.O * nb * P) : NULL, {NULL, 0, 0}};
        const int ok = !((!pointwise && (!s.cols || s.padded.init(g) != 0)) || (nb > 1 && !s.block));
        if (!ok) {
            #pragma omp atomic write
            failed = 1;
        }
        const int thread = omp_get_thread_num();
        #pragma omp for schedule(static)
        for (int chunk = 0; chunk < nchunks; ++chunk) {
            const int n0 = chunk * nb, m = g.N - n0 < nb ? g.N - n0 : nb;
            if (ok) body(n0, m, s, thread);
        }
        free(s.cols);
        free(s.block);
        free(s.padded.buf);
    }
    if (failed) { PyErr_NoMemory(); return -1; }
    return 0;
}

/* Whether a chunk's GEMMs run on the vector kernel (tmpi_gemm_ab): float32, a thread of its own, images of a
   whole number of vectors. */
template <typename T>
static inline int tmpi_vector_gemm(const tmpi_geom& g, int own_thread)
{
    return sizeof(T) == sizeof(float) && own_thread && ((size_t)g.Ho * g.Wo) % TMPI_WG_VL == 0;
}

/* Whether the chunks run on threads of their own (or there is only one thread). */
static inline int tmpi_own_thread(int threads) { return threads > 1 || omp_get_max_threads() == 1; }

template <typename T>
static void tmpi_forward_chunk(const T* x, const T* w, const T* bias, T* out, const tmpi_geom& g,
                               int n0, int m, int nb, T* cols, T* res, tmpi_padded<T>& xp, int own_thread)
{
    const int K = g.C * g.kh * g.kw;
    const size_t P = (size_t)g.Ho * g.Wo, ld = (size_t)m * P;
    const T* b = tmpi_columns(x, g, n0, m, cols, xp);
    if (tmpi_vector_gemm<T>(g, own_thread)) {  /* image by image, straight into the output */
        for (int i = 0; i < m; ++i) {
            T* y = out + (size_t)(n0 + i) * g.O * P;
            tmpi_gemm_ab('N', g.O, (int)P, K, w, K, b + i * P, (int)ld, y, (int)P, 1);
            if (bias)
                for (int o = 0; o < g.O; ++o)
                    for (size_t q = 0; q < P; ++q) y[o * P + q] += bias[o];
        }
        return;
    }
    T* c = nb > 1 ? res : out + (size_t)n0 * g.O * P;
    tmpi_gemm_ab('N', g.O, (int)ld, K, w, K, b, (int)ld, c, (int)ld, 0);
    for (int i = 0; i < m; ++i) {
        for (int o = 0; o < g.O; ++o) {
            T* dst = out + ((size_t)(n0 + i) * g.O + o) * P;
            const T* src = c + o * ld + i * P;
            const T bo = bias ? bias[o] : (T)0;
            if (src == dst) {
                if (bias) for (size_t q = 0; q < P; ++q) dst[q] += bo;
            } else {
                for (size_t q = 0; q < P; ++q) dst[q] = src[q] + bo;
            }
        }
    }
}

template <typename T>
static int tmpi_forward_impl(const T* x, const T* w, const T* bias, T* out, const tmpi_geom& g)
{
    const int K = g.C * g.kh * g.kw;
    const size_t P = (size_t)g.Ho * g.Wo;
    const size_t out_size = (size_t)g.N * g.O * P;
    if (out_size == 0) return 0;
    if (K == 0) {
        for (size_t e = 0; e < out_size; ++e) out[e] = bias ? bias[(e / P) % g.O] : (T)0;
        return 0;
    }
    const int nb = tmpi_chunk(g, sizeof(T)), threads = tmpi_chunk_threads((g.N + nb - 1) / nb);
    const int own = tmpi_own_thread(threads);
    return tmpi_for_chunks<T>(g, nb, threads, [&](int n0, int m, tmpi_scratch<T>& s, int) {
        tmpi_forward_chunk(x, w, bias, out, g, n0, m, nb, s.cols, s.block, s.padded, own);
    });
}

/* dw += gy[n0 .. n0+m) x cols(x[n0 .. n0+m))^T */
template <typename T>
static void tmpi_grad_weights_chunk(const T* x, const T* gy, T* dw, const tmpi_geom& g, int n0, int m, int nb,
                                    T* cols, T* gyc, tmpi_padded<T>& xp)
{
    const int K = g.C * g.kh * g.kw;
    const size_t P = (size_t)g.Ho * g.Wo, ld = (size_t)m * P;
    const T* b = tmpi_columns(x, g, n0, m, cols, xp);
    const T* a = gy + (size_t)n0 * g.O * P;
    if (nb > 1) { tmpi_gather_gy(gy, g, n0, m, gyc); a = gyc; }
    tmpi_gemm('N', 'T', g.O, K, (int)ld, (T)1, a, (int)ld, b, (int)ld, (T)1, dw, K);
}

template <typename T>
static int tmpi_grad_weights_impl(const T* x, const T* gy, T* dw, const tmpi_geom& g)
{
    const int K = g.C * g.kh * g.kw;
    const size_t P = (size_t)g.Ho * g.Wo;
    const size_t dw_size = (size_t)g.O * K;
    if (dw_size == 0) return 0;
    memset(dw, 0, sizeof(T) * dw_size);
    if (g.N == 0 || P == 0) return 0;
    const int nb = tmpi_chunk(g, sizeof(T)), threads = tmpi_chunk_threads((g.N + nb - 1) / nb);
    /* every thread but the first sums into its own zeroed copy, added to dw at the end */
    T* partial = threads > 1 ? (T*)calloc((size_t)(threads - 1) * dw_size, sizeof(T)) : NULL;
    if (threads > 1 && !partial) { PyErr_NoMemory(); return -1; }
    const int rc = tmpi_for_chunks<T>(g, nb, threads, [&](int n0, int m, tmpi_scratch<T>& s, int thread) {
        T* mine = thread == 0 ? dw : partial + (size_t)(thread - 1) * dw_size;
        tmpi_grad_weights_chunk(x, gy, mine, g, n0, m, nb, s.cols, s.block, s.padded);
    });
    for (int t = 1; t < threads; ++t) {
        const T* part = partial + (size_t)(t - 1) * dw_size;
        for (size_t e = 0; e < dw_size; ++e) dw[e] += part[e];
    }
    free(partial);
    return rc;
}

template <typename T>
static void tmpi_grad_inputs_chunk(const T* w, const T* gy, T* dx, const tmpi_geom& g, int n0, int m, int nb,
                                   T* cols, T* gyc, tmpi_padded<T>& dxp, int own_thread)
{
    const int K = g.C * g.kh * g.kw, pointwise = tmpi_is_pointwise(g);
    const size_t P = (size_t)g.Ho * g.Wo, ld = (size_t)m * P;
    const size_t plane = (size_t)g.C * (pointwise ? 0 : dxp.Hp * dxp.Wp);
    const T* a = gy + (size_t)n0 * g.O * P;
    if (nb > 1) { tmpi_gather_gy(gy, g, n0, m, gyc); a = gyc; }
    T* c = pointwise ? dx + (size_t)n0 * g.C * g.H * g.W : cols;
    tmpi_gemm_ab('T', K, (int)ld, g.O, w, K, a, (int)ld, c, (int)ld, tmpi_vector_gemm<T>(g, own_thread));
    if (pointwise) return;
    for (int i = 0; i < m; ++i) {
        memset(dxp.buf, 0, sizeof(T) * plane);
        tmpi_col2im(cols + i * P, ld, g, dxp.buf, dxp.Hp, dxp.Wp);
        dxp.store(dx + (size_t)(n0 + i) * g.C * g.H * g.W, g);
    }
}

template <typename T>
static int tmpi_grad_inputs_impl(const T* w, const T* gy, T* dx, const tmpi_geom& g)
{
    const size_t P = (size_t)g.Ho * g.Wo;
    const size_t dx_size = (size_t)g.N * g.C * g.H * g.W;
    if (dx_size == 0) return 0;
    if (g.O == 0 || P == 0) { memset(dx, 0, sizeof(T) * dx_size); return 0; }
    const int nb = tmpi_chunk(g, sizeof(T)), threads = tmpi_chunk_threads((g.N + nb - 1) / nb);
    const int own = tmpi_own_thread(threads);
    return tmpi_for_chunks<T>(g, nb, threads, [&](int n0, int m, tmpi_scratch<T>& s, int) {
        tmpi_grad_inputs_chunk(w, gy, dx, g, n0, m, nb, s.cols, s.block, s.padded, own);
    });
}

/* Fill g from the x and W shapes; ValueError on channel mismatch or a window too large. */
static int tmpi_fill_geom(tmpi_geom* g, PyArrayObject* x, npy_intp* wshape,
                          int sh, int sw, int ph, int pw, const char* op)
{
    npy_intp* xs = PyArray_DIMS(x);
    if (xs[1] != wshape[1]) {
        PyErr_Format(PyExc_ValueError,
                     "%s: x has %ld input channels but W expects %ld "
                     "(x.shape=(%ld, %ld, %ld, %ld), W.shape=(%ld, %ld, %ld, %ld))",
                     op, (long)xs[1], (long)wshape[1], (long)xs[0], (long)xs[1], (long)xs[2],
                     (long)xs[3], (long)wshape[0], (long)wshape[1], (long)wshape[2], (long)wshape[3]);
        return -1;
    }
    if (xs[2] + 2 * ph < wshape[2] || xs[3] + 2 * pw < wshape[3]) {
        PyErr_Format(PyExc_ValueError,
                     "%s: kernel %ldx%ld is larger than the padded input %ldx%ld "
                     "(input %ldx%ld, pad (%d, %d))",
                     op, (long)wshape[2], (long)wshape[3], (long)(xs[2] + 2 * ph),
                     (long)(xs[3] + 2 * pw), (long)xs[2], (long)xs[3], ph, pw);
        return -1;
    }
    g->N = (int)xs[0]; g->C = (int)xs[1]; g->H = (int)xs[2]; g->W = (int)xs[3];
    g->O = (int)wshape[0]; g->kh = (int)wshape[2]; g->kw = (int)wshape[3];
    g->sh = sh; g->sw = sw; g->ph = ph; g->pw = pw;
    g->Ho = (g->H + 2 * ph - g->kh) / sh + 1;
    g->Wo = (g->W + 2 * pw - g->kw) / sw + 1;
    return 0;
}

static int tmpi_check_gy(PyArrayObject* gy, const tmpi_geom& g, const char* op)
{
    npy_intp* d = PyArray_DIMS(gy);
    if (d[0] != g.N || d[1] != g.O || d[2] != g.Ho || d[3] != g.Wo) {
        PyErr_Format(PyExc_ValueError,
                     "%s: output gradient has shape (%ld, %ld, %ld, %ld), expected (%d, %d, %d, %d)",
                     op, (long)d[0], (long)d[1], (long)d[2], (long)d[3], g.N, g.O, g.Ho, g.Wo);
        return -1;
    }
    return 0;
}

/* Which algorithm runs a float32 convolution: Winograd (conv2d_winograd.h) for 3x3 filters with stride 1
   (F(4x4, 3x3)) or 2 in both dimensions (four phases, F(4x4, 2x2); forward and weight gradient) and padding
   up to 2 between layers of at least TMPI_WG_MIN_CHANNELS channels each; im2col + GEMM for everything else
   and for float64.
   THEANOMPI_CONV_ALGO=im2col sends every convolution to im2col (the tests and benchmarks compare the two
   that way); unset, empty or `auto` chooses as above. */
#ifndef TMPI_WG_MIN_CHANNELS
#define TMPI_WG_MIN_CHANNELS 8
#endif

/* 1 when THEANOMPI_CONV_ALGO asks for im2col everywhere, 0 when not, -1 with ValueError set for another
   value (read at every call, so a test or benchmark can switch it between calls). */
static int tmpi_conv_im2col_only(void)
{
    const char* algo = getenv("THEANOMPI_CONV_ALGO");
    if (!algo || !*algo || strcmp(algo, "auto") == 0) return 0;
    if (strcmp(algo, "im2col") == 0) return 1;
    PyErr_Format(PyExc_ValueError, "THEANOMPI_CONV_ALGO must be 'auto' or 'im2col', got '%s'", algo);
    return -1;
}

/* The Winograd stride (1 or 2) for this convolution, or 0: im2col. */
static int tmpi_winograd_stride(const tmpi_geom& g)
{
    if (g.kh != 3 || g.kw != 3 || g.sh != g.sw || g.sh > 2 || g.ph > 2 || g.pw > 2) return 0;
    if (g.N < 1 || g.Ho < 1 || g.Wo < 1 || g.C < TMPI_WG_MIN_CHANNELS || g.O < TMPI_WG_MIN_CHANNELS) return 0;
    return tmpi_conv_im2col_only() ? 0 : g.sh;
}

/* 0, or -1 with MemoryError set (the Winograd kernels' only failure). */
static inline int tmpi_wg_status(int rc)
{
    if (rc != 0) PyErr_NoMemory();
    return rc;
}

static int tmpi_forward_f32(const float* x, const float* w, const float* b, float* out, const tmpi_geom& g)
{
    switch (tmpi_winograd_stride(g)) {
    case 1: return tmpi_wg_status(tmpi_wg_forward(x, w, b, out, g.N, g.C, g.H, g.W, g.O, g.ph, g.pw));
    case 2: return tmpi_wg_status(tmpi_wg_forward_s2(x, w, b, out, g.N, g.C, g.H, g.W, g.O, g.ph, g.pw));
    default: return tmpi_forward_impl<float>(x, w, b, out, g);
    }
}

static int tmpi_grad_weights_f32(const float* x, const float* gy, float* dw, const tmpi_geom& g)
{
    switch (tmpi_winograd_stride(g)) {
    case 1: return tmpi_wg_status(tmpi_wg_grad_weights(x, gy, dw, g.N, g.C, g.H, g.W, g.O, g.ph, g.pw));
    case 2: return tmpi_wg_status(tmpi_wg_grad_weights_s2(x, gy, dw, g.N, g.C, g.H, g.W, g.O, g.ph, g.pw));
    default: return tmpi_grad_weights_impl<float>(x, gy, dw, g);
    }
}

static int tmpi_grad_inputs_f32(const float* w, const float* gy, float* dx, const tmpi_geom& g)
{
    if (tmpi_winograd_stride(g) == 1)
        return tmpi_wg_status(tmpi_wg_grad_inputs(w, gy, dx, g.N, g.C, g.O, g.Ho, g.Wo, g.ph, g.pw));
    return tmpi_grad_inputs_impl<float>(w, gy, dx, g);
}

#define TMPI_DISPATCH(typenum, call_f, call_d)                              \
    ((typenum) == NPY_FLOAT32 ? (call_f)                                    \
     : (typenum) == NPY_FLOAT64 ? (call_d)                                  \
     : (PyErr_SetString(PyExc_TypeError, "conv2d: float32/float64 only"), -1))

/* z = conv2d(x, w) (+ b[o] when b_in is not NULL). */
static int tmpi_conv2d_forward(PyArrayObject* x_in, PyArrayObject* w_in, PyArrayObject* b_in,
                               PyArrayObject** z, int sh, int sw, int ph, int pw)
{
    tmpi_geom g;
    if (tmpi_conv_im2col_only() < 0) return -1;
    if (tmpi_fill_geom(&g, x_in, PyArray_DIMS(w_in), sh, sw, ph, pw, "conv2d") != 0) return -1;
    if (b_in && PyArray_DIMS(b_in)[0] != g.O) {
        PyErr_Format(PyExc_ValueError, "conv2d: bias has %ld entries but W has %d output channels",
                     (long)PyArray_DIMS(b_in)[0], g.O);
        return -1;
    }
    npy_intp dims[4] = {g.N, g.O, g.Ho, g.Wo};
    int typenum = PyArray_TYPE(x_in);
    if (tmpi_prepare_output4(z, dims, typenum) != 0) return -1;
    PyArrayObject* x = PyArray_GETCONTIGUOUS(x_in);
    PyArrayObject* w = PyArray_GETCONTIGUOUS(w_in);
    PyArrayObject* b = b_in ? PyArray_GETCONTIGUOUS(b_in) : NULL;
    int rc = -1;
    if (x && w && (b || !b_in)) {
        rc = TMPI_DISPATCH(typenum,
            tmpi_forward_f32((float*)PyArray_DATA(x), (float*)PyArray_DATA(w),
                                     b ? (float*)PyArray_DATA(b) : NULL,
                                     (float*)PyArray_DATA(*z), g),
            tmpi_forward_impl<double>((double*)PyArray_DATA(x), (double*)PyArray_DATA(w),
                                      b ? (double*)PyArray_DATA(b) : NULL,
                                      (double*)PyArray_DATA(*z), g));
    }
    Py_XDECREF(x);
    Py_XDECREF(w);
    Py_XDECREF(b);
    return rc;
}

/* z = d conv2d(x, w) / d w, contracted with gy. */
static int tmpi_conv2d_grad_weights(PyArrayObject* x_in, PyArrayObject* w_in, PyArrayObject* gy_in,
                                    PyArrayObject** z, int sh, int sw, int ph, int pw)
{
    tmpi_geom g;
    npy_intp* ws = PyArray_DIMS(w_in);
    if (tmpi_conv_im2col_only() < 0) return -1;
    if (tmpi_fill_geom(&g, x_in, ws, sh, sw, ph, pw, "conv2d_grad_weights") != 0) return -1;
    if (tmpi_check_gy(gy_in, g, "conv2d_grad_weights") != 0) return -1;
    npy_intp dims[4] = {ws[0], ws[1], ws[2], ws[3]};
    int typenum = PyArray_TYPE(x_in);
    if (tmpi_prepare_output4(z, dims, typenum) != 0) return -1;
    PyArrayObject* x = PyArray_GETCONTIGUOUS(x_in);
    PyArrayObject* gy = PyArray_GETCONTIGUOUS(gy_in);
    int rc = -1;
    if (x && gy) {
        rc = TMPI_DISPATCH(typenum,
            tmpi_grad_weights_f32((float*)PyArray_DATA(x), (float*)PyArray_DATA(gy),
                                          (float*)PyArray_DATA(*z), g),
            tmpi_grad_weights_impl<double>((double*)PyArray_DATA(x), (double*)PyArray_DATA(gy),
                                           (double*)PyArray_DATA(*z), g));
    }
    Py_XDECREF(x);
    Py_XDECREF(gy);
    return rc;
}

/* z = d conv2d(x, w) / d x, contracted with gy (x is used for its shape only). */
static int tmpi_conv2d_grad_inputs(PyArrayObject* x_in, PyArrayObject* w_in, PyArrayObject* gy_in,
                                   PyArrayObject** z, int sh, int sw, int ph, int pw)
{
    tmpi_geom g;
    if (tmpi_conv_im2col_only() < 0) return -1;
    if (tmpi_fill_geom(&g, x_in, PyArray_DIMS(w_in), sh, sw, ph, pw, "conv2d_grad_inputs") != 0)
        return -1;
    if (tmpi_check_gy(gy_in, g, "conv2d_grad_inputs") != 0) return -1;
    npy_intp* xs = PyArray_DIMS(x_in);
    npy_intp dims[4] = {xs[0], xs[1], xs[2], xs[3]};
    int typenum = PyArray_TYPE(w_in);
    if (tmpi_prepare_output4(z, dims, typenum) != 0) return -1;
    PyArrayObject* w = PyArray_GETCONTIGUOUS(w_in);
    PyArrayObject* gy = PyArray_GETCONTIGUOUS(gy_in);
    int rc = -1;
    if (w && gy) {
        rc = TMPI_DISPATCH(typenum,
            tmpi_grad_inputs_f32((float*)PyArray_DATA(w), (float*)PyArray_DATA(gy),
                                         (float*)PyArray_DATA(*z), g),
            tmpi_grad_inputs_impl<double>((double*)PyArray_DATA(w), (double*)PyArray_DATA(gy),
                                          (double*)PyArray_DATA(*z), g));
    }
    Py_XDECREF(w);
    Py_XDECREF(gy);
    return rc;
}
