/* Helpers shared by the ops' C code (included before each op's own source). */
#ifndef TMPI_COMMON_H
#define TMPI_COMMON_H

/* Make *out a C-contiguous 4-D array of the given shape/type (reusing it when possible). */
static int tmpi_prepare_output4(PyArrayObject** out, npy_intp* dims, int typenum)
{
    if (*out && PyArray_NDIM(*out) == 4 && PyArray_TYPE(*out) == typenum
        && PyArray_IS_C_CONTIGUOUS(*out)) {
        npy_intp* d = PyArray_DIMS(*out);
        if (d[0] == dims[0] && d[1] == dims[1] && d[2] == dims[2] && d[3] == dims[3]) return 0;
    }
    Py_XDECREF(*out);
    *out = (PyArrayObject*)PyArray_EMPTY(4, dims, typenum, 0);
    return *out ? 0 : -1;
}

#endif
