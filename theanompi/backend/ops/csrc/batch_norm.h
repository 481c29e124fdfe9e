#include <math.h>

struct tmpi_bn_geom { npy_intp N, C, S; };

/* (N, C, S) of x; an empty batch is an error unless allow_empty (inference has no statistics to take). */
static int tmpi_bn_geometry(PyArrayObject* x, tmpi_bn_geom* g, const char* op, int allow_empty)
{
    const int nd = PyArray_NDIM(x);
    if (nd < 2) {
        PyErr_Format(PyExc_ValueError, "%s: input must have at least 2 dimensions, got %d", op, nd);
        return -1;
    }
    npy_intp* d = PyArray_DIMS(x);
    g->N = d[0]; g->C = d[1]; g->S = 1;
    for (int i = 2; i < nd; ++i) g->S *= d[i];
    if (!allow_empty && g->N * g->S == 0) {
        PyErr_Format(PyExc_ValueError, "%s: no values to normalise over (input shape has a zero "
                     "outside the channel axis)", op);
        return -1;
    }
    return 0;
}

static int tmpi_bn_check_vector(PyArrayObject* v, npy_intp C, const char* op, const char* name)
{
    if (PyArray_NDIM(v) != 1 || PyArray_DIMS(v)[0] != C) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape (%ld,) (one value per channel), got ndim=%d "
                     "first dim %ld", op, name, (long)C, PyArray_NDIM(v),
                     (long)(PyArray_NDIM(v) ? PyArray_DIMS(v)[0] : 0));
        return -1;
    }
    return 0;
}

static int tmpi_bn_prepare(PyArrayObject** out, int nd, npy_intp* dims, int typenum)
{
    if (*out && PyArray_NDIM(*out) == nd && PyArray_TYPE(*out) == typenum && PyArray_IS_C_CONTIGUOUS(*out)) {
        int same = 1;
        for (int i = 0; i < nd; ++i) same &= PyArray_DIMS(*out)[i] == dims[i];
        if (same) return 0;
    }
    Py_XDECREF(*out);
    *out = (PyArrayObject*)PyArray_EMPTY(nd, dims, typenum, 0);
    return *out ? 0 : -1;
}

/* Row reductions with TMPI_BN_LANES independent partial sums: the compiler vectorises them (a single running
   sum is one long dependency chain, about 4 cycles per value, and may not be reordered without -ffast-math). */
enum { TMPI_BN_LANES = 16 };

/* sum of r[s] */
template <typename T>
static inline T tmpi_bn_row_sum(const T* __restrict r, npy_intp S)
{
    T part[TMPI_BN_LANES] = {0};
    npy_intp s = 0;
    for (; s + TMPI_BN_LANES <= S; s += TMPI_BN_LANES)
        for (int l = 0; l < TMPI_BN_LANES; ++l) part[l] += r[s + l];
    T total = 0;
    for (int l = 0; l < TMPI_BN_LANES; ++l) total += part[l];
    for (; s < S; ++s) total += r[s];
    return total;
}

/* sum of (r[s] - m)^2 */
template <typename T>
static inline T tmpi_bn_row_sq(const T* __restrict r, T m, npy_intp S)
{
    T part[TMPI_BN_LANES] = {0};
    npy_intp s = 0;
    for (; s + TMPI_BN_LANES <= S; s += TMPI_BN_LANES)
        for (int l = 0; l < TMPI_BN_LANES; ++l) { const T d = r[s + l] - m; part[l] += d * d; }
    T total = 0;
    for (int l = 0; l < TMPI_BN_LANES; ++l) total += part[l];
    for (; s < S; ++s) { const T d = r[s] - m; total += d * d; }
    return total;
}

/* *a += sum of gy[s], *b += sum of gy[s] * (x[s] - m) */
template <typename T>
static inline void tmpi_bn_row_grad_sums(const T* __restrict x, const T* __restrict gy, T m, npy_intp S,
                                         double* a, double* b)
{
    T pa[TMPI_BN_LANES] = {0}, pb[TMPI_BN_LANES] = {0};
    npy_intp s = 0;
    for (; s + TMPI_BN_LANES <= S; s += TMPI_BN_LANES)
        for (int l = 0; l < TMPI_BN_LANES; ++l) { pa[l] += gy[s + l]; pb[l] += gy[s + l] * (x[s + l] - m); }
    T ta = 0, tb = 0;
    for (int l = 0; l < TMPI_BN_LANES; ++l) { ta += pa[l]; tb += pb[l]; }
    for (; s < S; ++s) { ta += gy[s]; tb += gy[s] * (x[s] - m); }
    *a += ta;
    *b += tb;
}

template <typename T>
static void tmpi_bn_forward_impl(const T* x, const T* gamma, const T* beta, T* y, T* mean_out,
                                 T* inv_std_out, const tmpi_bn_geom& g, double eps)
{
    const double count = (double)(g.N * g.S);
    #pragma omp parallel for schedule(static) if (g.N * g.C * g.S > 32768)
    for (npy_intp c = 0; c < g.C; ++c) {
        double sum = 0;
        for (npy_intp n = 0; n < g.N; ++n) sum += tmpi_bn_row_sum(x + (n * g.C + c) * g.S, g.S);
        const double mean = sum / count;
        double sq = 0;
        for (npy_intp n = 0; n < g.N; ++n) sq += tmpi_bn_row_sq(x + (n * g.C + c) * g.S, (T)mean, g.S);
        const double inv_std = 1.0 / sqrt(sq / count + eps);
        const T scale = (T)(inv_std * (double)gamma[c]);
        const T shift = (T)((double)beta[c] - mean * inv_std * (double)gamma[c]);
        for (npy_intp n = 0; n < g.N; ++n) {
            const T* xc = x + (n * g.C + c) * g.S;
            T* yc = y + (n * g.C + c) * g.S;
            for (npy_intp s = 0; s < g.S; ++s) yc[s] = xc[s] * scale + shift;
        }
        mean_out[c] = (T)mean;
        inv_std_out[c] = (T)inv_std;
    }
}

/* dbeta = sum(gy), dgamma = sum(gy * xhat),
   dx = gamma * inv_std * (gy - dbeta / M - xhat * dgamma / M), xhat = (x - mean) * inv_std. */
template <typename T>
static void tmpi_bn_backward_impl(const T* x, const T* gamma, const T* mean, const T* inv_std, const T* gy,
                                  T* dx, T* dgamma, T* dbeta, const tmpi_bn_geom& g)
{
    const double count = (double)(g.N * g.S);
    #pragma omp parallel for schedule(static) if (g.N * g.C * g.S > 32768)
    for (npy_intp c = 0; c < g.C; ++c) {
        const T m = mean[c];
        double sum_gy = 0, sum_gy_xc = 0;
        for (npy_intp n = 0; n < g.N; ++n)
            tmpi_bn_row_grad_sums(x + (n * g.C + c) * g.S, gy + (n * g.C + c) * g.S, m, g.S, &sum_gy, &sum_gy_xc);
        const double istd = (double)inv_std[c];
        const double dg = sum_gy_xc * istd;
        dbeta[c] = (T)sum_gy;
        dgamma[c] = (T)dg;
        const double k = (double)gamma[c] * istd;
        /* dx = k * gy - k * sum_gy / M - (x - mean) * k * istd * dg / M */
        const T a = (T)k;
        const T b = (T)(-k * sum_gy / count + (double)m * k * istd * dg / count);
        const T q = (T)(-k * istd * dg / count);
        for (npy_intp n = 0; n < g.N; ++n) {
            const T* xc = x + (n * g.C + c) * g.S;
            const T* gc = gy + (n * g.C + c) * g.S;
            T* dc = dx + (n * g.C + c) * g.S;
            for (npy_intp s = 0; s < g.S; ++s) dc[s] = a * gc[s] + q * xc[s] + b;
        }
    }
}

static int tmpi_bn_forward(PyArrayObject* x_in, PyArrayObject* gamma_in, PyArrayObject* beta_in,
                           PyArrayObject** y, PyArrayObject** mean, PyArrayObject** inv_std, double eps)
{
    const char* op = "batch_norm_train";
    tmpi_bn_geom g;
    if (tmpi_bn_geometry(x_in, &g, op, 0) != 0) return -1;
    if (tmpi_bn_check_vector(gamma_in, g.C, op, "gamma") != 0) return -1;
    if (tmpi_bn_check_vector(beta_in, g.C, op, "beta") != 0) return -1;
    const int typenum = PyArray_TYPE(x_in);
    npy_intp cdim[1] = {g.C};
    if (tmpi_bn_prepare(y, PyArray_NDIM(x_in), PyArray_DIMS(x_in), typenum) != 0) return -1;
    if (tmpi_bn_prepare(mean, 1, cdim, typenum) != 0 || tmpi_bn_prepare(inv_std, 1, cdim, typenum) != 0) return -1;
    PyArrayObject* x = PyArray_GETCONTIGUOUS(x_in);
    PyArrayObject* gamma = PyArray_GETCONTIGUOUS(gamma_in);
    PyArrayObject* beta = PyArray_GETCONTIGUOUS(beta_in);
    int rc = -1;
    if (x && gamma && beta) {
        if (typenum == NPY_FLOAT32)
            tmpi_bn_forward_impl<float>((float*)PyArray_DATA(x), (float*)PyArray_DATA(gamma),
                                        (float*)PyArray_DATA(beta), (float*)PyArray_DATA(*y),
                                        (float*)PyArray_DATA(*mean), (float*)PyArray_DATA(*inv_std), g, eps);
        else
            tmpi_bn_forward_impl<double>((double*)PyArray_DATA(x), (double*)PyArray_DATA(gamma),
                                         (double*)PyArray_DATA(beta), (double*)PyArray_DATA(*y),
                                         (double*)PyArray_DATA(*mean), (double*)PyArray_DATA(*inv_std), g, eps);
        rc = 0;
    }
    Py_XDECREF(x);
    Py_XDECREF(gamma);
    Py_XDECREF(beta);
    return rc;
}

static int tmpi_bn_backward(PyArrayObject* x_in, PyArrayObject* gamma_in, PyArrayObject* mean_in,
                            PyArrayObject* inv_std_in, PyArrayObject* gy_in, PyArrayObject** dx,
                            PyArrayObject** dgamma, PyArrayObject** dbeta)
{
    const char* op = "batch_norm_train_grad";
    tmpi_bn_geom g;
    if (tmpi_bn_geometry(x_in, &g, op, 0) != 0) return -1;
    if (tmpi_bn_check_vector(gamma_in, g.C, op, "gamma") != 0) return -1;
    if (tmpi_bn_check_vector(mean_in, g.C, op, "mean") != 0) return -1;
    if (tmpi_bn_check_vector(inv_std_in, g.C, op, "inv_std") != 0) return -1;
    const int nd = PyArray_NDIM(x_in);
    if (PyArray_NDIM(gy_in) != nd || !PyArray_SAMESHAPE(x_in, gy_in)) {
        PyErr_Format(PyExc_ValueError, "%s: output gradient must have the input's shape", op);
        return -1;
    }
    const int typenum = PyArray_TYPE(x_in);
    npy_intp cdim[1] = {g.C};
    if (tmpi_bn_prepare(dx, nd, PyArray_DIMS(x_in), typenum) != 0) return -1;
    if (tmpi_bn_prepare(dgamma, 1, cdim, typenum) != 0 || tmpi_bn_prepare(dbeta, 1, cdim, typenum) != 0) return -1;
    PyArrayObject* arrays[5] = {PyArray_GETCONTIGUOUS(x_in), PyArray_GETCONTIGUOUS(gamma_in),
                                PyArray_GETCONTIGUOUS(mean_in), PyArray_GETCONTIGUOUS(inv_std_in),
                                PyArray_GETCONTIGUOUS(gy_in)};
    int rc = -1;
    if (arrays[0] && arrays[1] && arrays[2] && arrays[3] && arrays[4]) {
        if (typenum == NPY_FLOAT32)
            tmpi_bn_backward_impl<float>((float*)PyArray_DATA(arrays[0]), (float*)PyArray_DATA(arrays[1]),
                                         (float*)PyArray_DATA(arrays[2]), (float*)PyArray_DATA(arrays[3]),
                                         (float*)PyArray_DATA(arrays[4]), (float*)PyArray_DATA(*dx),
                                         (float*)PyArray_DATA(*dgamma), (float*)PyArray_DATA(*dbeta), g);
        else
            tmpi_bn_backward_impl<double>((double*)PyArray_DATA(arrays[0]), (double*)PyArray_DATA(arrays[1]),
                                          (double*)PyArray_DATA(arrays[2]), (double*)PyArray_DATA(arrays[3]),
                                          (double*)PyArray_DATA(arrays[4]), (double*)PyArray_DATA(*dx),
                                          (double*)PyArray_DATA(*dgamma), (double*)PyArray_DATA(*dbeta), g);
        rc = 0;
    }
    for (int i = 0; i < 5; ++i) Py_XDECREF(arrays[i]);
    return rc;
}

/* Inference with given statistics: y = x * (gamma * inv_std) + (beta - mean * gamma * inv_std). */
template <typename T>
static void tmpi_bn_infer_impl(const T* x, const T* gamma, const T* beta, const T* mean, const T* inv_std, T* y,
                               const tmpi_bn_geom& g)
{
    #pragma omp parallel for schedule(static) if (g.N * g.C * g.S > 32768)
    for (npy_intp c = 0; c < g.C; ++c) {
        const double k = (double)gamma[c] * (double)inv_std[c];
        const T scale = (T)k;
        const T shift = (T)((double)beta[c] - (double)mean[c] * k);
        for (npy_intp n = 0; n < g.N; ++n) {
            const T* xc = x + (n * g.C + c) * g.S;
            T* yc = y + (n * g.C + c) * g.S;
            for (npy_intp s = 0; s < g.S; ++s) yc[s] = xc[s] * scale + shift;
        }
    }
}

static int tmpi_bn_infer(PyArrayObject* x_in, PyArrayObject* gamma_in, PyArrayObject* beta_in,
                         PyArrayObject* mean_in, PyArrayObject* inv_std_in, PyArrayObject** y)
{
    const char* op = "batch_norm_infer";
    tmpi_bn_geom g;
    if (tmpi_bn_geometry(x_in, &g, op, 1) != 0) return -1;
    const int nd = PyArray_NDIM(x_in);
    PyArrayObject* vectors[4] = {gamma_in, beta_in, mean_in, inv_std_in};
    const char* names[4] = {"gamma", "beta", "mean", "inv_std"};
    for (int i = 0; i < 4; ++i)
        if (tmpi_bn_check_vector(vectors[i], g.C, op, names[i]) != 0) return -1;
    const int typenum = PyArray_TYPE(x_in);
    if (tmpi_bn_prepare(y, nd, PyArray_DIMS(x_in), typenum) != 0) return -1;
    PyArrayObject* arrays[5] = {PyArray_GETCONTIGUOUS(x_in), PyArray_GETCONTIGUOUS(gamma_in),
                                PyArray_GETCONTIGUOUS(beta_in), PyArray_GETCONTIGUOUS(mean_in),
                                PyArray_GETCONTIGUOUS(inv_std_in)};
    int rc = -1;
    if (arrays[0] && arrays[1] && arrays[2] && arrays[3] && arrays[4]) {
        if (typenum == NPY_FLOAT32)
            tmpi_bn_infer_impl<float>((float*)PyArray_DATA(arrays[0]), (float*)PyArray_DATA(arrays[1]),
                                      (float*)PyArray_DATA(arrays[2]), (float*)PyArray_DATA(arrays[3]),
                                      (float*)PyArray_DATA(arrays[4]), (float*)PyArray_DATA(*y), g);
        else
            tmpi_bn_infer_impl<double>((double*)PyArray_DATA(arrays[0]), (double*)PyArray_DATA(arrays[1]),
                                       (double*)PyArray_DATA(arrays[2]), (double*)PyArray_DATA(arrays[3]),
                                       (double*)PyArray_DATA(arrays[4]), (double*)PyArray_DATA(*y), g);
        rc = 0;
    }
    for (int i = 0; i < 5; ++i) Py_XDECREF(arrays[i]);
    return rc;
}
