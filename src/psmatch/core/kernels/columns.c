/* The loops over plain columns: the sorted-column insert, range expansion and bit scatter
 * (src/psmatch/core/columns.py), and the byte range copies (src/psmatch/core/slot_bytes.py). */
#include "args.h"

static const Spec insert_specs[] = {
    {"column", ANY_INT, 0, 1, 1}, {"at", SIGNED, 8, 0, 1}, {"items", ANY_INT, 0, 0, 1},
};

PyObject *
psk_move_right_and_insert(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(insert_specs)];
    int64_t n;
    if (!psk_check_nargs("move_right_and_insert", nargs, 4) || !psk_scalar(args[1], &n))
        return NULL;
    PyObject *columns[3] = {args[0], args[2], args[3]};
    if (!ACQUIRE("move_right_and_insert", columns, insert_specs, v))
        return NULL;
    Py_ssize_t size = v[0].itemsize, k = LEN(v[2]);
    if (v[2].itemsize != size || LEN(v[1]) != k || n < 0 || LEN(v[0]) < n + k)
        return psk_refuse(v, COUNT(insert_specs), "move_right_and_insert(): items and column "
                          "differ in type, at and items in length, or column has no room for "
                          "them");
    char *column = v[0].buf;
    const char *items = v[2].buf;
    const int64_t *at = I64(v[1]);
    Py_BEGIN_ALLOW_THREADS
    /* From the last item down: the entries at or after its place move right past the
     * items still to come, in one block each. */
    int64_t i = n, w = n + k;
    for (Py_ssize_t j = k - 1; j >= 0; j--) {
        int64_t moved = i - at[j];
        if (moved > 0) {
            w -= moved;
            i -= moved;
            memmove(column + w * size, column + i * size, moved * size);
        }
        w--;
        memcpy(column + w * size, items + j * size, size);
    }
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(insert_specs));
    Py_RETURN_NONE;
}

static const Spec expand_specs[] = {
    {"starts", SIGNED, 8, 0, 1}, {"counts", SIGNED, 8, 0, 1}, {"owner", SIGNED, 8, 1, 1},
    {"index", SIGNED, 8, 1, 1},
};

PyObject *
psk_expand_ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(expand_specs)];
    if (!psk_check_nargs("expand_ranges", nargs, 4)
        || !ACQUIRE("expand_ranges", args, expand_specs, v))
        return NULL;
    const int64_t *starts = I64(v[0]), *counts = I64(v[1]);
    int64_t *owner = I64(v[2]), *index = I64(v[3]);
    Py_ssize_t n = LEN(v[1]), total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (counts[i] < 0)
            break;
        total += counts[i];
    }
    if (LEN(v[0]) < n || LEN(v[2]) != total || LEN(v[3]) != total)
        return psk_refuse(v, COUNT(expand_specs), "expand_ranges(): a count is negative, starts is "
                          "shorter than counts, or owner and index are not the counts' sum long");
    Py_BEGIN_ALLOW_THREADS
    int64_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        for (int64_t j = 0; j < counts[i]; j++, k++) {
            owner[k] = i;
            index[k] = starts[i] + j;
        }
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(expand_specs));
    Py_RETURN_NONE;
}

static const Spec bits_specs[] = {{"words", UNSIGNED, 8, 1, 1}, {"positions", UNSIGNED, 8, 0, 1}};

PyObject *
psk_set_bits(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(bits_specs)];
    if (!psk_check_nargs("set_bits", nargs, 2) || !ACQUIRE("set_bits", args, bits_specs, v))
        return NULL;
    uint64_t *words = U64(v[0]);
    const uint64_t *positions = U64(v[1]);
    Py_ssize_t n = LEN(v[1]);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        words[positions[i] >> 6] |= (uint64_t)1 << (positions[i] & 63);
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(bits_specs));
    Py_RETURN_NONE;
}

static const Spec copy_specs[] = {
    {"data", UNSIGNED, 1, 0, 1}, {"starts", SIGNED, 8, 0, 1}, {"lengths", SIGNED, 8, 0, 1},
    {"out", UNSIGNED, 1, 1, 1}, {"out_starts", SIGNED, 8, 0, 1},
};

PyObject *
psk_copy_ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(copy_specs)];
    if (!psk_check_nargs("copy_ranges", nargs, 5) || !ACQUIRE("copy_ranges", args, copy_specs, v))
        return NULL;
    const uint8_t *data = U8(v[0]);
    const int64_t *starts = I64(v[1]), *lengths = I64(v[2]), *out_starts = I64(v[4]);
    uint8_t *out = U8(v[3]);
    Py_ssize_t n = LEN(v[1]);
    Py_BEGIN_ALLOW_THREADS
    /* memmove: out may be data, its ranges moved left */
    for (Py_ssize_t i = 0; i < n; i++)
        memmove(out + out_starts[i], data + starts[i], lengths[i]);
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(copy_specs));
    Py_RETURN_NONE;
}

/* The bytes JSON adds when it writes byte b inside a string, as Python's json module
 * does (json.encoder.encode_basestring): '"' and '\\' and the five short escapes take
 * one more, the other controls below 0x20 five more (\u00xx), every other byte none
 * (UTF-8 is written as it is). */
