/* The argument checks every kernel of psmatch.core._kernels shares: acquiring each column
 * as a C-contiguous buffer of its documented element type, size, dimensions and
 * writability (TypeError naming the argument otherwise), the count of arguments, the
 * Python int scalars, the int64 columns a kernel returns, and the passes that check the
 * values a loop relies on: indices in range, offsets ascending (declared in args.h). */
#include "args.h"

static const char *
kind_name(enum kind kind)
{
    switch (kind) {
    case BOOL: return "bool";
    case SIGNED: return "signed integer";
    case UNSIGNED: return "unsigned integer";
    default: return "integer";
    }
}

static int
format_kind(const char *format, enum kind *kind)
{
    if (format == NULL) {
        *kind = UNSIGNED; /* PyBUF_FORMAT absent: plain bytes */
        return 1;
    }
    while (*format == '@' || *format == '=' || *format == '<')
        format++;
    if (format[0] == '\0' || format[1] != '\0')
        return 0;
    if (*format == '?')
        *kind = BOOL;
    else if (strchr("bhilqn", *format))
        *kind = SIGNED;
    else if (strchr("BHILQN", *format))
        *kind = UNSIGNED;
    else
        return 0;
    return 1;
}

int
psk_acquire(const char *func, PyObject *const *args, const Spec *specs, int n,
            Py_buffer *views)
{
    for (int i = 0; i < n; i++) {
        const Spec *spec = &specs[i];
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (spec->writable ? PyBUF_WRITABLE : 0);
        enum kind kind;
        if (PyObject_GetBuffer(args[i], &views[i], flags) < 0) {
            PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be a %sC-contiguous array",
                         func, spec->name, spec->writable ? "writable " : "");
            goto fail;
        }
        int size_ok = spec->size ? views[i].itemsize == spec->size
                                 : views[i].itemsize == 4 || views[i].itemsize == 8;
        int kind_ok = format_kind(views[i].format, &kind)
                      && (spec->kind == ANY_INT ? kind != BOOL : kind == spec->kind);
        if (!size_ok || !kind_ok || views[i].ndim != spec->ndim) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument '%s' must be a %d-dimensional array of %d-byte %s, "
                         "not format '%s' (%zd bytes, %d dimensions)",
                         func, spec->name, spec->ndim, spec->size ? spec->size : 8,
                         kind_name(spec->kind), views[i].format ? views[i].format : "B",
                         views[i].itemsize, views[i].ndim);
            PyBuffer_Release(&views[i]);
            goto fail;
        }
        continue;
    fail:
        while (i-- > 0)
            PyBuffer_Release(&views[i]);
        return 0;
    }
    return 1;
}

void
psk_release(Py_buffer *views, int n)
{
    for (int i = 0; i < n; i++)
        PyBuffer_Release(&views[i]);
}

PyObject *
psk_refuse(Py_buffer *views, int n, const char *message)
{
    psk_release(views, n);
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
}

int
psk_check_nargs(const char *func, Py_ssize_t nargs, Py_ssize_t want)
{
    if (nargs == want)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", func, want, nargs);
    return 0;
}

int
psk_scalar(PyObject *obj, int64_t *out)
{
    long long value = PyLong_AsLongLong(obj);
    if (value == -1 && PyErr_Occurred())
        return 0;
    *out = value;
    return 1;
}

int
psk_unsigned_scalar(PyObject *obj, uint64_t *out)
{
    unsigned long long value = PyLong_AsUnsignedLongLong(obj);
    if (value == (unsigned long long)-1 && PyErr_Occurred())
        return 0;
    *out = value;
    return 1;
}

PyObject *
psk_new_int64_column(Py_ssize_t n)
{
    if (n < 0 || n > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(int64_t))
        return PyErr_NoMemory(); /* more than any address space: the size cannot overflow */
    return PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
}

PyObject *
psk_refuse_arg(Py_buffer *views, int n, const char *func, const char *name, const char *what)
{
    psk_release(views, n);
    PyErr_Format(PyExc_ValueError, "%s(): argument '%s' %s", func, name, what);
    return NULL;
}

Py_ssize_t
psk_first_outside(const int64_t *values, Py_ssize_t n, int64_t lo, int64_t hi)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (values[i] < lo || values[i] >= hi)
            return i;
    return -1;
}

Py_ssize_t
psk_first_outside32(const int32_t *values, Py_ssize_t n, int64_t lo, int64_t hi)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (values[i] < lo || values[i] >= hi)
            return i;
    return -1;
}

Py_ssize_t
psk_first_descent(const int64_t *values, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i + 1 < n; i++)
        if (values[i + 1] < values[i])
            return i;
    return -1;
}

int
psk_offsets_within(const int64_t *offsets, Py_ssize_t n, int64_t limit)
{
    if (offsets[0] < 0 || offsets[n] > limit)
        return 0;
    return psk_first_descent(offsets, n + 1) < 0;
}
