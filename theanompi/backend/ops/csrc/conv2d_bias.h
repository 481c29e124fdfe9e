#include <string.h>

/* z[o] = sum over n, h, w of gy[n, o, h, w]. Each row is summed with 16
   independent partial sums (vectorisable without -ffast-math), rows are
   accumulated in double. */
template <typename T>
static void tmpi_channel_sum_impl(const T* gy, T* z, npy_intp N, npy_intp O, npy_intp P)
{
    enum { LANES = 16 };
    for (npy_intp o = 0; o < O; ++o) {
        double acc = 0.0;
        for (npy_intp n = 0; n < N; ++n) {
            const T* row = gy + (n * O + o) * P;
            T part[LANES] = {0};
            npy_intp q = 0;
            for (; q + LANES <= P; q += LANES)
                for (int l = 0; l < LANES; ++l) part[l] += row[q + l];
            T s = 0;
            for (int l = 0; l < LANES; ++l) s += part[l];
            for (; q < P; ++q) s += row[q];
            acc += s;
        }
        z[o] = (T)acc;
    }
}

static int tmpi_conv2d_grad_bias(PyArrayObject* gy_in, PyArrayObject** z)
{
    npy_intp* d = PyArray_DIMS(gy_in);
    npy_intp O = d[1];
    const int typenum = PyArray_TYPE(gy_in);
    if (!(*z && PyArray_NDIM(*z) == 1 && PyArray_TYPE(*z) == typenum
          && PyArray_IS_C_CONTIGUOUS(*z) && PyArray_DIMS(*z)[0] == O)) {
        Py_XDECREF(*z);
        *z = (PyArrayObject*)PyArray_EMPTY(1, &O, typenum, 0);
        if (!*z) return -1;
    }
    PyArrayObject* gy = PyArray_GETCONTIGUOUS(gy_in);
    if (!gy) return -1;
    if (typenum == NPY_FLOAT32)
        tmpi_channel_sum_impl<float>((float*)PyArray_DATA(gy), (float*)PyArray_DATA(*z),
                                     d[0], O, d[2] * d[3]);
    else
        tmpi_channel_sum_impl<double>((double*)PyArray_DATA(gy), (double*)PyArray_DATA(*z),
                                      d[0], O, d[2] * d[3]);
    Py_DECREF(gy);
    return 0;
}
