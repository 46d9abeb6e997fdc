/* The notification record's writer: a CPython extension,
 * psmatch.service.records._notification_writer.
 *
 * Owns the two loops that write notification values (their meaning, cost and caller are
 * documented on their Python face, src/psmatch/service/records/notifications.py, which
 * owns the format): the lengths of byte strings once written as JSON strings, and the
 * values' bytes, each subscription id escaped as Python's json encoder does as it is
 * copied. C, so that a batch's hundreds of thousands of values are written with no
 * Python object per value; built once by `pip install` (setuptools, the system's C
 * compiler), like the library's loops (src/psmatch/core/_kernels.c), of which it uses
 * nothing: the service's format stays the service's.
 *
 * Arguments: every column is a C-contiguous one-dimensional buffer (a numpy array) of
 * the documented element type, checked on entry (TypeError naming the argument
 * otherwise), and the columns' lengths are checked against each other (ValueError). The
 * loops run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Element kinds of a column, checked against the buffer's struct format. */
enum kind { BOOL, SIGNED, UNSIGNED };

typedef struct {
    const char *name;
    enum kind kind;
    int size;     /* bytes per element */
    int writable;
    int ndim;
} Spec;

static const char *
kind_name(enum kind kind)
{
    switch (kind) {
    case BOOL: return "bool";
    case SIGNED: return "signed integer";
    default: return "unsigned integer";
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

/* Acquire the buffers of args[0 .. n - 1] as specs says; on failure release those taken,
 * set TypeError (or the buffer protocol's error) and return 0. */
static int
acquire(const char *func, PyObject *const *args, const Spec *specs, int n, Py_buffer *views)
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
        int size_ok = views[i].itemsize == spec->size;
        int kind_ok = format_kind(views[i].format, &kind) && kind == spec->kind;
        if (!size_ok || !kind_ok || views[i].ndim != spec->ndim) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument '%s' must be a %d-dimensional array of %d-byte %s, "
                         "not format '%s' (%zd bytes, %d dimensions)",
                         func, spec->name, spec->ndim, spec->size,
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

static void
release(Py_buffer *views, int n)
{
    for (int i = 0; i < n; i++)
        PyBuffer_Release(&views[i]);
}

/* Release the views and refuse the call's lengths: ValueError(message), NULL. */
static PyObject *
refuse(Py_buffer *views, int n, const char *message)
{
    release(views, n);
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
}

/* The number of columns a loop's specs describe, and the acquisition of them all. */
#define COUNT(specs) ((int)(sizeof(specs) / sizeof((specs)[0])))
#define ACQUIRE(func, args, specs, views) acquire(func, args, specs, COUNT(specs), views)

static int
check_nargs(const char *func, Py_ssize_t nargs, Py_ssize_t want)
{
    if (nargs == want)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", func, want, nargs);
    return 0;
}

#define LEN(view) ((view).shape[0])
#define I64(view) ((int64_t *)(view).buf)
#define U8(view) ((uint8_t *)(view).buf)

/* ------------------------------------------------------------------ notification values */

/* The bytes JSON adds when it writes byte b inside a string, as Python's json module
 * does (json.encoder.encode_basestring): '"' and '\\' and the five short escapes take
 * one more, the other controls below 0x20 five more (\u00xx), every other byte none
 * (UTF-8 is written as it is). */
static const uint8_t json_escape_extra[256] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
};

/* Write data[0:n] as a JSON string, quotes included, at out; return the end. */
static uint8_t *
write_json_string(uint8_t *out, const uint8_t *data, int64_t n)
{
    static const char hex[] = "0123456789abcdef";
    *out++ = '"';
    for (int64_t j = 0; j < n; j++) {
        uint8_t b = data[j];
        switch (json_escape_extra[b]) {
        case 0:
            *out++ = b;
            break;
        case 1:
            *out++ = '\\';
            *out++ = b == '\b' ? 'b' : b == '\t' ? 't' : b == '\n' ? 'n' : b == '\f' ? 'f'
                   : b == '\r' ? 'r' : b;
            break;
        default:
            memcpy(out, "\\u00", 4);
            out[4] = hex[b >> 4];
            out[5] = hex[b & 15];
            out += 6;
        }
    }
    *out++ = '"';
    return out;
}

static const Spec json_length_specs[] = {
    {"data", UNSIGNED, 1, 0, 1}, {"offsets", SIGNED, 8, 0, 1}, {"out", SIGNED, 8, 1, 1},
};

/* out[i] = the length of data[offsets[i]:offsets[i + 1]] written as a JSON string. */
static PyObject *
json_string_lengths(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(json_length_specs)];
    if (!check_nargs("json_string_lengths", nargs, COUNT(json_length_specs))
        || !ACQUIRE("json_string_lengths", args, json_length_specs, v))
        return NULL;
    const uint8_t *data = U8(v[0]);
    const int64_t *offsets = I64(v[1]);
    int64_t *out = I64(v[2]);
    Py_ssize_t n = LEN(v[2]);
    if (LEN(v[1]) < n + 1)
        return refuse(v, COUNT(json_length_specs),
                      "json_string_lengths(): offsets is not longer than out");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t length = 2 + offsets[i + 1] - offsets[i];
        for (int64_t j = offsets[i]; j < offsets[i + 1]; j++)
            length += json_escape_extra[data[j]];
        out[i] = length;
    }
    Py_END_ALLOW_THREADS
    release(v, COUNT(json_length_specs));
    Py_RETURN_NONE;
}

static const Spec notification_specs[] = {
    {"prefix", UNSIGNED, 1, 0, 1}, {"id_offsets", SIGNED, 8, 0, 1},
    {"id_data", UNSIGNED, 1, 0, 1}, {"subscriber_key", UNSIGNED, 1, 0, 1},
    {"repeat_id", BOOL, 1, 0, 1}, {"head_data", UNSIGNED, 1, 0, 1},
    {"head_lo", SIGNED, 8, 0, 1}, {"head_hi", SIGNED, 8, 0, 1},
    {"tail_offsets", SIGNED, 8, 0, 1}, {"tail_data", UNSIGNED, 1, 0, 1},
    {"tail_rows", SIGNED, 8, 0, 1}, {"out_offsets", SIGNED, 8, 0, 1},
    {"out", UNSIGNED, 1, 1, 1},
};

/* out[out_offsets[i]:] = prefix, row i of the ids' CSR column as a JSON string (and
 * again after subscriber_key if repeat_id[i]), head_data[head_lo[i]:head_hi[i]] and row
 * tail_rows[i] of the tails' CSR column, for every i. */
static PyObject *
join_notifications(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(notification_specs)];
    if (!check_nargs("join_notifications", nargs, COUNT(notification_specs))
        || !ACQUIRE("join_notifications", args, notification_specs, v))
        return NULL;
    const uint8_t *prefix = U8(v[0]), *id_data = U8(v[2]), *key = U8(v[3]);
    const uint8_t *repeat_id = U8(v[4]), *head_data = U8(v[5]), *tail_data = U8(v[9]);
    const int64_t *id_offsets = I64(v[1]), *head_lo = I64(v[6]), *head_hi = I64(v[7]);
    const int64_t *tail_offsets = I64(v[8]), *tail_rows = I64(v[10]);
    const int64_t *out_offsets = I64(v[11]);
    uint8_t *out = U8(v[12]);
    Py_ssize_t n = LEN(v[6]), prefix_length = LEN(v[0]), key_length = LEN(v[3]);
    if (LEN(v[1]) < n + 1 || LEN(v[4]) != n || LEN(v[7]) != n || LEN(v[10]) != n
        || LEN(v[11]) < n)
        return refuse(v, COUNT(notification_specs), "join_notifications(): repeat_id, "
                      "head_lo, head_hi and tail_rows differ in length, or id_offsets or "
                      "out_offsets is shorter");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t *at = out + out_offsets[i];
        int64_t head = head_hi[i] - head_lo[i], row = tail_rows[i];
        const uint8_t *sub_id = id_data + id_offsets[i];
        int64_t id_length = id_offsets[i + 1] - id_offsets[i];
        memcpy(at, prefix, prefix_length);
        at = write_json_string(at + prefix_length, sub_id, id_length);
        if (repeat_id[i]) {
            memcpy(at, key, key_length);
            at = write_json_string(at + key_length, sub_id, id_length);
        }
        memcpy(at, head_data + head_lo[i], head);
        memcpy(at + head, tail_data + tail_offsets[row], tail_offsets[row + 1] - tail_offsets[row]);
    }
    Py_END_ALLOW_THREADS
    release(v, COUNT(notification_specs));
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ module */

#define LOOP(name, doc) {#name, (PyCFunction)(void (*)(void))name, METH_FASTCALL, doc}

static PyMethodDef writer_methods[] = {
    LOOP(json_string_lengths,
         "See psmatch.service.records.notifications.NotificationHeads.join."),
    LOOP(join_notifications, "See psmatch.service.records.notifications.NotificationHeads.join."),
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef writer_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "psmatch.service.records._notification_writer",
    .m_doc = "The notification record's writer (see the comment at the top of "
             "src/psmatch/service/records/_notification_writer.c).",
    .m_size = -1,
    .m_methods = writer_methods,
};

PyMODINIT_FUNC
PyInit__notification_writer(void)
{
    return PyModule_Create(&writer_module);
}
