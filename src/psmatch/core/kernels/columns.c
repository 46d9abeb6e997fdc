/* The loops over plain columns: the sorted-column insert, range expansion and bit scatter
 * (src/psmatch/core/columns.py), and the byte range copies (src/psmatch/core/slot_bytes.py).
 * Each checks the positions, counts and ranges it reads or writes in one pass first. */
#include "args.h"

static const Spec insert_specs[] = {
    {"column", ANY_INT, 0, 1, 1}, {"at", SIGNED, 8, 0, 1}, {"items", ANY_INT, 0, 0, 1},
};

/* move_right_and_insert(column, n, at, items): with entries 0 .. n - 1 of column valid
 * and room after them, items[j] goes before entry at[j] (np.insert(column[:n], at,
 * items)); at must be non-decreasing, within [0, n]. */
PyObject *
psk_move_right_and_insert(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "move_right_and_insert";
    Py_buffer v[COUNT(insert_specs)];
    int64_t n;
    if (!psk_check_nargs(func, nargs, 4) || !psk_scalar(args[1], &n))
        return NULL;
    PyObject *columns[3] = {args[0], args[2], args[3]};
    if (!ACQUIRE(func, columns, insert_specs, v))
        return NULL;
    Py_ssize_t size = v[0].itemsize, k = LEN(v[2]);
    if (v[2].itemsize != size || LEN(v[1]) != k || n < 0 || n > LEN(v[0]) - k)
        return psk_refuse(v, COUNT(insert_specs), "move_right_and_insert(): items and column "
                          "differ in type, at and items in length, or column has no room for "
                          "them");
    char *column = v[0].buf;
    const char *items = v[2].buf;
    const int64_t *at = I64(v[1]);
    if (psk_first_outside(at, k, 0, n + 1) >= 0 || psk_first_descent(at, k) >= 0)
        return psk_refuse_arg(v, COUNT(insert_specs), func, "at",
                              "is not non-decreasing within [0, n]");
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

/* expand_ranges(starts, counts, owner, index): owner, index = the range i and the index
 * starts[i] + j of each j < counts[i], in order; owner and index are the counts' sum
 * long, each count is 0 or more and no range ends past the int64 range. */
PyObject *
psk_expand_ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "expand_ranges";
    Py_buffer v[COUNT(expand_specs)];
    if (!psk_check_nargs(func, nargs, 4) || !ACQUIRE(func, args, expand_specs, v))
        return NULL;
    const int64_t *starts = I64(v[0]), *counts = I64(v[1]);
    int64_t *owner = I64(v[2]), *index = I64(v[3]);
    Py_ssize_t n = LEN(v[1]);
    int64_t total = 0;
    if (LEN(v[0]) < n)
        return psk_refuse_arg(v, COUNT(expand_specs), func, "starts", "is shorter than counts");
    for (Py_ssize_t i = 0; i < n; i++) {
        if (counts[i] < 0)
            return psk_refuse_arg(v, COUNT(expand_specs), func, "counts",
                                  "holds a negative count");
        if (__builtin_add_overflow(total, counts[i], &total) || starts[i] > INT64_MAX - counts[i])
            return psk_refuse_arg(v, COUNT(expand_specs), func, "counts",
                                  "overflows int64 (their sum, or a range's end)");
    }
    if (LEN(v[2]) != total || LEN(v[3]) != total)
        return psk_refuse(v, COUNT(expand_specs), "expand_ranges(): owner and index are not "
                          "the counts' sum long");
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

/* set_bits(words, positions): bit p % 64 of word p // 64 for every p, each below
 * 64 * len(words). */
PyObject *
psk_set_bits(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(bits_specs)];
    if (!psk_check_nargs("set_bits", nargs, 2) || !ACQUIRE("set_bits", args, bits_specs, v))
        return NULL;
    uint64_t *words = U64(v[0]);
    const uint64_t *positions = U64(v[1]);
    Py_ssize_t n = LEN(v[1]);
    uint64_t n_words = (uint64_t)LEN(v[0]);
    for (Py_ssize_t i = 0; i < n; i++)
        if ((positions[i] >> 6) >= n_words)
            return psk_refuse_arg(v, COUNT(bits_specs), "set_bits", "positions",
                                  "holds a bit past the words");
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

/* Whether [start, start + length) is a range of a column of size bytes (length >= 0). */
static inline int
range_within(int64_t start, int64_t length, Py_ssize_t size)
{
    return start >= 0 && start <= size - length;
}

/* copy_ranges(data, starts, lengths, out, out_starts): out[out_starts[i]:][:lengths[i]] =
 * data[starts[i]:][:lengths[i]] for each i in order; every range inside its column. */
PyObject *
psk_copy_ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "copy_ranges";
    Py_buffer v[COUNT(copy_specs)];
    if (!psk_check_nargs(func, nargs, 5) || !ACQUIRE(func, args, copy_specs, v))
        return NULL;
    const uint8_t *data = U8(v[0]);
    const int64_t *starts = I64(v[1]), *lengths = I64(v[2]), *out_starts = I64(v[4]);
    uint8_t *out = U8(v[3]);
    Py_ssize_t n = LEN(v[1]);
    if (LEN(v[2]) != n || LEN(v[4]) != n)
        return psk_refuse(v, COUNT(copy_specs), "copy_ranges(): starts, lengths and "
                          "out_starts differ in length");
    for (Py_ssize_t i = 0; i < n; i++) {
        if (lengths[i] < 0)
            return psk_refuse_arg(v, COUNT(copy_specs), func, "lengths",
                                  "holds a negative length");
        if (!range_within(starts[i], lengths[i], LEN(v[0])))
            return psk_refuse_arg(v, COUNT(copy_specs), func, "starts",
                                  "holds a range outside data");
        if (!range_within(out_starts[i], lengths[i], LEN(v[3])))
            return psk_refuse_arg(v, COUNT(copy_specs), func, "out_starts",
                                  "holds a range outside out");
    }
    Py_BEGIN_ALLOW_THREADS
    /* memmove: out may be data, its ranges moved left */
    for (Py_ssize_t i = 0; i < n; i++)
        memmove(out + out_starts[i], data + starts[i], lengths[i]);
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(copy_specs));
    Py_RETURN_NONE;
}
