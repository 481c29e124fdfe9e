#include <string.h>
#include <math.h>

struct tmpi_pgeom {
    int NC, H, W, kh, kw, sh, sw, ph, pw, Ho, Wo;
};

template <typename T>
static inline int tmpi_pool_better(T v, T best)
{
    return v > best || v != v;
}

/* Unpadded max pooling: every window lies inside the input, so each window
   offset (i, j) is one branch-free, vectorisable pass over an output row. */
template <typename T>
static void tmpi_max_fwd_unpadded(const T* xp, T* yp, const tmpi_pgeom& g)
{
    for (int oh = 0; oh < g.Ho; ++oh) {
        const T* r0 = xp + (size_t)oh * g.sh * g.W;
        T* y = yp + (size_t)oh * g.Wo;
        for (int ow = 0; ow < g.Wo; ++ow) y[ow] = r0[ow * g.sw];
        for (int i = 0; i < g.kh; ++i) {
            const T* r = r0 + (size_t)i * g.W;
            for (int j = (i == 0 ? 1 : 0); j < g.kw; ++j) {
                for (int ow = 0; ow < g.Wo; ++ow) {
                    const T v = r[ow * g.sw + j];
                    const T m = y[ow];
                    y[ow] = tmpi_pool_better(v, m) ? v : m;
                }
            }
        }
    }
}

/* General case (padding): clip each window to the input. */
template <typename T>
static void tmpi_pool_fwd_clipped(const T* xp, T* yp, const tmpi_pgeom& g, int is_max)
{
    const T inv = (T)1 / (T)(g.kh * g.kw);
    for (int oh = 0; oh < g.Ho; ++oh) {
        const int h0 = oh * g.sh - g.ph;
        const int hs = h0 < 0 ? 0 : h0;
        const int he = h0 + g.kh > g.H ? g.H : h0 + g.kh;
        for (int ow = 0; ow < g.Wo; ++ow) {
            const int w0 = ow * g.sw - g.pw;
            const int ws = w0 < 0 ? 0 : w0;
            const int we = w0 + g.kw > g.W ? g.W : w0 + g.kw;
            T acc;
            if (is_max) {
                acc = -INFINITY;
                for (int h = hs; h < he; ++h)
                    for (int w = ws; w < we; ++w) {
                        const T v = xp[h * g.W + w];
                        if (tmpi_pool_better(v, acc)) acc = v;
                    }
            } else {
                acc = 0;
                for (int h = hs; h < he; ++h)
                    for (int w = ws; w < we; ++w) acc += xp[h * g.W + w];
                acc *= inv;
            }
            yp[oh * g.Wo + ow] = acc;
        }
    }
}

/* The common 2x2, stride-2, unpadded max pool: one pass per output row, the
   window's four values compared in row-major order (first maximum wins). */
template <typename T>
static void tmpi_max_fwd_2x2(const T* __restrict xp, T* __restrict yp, const tmpi_pgeom& g)
{
    for (int oh = 0; oh < g.Ho; ++oh) {
        const T* __restrict r0 = xp + (size_t)(2 * oh) * g.W;
        const T* __restrict r1 = r0 + g.W;
        T* __restrict y = yp + (size_t)oh * g.Wo;
        for (int ow = 0; ow < g.Wo; ++ow) {
            T m = r0[2 * ow];
            T v = r0[2 * ow + 1]; m = tmpi_pool_better(v, m) ? v : m;
            v = r1[2 * ow]; m = tmpi_pool_better(v, m) ? v : m;
            v = r1[2 * ow + 1]; m = tmpi_pool_better(v, m) ? v : m;
            y[ow] = m;
        }
    }
}

static inline int tmpi_is_2x2(const tmpi_pgeom& g)
{
    return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0;
}

/* Planes are independent: OpenMP shares them out (OMP_NUM_THREADS threads). */
template <typename T>
static void tmpi_pool_fwd_impl(const T* x, T* y, const tmpi_pgeom& g, int is_max)
{
    const int unpadded = g.ph == 0 && g.pw == 0;
    const int two_by_two = is_max && tmpi_is_2x2(g);
    #pragma omp parallel for schedule(static) if ((size_t)g.NC * g.H * g.W > 32768)
    for (int p = 0; p < g.NC; ++p) {
        const T* xp = x + (size_t)p * g.H * g.W;
        T* yp = y + (size_t)p * g.Ho * g.Wo;
        if (two_by_two) tmpi_max_fwd_2x2(xp, yp, g);
        else if (is_max && unpadded) tmpi_max_fwd_unpadded(xp, yp, g);
        else tmpi_pool_fwd_clipped(xp, yp, g, is_max);
    }
}

/* Unpadded, non-overlapping max pooling gradient: find the first maximum of
   every window of an output row with vectorisable passes (best/arg scratch
   rows), then write each window's gradient directly (windows are disjoint). */
template <typename T>
static void tmpi_max_grad_disjoint(const T* xp, const T* gp, T* dp, const tmpi_pgeom& g,
                                   T* best, int* arg)
{
    const int covered = g.sh == g.kh && g.sw == g.kw && g.H == g.Ho * g.kh && g.W == g.Wo * g.kw;
    if (!covered) memset(dp, 0, sizeof(T) * (size_t)g.H * g.W);
    for (int oh = 0; oh < g.Ho; ++oh) {
        const T* r0 = xp + (size_t)oh * g.sh * g.W;
        T* d0 = dp + (size_t)oh * g.sh * g.W;
        const T* gy = gp + (size_t)oh * g.Wo;
        for (int ow = 0; ow < g.Wo; ++ow) { best[ow] = r0[ow * g.sw]; arg[ow] = 0; }
        for (int i = 0; i < g.kh; ++i) {
            const T* r = r0 + (size_t)i * g.W;
            for (int j = (i == 0 ? 1 : 0); j < g.kw; ++j) {
                const int k = i * g.kw + j;
                for (int ow = 0; ow < g.Wo; ++ow) {
                    const T v = r[ow * g.sw + j];
                    const int better = tmpi_pool_better(v, best[ow]);
                    best[ow] = better ? v : best[ow];
                    arg[ow] = better ? k : arg[ow];
                }
            }
        }
        for (int i = 0; i < g.kh; ++i) {
            T* d = d0 + (size_t)i * g.W;
            for (int j = 0; j < g.kw; ++j) {
                const int k = i * g.kw + j;
                for (int ow = 0; ow < g.Wo; ++ow) d[ow * g.sw + j] = arg[ow] == k ? gy[ow] : (T)0;
            }
        }
    }
}

/* General gradient (padding or overlapping windows): clip and accumulate. */
template <typename T>
static void tmpi_pool_grad_clipped(const T* xp, const T* gp, T* dp, const tmpi_pgeom& g, int is_max)
{
    const T inv = (T)1 / (T)(g.kh * g.kw);
    memset(dp, 0, sizeof(T) * (size_t)g.H * g.W);
    for (int oh = 0; oh < g.Ho; ++oh) {
        const int h0 = oh * g.sh - g.ph;
        const int hs = h0 < 0 ? 0 : h0;
        const int he = h0 + g.kh > g.H ? g.H : h0 + g.kh;
        for (int ow = 0; ow < g.Wo; ++ow) {
            const int w0 = ow * g.sw - g.pw;
            const int ws = w0 < 0 ? 0 : w0;
            const int we = w0 + g.kw > g.W ? g.W : w0 + g.kw;
            const T gv = gp[oh * g.Wo + ow];
            if (is_max) {
                T best = -INFINITY;
                int arg = -1;
                for (int h = hs; h < he; ++h)
                    for (int w = ws; w < we; ++w) {
                        const T v = xp[h * g.W + w];
                        if (arg < 0 || tmpi_pool_better(v, best)) { best = v; arg = h * g.W + w; }
                    }
                if (arg >= 0) dp[arg] += gv;
            } else {
                const T share = gv * inv;
                for (int h = hs; h < he; ++h)
                    for (int w = ws; w < we; ++w) dp[h * g.W + w] += share;
            }
        }
    }
}

template <typename T>
static int tmpi_pool_grad_impl(const T* x, const T* gy, T* dx, const tmpi_pgeom& g, int is_max)
{
    const int disjoint = is_max && g.ph == 0 && g.pw == 0 && g.sh >= g.kh && g.sw >= g.kw;
    int failed = 0;
    #pragma omp parallel if ((size_t)g.NC * g.H * g.W > 32768)
    {
        /* per-thread scratch rows of the disjoint case */
        T* best = disjoint ? (T*)malloc(sizeof(T) * (size_t)(g.Wo + 1)) : NULL;
        int* arg = disjoint ? (int*)malloc(sizeof(int) * (size_t)(g.Wo + 1)) : NULL;
        const int ok = !disjoint || (best && arg);
        if (!ok) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(static)
        for (int p = 0; p < g.NC; ++p) {
            if (!ok) continue;
            const T* xp = x + (size_t)p * g.H * g.W;
            const T* gp = gy + (size_t)p * g.Ho * g.Wo;
            T* dp = dx + (size_t)p * g.H * g.W;
            if (disjoint) tmpi_max_grad_disjoint(xp, gp, dp, g, best, arg);
            else tmpi_pool_grad_clipped(xp, gp, dp, g, is_max);
        }
        free(best);
        free(arg);
    }
    if (failed) { PyErr_NoMemory(); return -1; }
    return 0;
}

static int tmpi_pool_geom(tmpi_pgeom* g, PyArrayObject* x, int kh, int kw, int sh, int sw,
                          int ph, int pw, const char* op)
{
    npy_intp* xs = PyArray_DIMS(x);
    if (xs[2] + 2 * ph < kh || xs[3] + 2 * pw < kw) {
        PyErr_Format(PyExc_ValueError,
                     "%s: window %dx%d is larger than the padded input %ldx%ld "
                     "(input %ldx%ld, pad (%d, %d))",
                     op, kh, kw, (long)(xs[2] + 2 * ph), (long)(xs[3] + 2 * pw),
                     (long)xs[2], (long)xs[3], ph, pw);
        return -1;
    }
    g->NC = (int)(xs[0] * xs[1]); g->H = (int)xs[2]; g->W = (int)xs[3];
    g->kh = kh; g->kw = kw; g->sh = sh; g->sw = sw; g->ph = ph; g->pw = pw;
    g->Ho = (g->H + 2 * ph - kh) / sh + 1;
    g->Wo = (g->W + 2 * pw - kw) / sw + 1;
    return 0;
}

static int tmpi_pool2d_forward(PyArrayObject* x_in, PyArrayObject** z, int kh, int kw,
                               int sh, int sw, int ph, int pw, int is_max)
{
    tmpi_pgeom g;
    const char* op = is_max ? "max_pool2d" : "average_pool2d";
    if (tmpi_pool_geom(&g, x_in, kh, kw, sh, sw, ph, pw, op) != 0) return -1;
    npy_intp* xs = PyArray_DIMS(x_in);
    npy_intp dims[4] = {xs[0], xs[1], g.Ho, g.Wo};
    const int typenum = PyArray_TYPE(x_in);
    if (tmpi_prepare_output4(z, dims, typenum) != 0) return -1;
    PyArrayObject* x = PyArray_GETCONTIGUOUS(x_in);
    if (!x) return -1;
    if (typenum == NPY_FLOAT32)
        tmpi_pool_fwd_impl<float>((float*)PyArray_DATA(x), (float*)PyArray_DATA(*z), g, is_max);
    else
        tmpi_pool_fwd_impl<double>((double*)PyArray_DATA(x), (double*)PyArray_DATA(*z), g, is_max);
    Py_DECREF(x);
    return 0;
}

static int tmpi_pool2d_grad(PyArrayObject* x_in, PyArrayObject* gy_in, PyArrayObject** z,
                            int kh, int kw, int sh, int sw, int ph, int pw, int is_max)
{
    tmpi_pgeom g;
    const char* op = is_max ? "max_pool2d_grad" : "average_pool2d_grad";
    if (tmpi_pool_geom(&g, x_in, kh, kw, sh, sw, ph, pw, op) != 0) return -1;
    npy_intp* xs = PyArray_DIMS(x_in);
    npy_intp* gs = PyArray_DIMS(gy_in);
    if (gs[0] != xs[0] || gs[1] != xs[1] || gs[2] != g.Ho || gs[3] != g.Wo) {
        PyErr_Format(PyExc_ValueError,
                     "%s: output gradient has shape (%ld, %ld, %ld, %ld), expected (%ld, %ld, %d, %d)",
                     op, (long)gs[0], (long)gs[1], (long)gs[2], (long)gs[3],
                     (long)xs[0], (long)xs[1], g.Ho, g.Wo);
        return -1;
    }
    npy_intp dims[4] = {xs[0], xs[1], xs[2], xs[3]};
    const int typenum = PyArray_TYPE(x_in);
    if (tmpi_prepare_output4(z, dims, typenum) != 0) return -1;
    PyArrayObject* x = PyArray_GETCONTIGUOUS(x_in);
    PyArrayObject* gy = PyArray_GETCONTIGUOUS(gy_in);
    int rc = -1;
    if (x && gy) {
        if (typenum == NPY_FLOAT32)
            rc = tmpi_pool_grad_impl<float>((float*)PyArray_DATA(x), (float*)PyArray_DATA(gy),
                                            (float*)PyArray_DATA(*z), g, is_max);
        else
            rc = tmpi_pool_grad_impl<double>((double*)PyArray_DATA(x), (double*)PyArray_DATA(gy),
                                             (double*)PyArray_DATA(*z), g, is_max);
    }
    Py_XDECREF(x);
    Py_XDECREF(gy);
    return rc;
}
