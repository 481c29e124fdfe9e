/* Momentum SGD over many parameters: v <- mu * v - lr * g; p <- p + v (one parameter per call).
   As the graph it replaces: lr * g in T, mu * v and the difference in double, rounded to T. */

template <typename T>
static void tmpi_momentum_impl(T* p, T* v, const T* g, npy_intp size, T lr, double mu)
{
    for (npy_intp i = 0; i < size; ++i) {
        const T step = (T)(mu * (double)v[i] - (double)(lr * g[i]));
        v[i] = step;
        p[i] += step;
    }
}

/* *out: `in` itself when updating in place is allowed, else a fresh C-contiguous copy of `in`. */
static int tmpi_momentum_output(PyArrayObject* in, PyArrayObject** out, int inplace)
{
    if (inplace && PyArray_IS_C_CONTIGUOUS(in) && PyArray_ISWRITEABLE(in)) {
        if (*out != in) {
            Py_XDECREF(*out);
            Py_INCREF(in);
            *out = in;
        }
        return 0;
    }
    if (!(*out && *out != in && PyArray_NDIM(*out) == PyArray_NDIM(in) && PyArray_SAMESHAPE(*out, in)
          && PyArray_TYPE(*out) == PyArray_TYPE(in) && PyArray_IS_C_CONTIGUOUS(*out)
          && PyArray_ISWRITEABLE(*out))) {
        Py_XDECREF(*out);
        *out = (PyArrayObject*)PyArray_EMPTY(PyArray_NDIM(in), PyArray_DIMS(in), PyArray_TYPE(in), 0);
        if (*out == NULL) return -1;
    }
    return PyArray_CopyInto(*out, in);
}

static int tmpi_momentum_step(int k, PyArrayObject* p, PyArrayObject* v, PyArrayObject* g_in,
                              PyArrayObject** p_out, PyArrayObject** v_out, double lr, double mu, int inplace)
{
    if (PyArray_NDIM(p) != PyArray_NDIM(v) || !PyArray_SAMESHAPE(p, v)
        || PyArray_NDIM(p) != PyArray_NDIM(g_in) || !PyArray_SAMESHAPE(p, g_in)) {
        PyErr_Format(PyExc_ValueError, "momentum_sgd: parameter %d, its velocity and its gradient must have "
                     "one shape (sizes %ld, %ld, %ld)", k, (long)PyArray_SIZE(p), (long)PyArray_SIZE(v),
                     (long)PyArray_SIZE(g_in));
        return -1;
    }
    if (tmpi_momentum_output(p, p_out, inplace) != 0 || tmpi_momentum_output(v, v_out, inplace) != 0) return -1;
    if (*p_out == *v_out) {
        PyErr_Format(PyExc_ValueError, "momentum_sgd: parameter %d and its velocity share memory", k);
        return -1;
    }
    PyArrayObject* g = PyArray_GETCONTIGUOUS(g_in);
    if (g == NULL) return -1;
    const npy_intp size = PyArray_SIZE(p);
    if (PyArray_TYPE(p) == NPY_FLOAT32)
        tmpi_momentum_impl<float>((float*)PyArray_DATA(*p_out), (float*)PyArray_DATA(*v_out),
                                  (const float*)PyArray_DATA(g), size, (float)lr, mu);
    else
        tmpi_momentum_impl<double>((double*)PyArray_DATA(*p_out), (double*)PyArray_DATA(*v_out),
                                   (const double*)PyArray_DATA(g), size, lr, mu);
    Py_DECREF(g);
    return 0;
}
