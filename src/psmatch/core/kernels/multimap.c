/* The multimap's loops (their Python face: src/psmatch/core/multimap.py): the compaction
 * of its key-sorted CSR columns, the shift of offsets after a merge, the key directory's
 * buckets and its lower bounds, and the key filter's bits. Each checks the offsets, keys
 * and shifts it relies on before its loop. */
#include "args.h"

static const Spec compact_specs[] = {
    {"keys", SIGNED, 8, 1, 1}, {"offsets", SIGNED, 4, 1, 1}, {"values", SIGNED, 4, 1, 1},
    {"kept", BOOL, 1, 0, 1},
};

/* compact_in_place(keys, offsets, values, kept) -> (keys kept, values kept): the CSR
 * entries kept marks, and the keys left with one, moved left in place; offsets (one more
 * than keys) ascend from 0 or more to at most the length of values and of kept. */
PyObject *
psk_compact_in_place(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "compact_in_place";
    Py_buffer v[COUNT(compact_specs)];
    if (!psk_check_nargs(func, nargs, 4) || !ACQUIRE(func, args, compact_specs, v))
        return NULL;
    int64_t *keys = I64(v[0]);
    int32_t *offsets = I32(v[1]), *values = I32(v[2]);
    const char *kept = BOOLS(v[3]);
    Py_ssize_t n = LEN(v[0]);
    Py_ssize_t limit = LEN(v[2]) < LEN(v[3]) ? LEN(v[2]) : LEN(v[3]);
    if (LEN(v[1]) < n + 1)
        return psk_refuse_arg(v, COUNT(compact_specs), func, "offsets",
                              "is not longer than keys");
    int ascending = offsets[0] >= 0 && offsets[n] <= limit;
    for (Py_ssize_t i = 0; ascending && i < n; i++)
        ascending = offsets[i] <= offsets[i + 1];
    if (!ascending)
        return psk_refuse_arg(v, COUNT(compact_specs), func, "offsets", "does not ascend from 0 "
                              "or more to at most the length of values and kept");
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

/* shift_offsets(offsets, merged_at, step): offsets[j] += step[i], i the number of the
 * non-decreasing merged_at below j; step is one longer than merged_at and no shifted
 * offset leaves the int32 range (checked in a first pass, so that a refused call writes
 * nothing). */
PyObject *
psk_shift_offsets(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "shift_offsets";
    Py_buffer v[COUNT(shift_specs)];
    if (!psk_check_nargs(func, nargs, 3) || !ACQUIRE(func, args, shift_specs, v))
        return NULL;
    int32_t *offsets = I32(v[0]);
    const int64_t *merged_at = I64(v[1]), *step = I64(v[2]);
    Py_ssize_t n = LEN(v[0]), n_merged = LEN(v[1]);
    if (LEN(v[2]) < n_merged + 1)
        return psk_refuse(v, COUNT(shift_specs),
                          "shift_offsets(): step is shorter than merged_at + 1");
    if (psk_first_descent(merged_at, n_merged) >= 0)
        return psk_refuse_arg(v, COUNT(shift_specs), func, "merged_at", "is not non-decreasing");
    if (psk_first_outside(step, n_merged + 1, INT32_MIN, (int64_t)INT32_MAX + 1) >= 0)
        return psk_refuse_arg(v, COUNT(shift_specs), func, "step", "holds a step outside int32");
    int fits = 1;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t below = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        while (below < n_merged && merged_at[below] < j)
            below++;
        int64_t shifted = offsets[j] + step[below];
        fits &= shifted >= INT32_MIN && shifted <= INT32_MAX;
    }
    below = 0;
    for (Py_ssize_t j = 0; fits && j < n; j++) {
        while (below < n_merged && merged_at[below] < j)
            below++;
        offsets[j] = (int32_t)(offsets[j] + step[below]);
    }
    Py_END_ALLOW_THREADS
    if (!fits)
        return psk_refuse_arg(v, COUNT(shift_specs), func, "step",
                              "shifts an offset out of the int32 range");
    psk_release(v, COUNT(shift_specs));
    Py_RETURN_NONE;
}

/* The key directory's buckets: key >> shift less the smallest key's, for sorted keys. The
 * number of buckets of keys[0 .. n - 1], or -1 when it overflows int64. */
static int64_t
bucket_count(const int64_t *keys, Py_ssize_t n, int64_t shift)
{
    int64_t span;
    if (!n)
        return 0;
    if (__builtin_sub_overflow(keys[n - 1] >> shift, keys[0] >> shift, &span) || span >= INT64_MAX)
        return -1;
    return span + 1;
}

static const Spec bucket_specs[] = {{"keys", SIGNED, 8, 0, 1}, {"starts", SIGNED, 4, 1, 1}};

/* bucket_starts(keys, starts, shift): starts[b], the index of the first key whose bucket is
 * b or more, for every bucket and one past the last; keys non-decreasing, fewer than
 * 2 ** 31, shift in [0, 63], starts one longer than the buckets. */
PyObject *
psk_bucket_starts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "bucket_starts";
    Py_buffer v[COUNT(bucket_specs)];
    int64_t shift;
    if (!psk_check_nargs(func, nargs, 3) || !psk_scalar(args[2], &shift)
        || !ACQUIRE(func, args, bucket_specs, v))
        return NULL;
    const int64_t *keys = I64(v[0]);
    int32_t *starts = I32(v[1]);
    Py_ssize_t n = LEN(v[0]);
    if (shift < 0 || shift > 63)
        return psk_refuse(v, COUNT(bucket_specs), "bucket_starts(): shift is not in [0, 63]");
    if (n > INT32_MAX || psk_first_descent(keys, n) >= 0)
        return psk_refuse_arg(v, COUNT(bucket_specs), func, "keys",
                              "is not non-decreasing, or holds 2 ** 31 keys or more");
    int64_t buckets = bucket_count(keys, n, shift);
    if (buckets < 0 || LEN(v[1]) != buckets + 1)
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

/* lower_bounds(keys, starts, shift, queries, out): np.searchsorted(keys, queries) through
 * the buckets' starts (bucket_starts). Checked: shift, and starts one longer than the
 * buckets; the two starts a query reads must lie in order within the keys (checked where
 * read: a pass over all of starts would cost O(buckets) a call, not O(queries)). The keys'
 * order is bucket_starts' check: unsorted keys give wrong bounds, never a read outside. */
PyObject *
psk_lower_bounds(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "lower_bounds";
    Py_buffer v[COUNT(lower_specs)];
    int64_t shift;
    if (!psk_check_nargs(func, nargs, 5) || !psk_scalar(args[2], &shift))
        return NULL;
    PyObject *columns[4] = {args[0], args[1], args[3], args[4]};
    if (!ACQUIRE(func, columns, lower_specs, v))
        return NULL;
    const int64_t *keys = I64(v[0]), *queries = I64(v[2]);
    const int32_t *starts = I32(v[1]);
    int64_t *out = I64(v[3]);
    Py_ssize_t n = LEN(v[0]), q = LEN(v[3]);
    if (LEN(v[2]) < q)
        return psk_refuse(v, COUNT(lower_specs), "lower_bounds(): queries is shorter than out");
    if (shift < 0 || shift > 63)
        return psk_refuse(v, COUNT(lower_specs), "lower_bounds(): shift is not in [0, 63]");
    int64_t buckets = bucket_count(keys, n, shift);
    if (buckets < 0 || LEN(v[1]) != buckets + 1)
        return psk_refuse_arg(v, COUNT(lower_specs), func, "starts",
                              "is not one longer than the keys' buckets");
    int disordered = 0;
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
            int64_t bucket = shifted - base, lo = starts[bucket], hi = starts[bucket + 1];
            if (lo < 0 || lo > hi || hi > n) {
                disordered = 1;
                break;
            }
            out[i] = lower_bound(keys, lo, hi, query);
        }
    }
    Py_END_ALLOW_THREADS
    if (disordered)
        return psk_refuse_arg(v, COUNT(lower_specs), func, "starts",
                              "holds a bucket that is not a range of the keys");
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
 * filter_may_hold(words, keys, multiplier, shift, out) reads them. A bit is below
 * 2 ** (64 - shift), which the words must hold: no key's bit is outside them. */
static PyObject *
filter_kernel(const char *func, PyObject *const *args, Py_ssize_t nargs, int adding)
{
    Py_buffer v[3];
    uint64_t multiplier;
    int64_t shift;
    int n_columns = adding ? 2 : 3;
    if (!psk_check_nargs(func, nargs, adding ? 4 : 5)
        || !psk_unsigned_scalar(args[2], &multiplier) || !psk_scalar(args[3], &shift))
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
