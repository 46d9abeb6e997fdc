/* The multimap's loops (their Python face: src/psmatch/core/multimap.py): the compaction
 * of its key-sorted CSR columns, the shift of offsets after a merge, the key directory's
 * buckets and its lower bounds, and the key filter's bits. */
#include "args.h"

static const Spec compact_specs[] = {
    {"keys", SIGNED, 8, 1, 1}, {"offsets", SIGNED, 4, 1, 1}, {"values", SIGNED, 4, 1, 1},
    {"kept", BOOL, 1, 0, 1},
};

PyObject *
psk_compact_in_place(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(compact_specs)];
    if (!psk_check_nargs("compact_in_place", nargs, 4)
        || !ACQUIRE("compact_in_place", args, compact_specs, v))
        return NULL;
    int64_t *keys = I64(v[0]);
    int32_t *offsets = I32(v[1]), *values = I32(v[2]);
    const char *kept = BOOLS(v[3]);
    Py_ssize_t n = LEN(v[0]);
    int64_t n_keys = 0, n_values = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t start = offsets[0];
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t stop = offsets[i + 1], before = n_values; /* read before it is overwritten */
        for (int64_t j = start; j < stop; j++)
            if (kept[j])
                values[n_values++] = values[j];
        if (n_values > before) {
            keys[n_keys] = keys[i];
            offsets[n_keys + 1] = (int32_t)n_values;
            n_keys++;
        }
        start = stop;
    }
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(compact_specs));
    return Py_BuildValue("(LL)", (long long)n_keys, (long long)n_values);
}

static const Spec shift_specs[] = {
    {"offsets", SIGNED, 4, 1, 1}, {"merged_at", SIGNED, 8, 0, 1}, {"step", SIGNED, 8, 0, 1},
};

PyObject *
psk_shift_offsets(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(shift_specs)];
    if (!psk_check_nargs("shift_offsets", nargs, 3)
        || !ACQUIRE("shift_offsets", args, shift_specs, v))
        return NULL;
    int32_t *offsets = I32(v[0]);
    const int64_t *merged_at = I64(v[1]), *step = I64(v[2]);
    Py_ssize_t n = LEN(v[0]), n_merged = LEN(v[1]);
    if (LEN(v[2]) < n_merged + 1)
        return psk_refuse(v, COUNT(shift_specs),
                          "shift_offsets(): step is shorter than merged_at + 1");
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t below = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        while (below < n_merged && merged_at[below] < j)
            below++;
        offsets[j] += (int32_t)step[below];
    }
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(shift_specs));
    Py_RETURN_NONE;
}

static const Spec bucket_specs[] = {{"keys", SIGNED, 8, 0, 1}, {"starts", SIGNED, 4, 1, 1}};

PyObject *
psk_bucket_starts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(bucket_specs)];
    int64_t shift;
    if (!psk_check_nargs("bucket_starts", nargs, 3) || !psk_scalar(args[2], &shift)
        || !ACQUIRE("bucket_starts", args, bucket_specs, v))
        return NULL;
    const int64_t *keys = I64(v[0]);
    int32_t *starts = I32(v[1]);
    Py_ssize_t n = LEN(v[0]);
    int64_t buckets = n ? (keys[n - 1] >> shift) - (keys[0] >> shift) + 1 : 0;
    if (LEN(v[1]) != buckets + 1)
        return psk_refuse(v, COUNT(bucket_specs),
                          "bucket_starts(): starts is not buckets + 1 long");
    int64_t b = 0;
    if (n) {
        int64_t base = keys[0] >> shift;
        for (Py_ssize_t i = 0; i < n; i++)
            for (int64_t bucket = (keys[i] >> shift) - base; b <= bucket; b++)
                starts[b] = (int32_t)i;
    }
    for (; b <= buckets; b++)
        starts[b] = (int32_t)n;
    psk_release(v, COUNT(bucket_specs));
    Py_RETURN_NONE;
}

static const Spec lower_specs[] = {
    {"keys", SIGNED, 8, 0, 1}, {"starts", SIGNED, 4, 0, 1}, {"queries", SIGNED, 8, 0, 1},
    {"out", SIGNED, 8, 1, 1},
};

PyObject *
psk_lower_bounds(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(lower_specs)];
    int64_t shift;
    if (!psk_check_nargs("lower_bounds", nargs, 5) || !psk_scalar(args[2], &shift))
        return NULL;
    PyObject *columns[4] = {args[0], args[1], args[3], args[4]};
    if (!ACQUIRE("lower_bounds", columns, lower_specs, v))
        return NULL;
    const int64_t *keys = I64(v[0]), *queries = I64(v[2]);
    const int32_t *starts = I32(v[1]);
    int64_t *out = I64(v[3]);
    Py_ssize_t n = LEN(v[0]), q = LEN(v[3]);
    if (LEN(v[2]) < q)
        return psk_refuse(v, COUNT(lower_specs), "lower_bounds(): queries is shorter than out");
    Py_BEGIN_ALLOW_THREADS
    int64_t base = n ? keys[0] >> shift : 0, top = n ? keys[n - 1] >> shift : 0;
    for (Py_ssize_t i = 0; i < q; i++) {
        int64_t query = queries[i];
        int64_t shifted = query >> shift; /* compared before subtracting: no overflow */
        if (!n || shifted < base)
            out[i] = 0;
        else if (shifted > top)
            out[i] = n;
        else {
            int64_t bucket = shifted - base;
            out[i] = lower_bound(keys, starts[bucket], starts[bucket + 1], query);
        }
    }
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(lower_specs));
    Py_RETURN_NONE;
}

/* The key filter's bit of a key: its multiplicative hash's top bits. */
static inline uint64_t
filter_bit(int64_t key, uint64_t multiplier, uint64_t shift)
{
    return ((uint64_t)key * multiplier) >> shift;
}

static const Spec filter_specs[] = {
    {"words", UNSIGNED, 8, 1, 1}, {"keys", SIGNED, 8, 0, 1}, {"out", BOOL, 1, 1, 1},
};

/* filter_add(words, keys, multiplier, shift) sets the keys' bits;
 * filter_may_hold(words, keys, multiplier, shift, out) reads them. */
static PyObject *
filter_kernel(const char *func, PyObject *const *args, Py_ssize_t nargs, int adding)
{
    Py_buffer v[3];
    uint64_t multiplier;
    int64_t shift;
    int n_columns = adding ? 2 : 3;
    if (!psk_check_nargs(func, nargs, adding ? 4 : 5) || !psk_unsigned_scalar(args[2], &multiplier)
        || !psk_scalar(args[3], &shift))
        return NULL;
    PyObject *columns[3] = {args[0], args[1], adding ? NULL : args[4]};
    if (!psk_acquire(func, columns, filter_specs, n_columns, v))
        return NULL;
    uint64_t *words = U64(v[0]);
    const int64_t *keys = I64(v[1]);
    Py_ssize_t n = LEN(v[1]);
    uint64_t n_bits = (uint64_t)LEN(v[0]) << 6;
    if (shift < 1 || shift > 63 || n_bits < ((uint64_t)1 << (64 - shift))
        || (!adding && LEN(v[2]) < n)) {
        psk_release(v, n_columns);
        PyErr_Format(PyExc_ValueError, "%s(): the shift leaves more bits than the words hold, "
                     "or out is shorter than keys", func);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (adding)
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t bit = filter_bit(keys[i], multiplier, shift);
            words[bit >> 6] |= (uint64_t)1 << (bit & 63);
        }
    else {
        char *out = (char *)v[2].buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t bit = filter_bit(keys[i], multiplier, shift);
            out[i] = (char)((words[bit >> 6] >> (bit & 63)) & 1);
        }
    }
    Py_END_ALLOW_THREADS
    psk_release(v, n_columns);
    Py_RETURN_NONE;
}

PyObject *
psk_filter_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return filter_kernel("filter_add", args, nargs, 1);
}

PyObject *
psk_filter_may_hold(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return filter_kernel("filter_may_hold", args, nargs, 0);
}
