/* The compiled loops of psmatch: a CPython extension, psmatch.core._kernels.
 *
 * Owns the machine code of the loops numpy has no single expression for: the PS-Tree
 * verification and PSTHash's candidate scans (src/psmatch/pstree/kernels.py), PSTBloom's Bloom
 * signatures (src/psmatch/pstree/pstbloom.py), the multimap's compaction, merge, key directory
 * and key filter (src/psmatch/core/multimap.py), the sorted-column insert, range expansion and
 * bit scatter (src/psmatch/core/columns.py), the id table (src/psmatch/core/slot_ids.py), the byte
 * range copies (src/psmatch/core/slot_bytes.py) and the notification heads' assembly
 * (src/psmatch/service/heads.py). Each loop's meaning, cost and callers are documented on its
 * Python wrapper in those modules, which also allocates its outputs where their length is
 * known; this file holds the loops and the checks of their arguments.
 *
 * Why C and not numba (which compiled them before): numba needs LLVM in every process
 * that runs a kernel, about 115 MiB of resident memory per Spark Python worker, and a
 * cache of machine code to load on a worker's first call. These loops are plain C over
 * flat columns; built once by `pip install` (setuptools, the system's C compiler).
 *
 * Arguments: every column is a C-contiguous buffer (a numpy array) of the documented
 * element type, checked on entry (TypeError naming the argument otherwise); scalars are
 * Python ints. The loops run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Element kinds of a column, checked against the buffer's struct format. */
enum kind { BOOL, SIGNED, UNSIGNED, ANY_INT };

typedef struct {
    const char *name;
    enum kind kind;
    int size;     /* bytes per element; 0: 4 or 8 */
    int writable;
    int ndim;
} Spec;

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

static int
scalar(PyObject *obj, int64_t *out)
{
    long long value = PyLong_AsLongLong(obj);
    if (value == -1 && PyErr_Occurred())
        return 0;
    *out = value;
    return 1;
}

static int
unsigned_scalar(PyObject *obj, uint64_t *out)
{
    unsigned long long value = PyLong_AsUnsignedLongLong(obj);
    if (value == (unsigned long long)-1 && PyErr_Occurred())
        return 0;
    *out = value;
    return 1;
}

#define LEN(view) ((view).shape[0])
#define I64(view) ((int64_t *)(view).buf)
#define I32(view) ((int32_t *)(view).buf)
#define U64(view) ((uint64_t *)(view).buf)
#define U32(view) ((uint32_t *)(view).buf)
#define U8(view) ((uint8_t *)(view).buf)
#define BOOLS(view) ((const char *)(view).buf)

/* An int64 column the kernel fills: a bytearray, viewed by its caller with np.frombuffer. */
static PyObject *
new_int64_column(Py_ssize_t n)
{
    return PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
}

/* The first index of sorted[lo:hi] whose value is >= value (np.searchsorted, left). */
static inline int64_t
lower_bound(const int64_t *sorted, int64_t lo, int64_t hi, int64_t value)
{
    while (lo < hi) {
        int64_t middle = lo + ((hi - lo) >> 1);
        if (sorted[middle] < value)
            lo = middle + 1;
        else
            hi = middle;
    }
    return lo;
}

/* ------------------------------------------------------------------ PS-Tree kernels */

/* A bound code is an interval end as stored: bound id * 2 + closed, -1 when unbounded;
 * its space position comes from the bound's rank in its tree (see
 * psmatch.pstree.forest.UNBOUNDED_HI). */
static inline int64_t
lo_position(int32_t code, const int32_t *bound_rank)
{
    return code < 0 ? 0 : 2 * (int64_t)bound_rank[code >> 1] + 2 - (code & 1);
}

static inline int64_t
hi_position(int32_t code, const int32_t *bound_rank, int64_t unbounded_hi)
{
    return code < 0 ? unbounded_hi : 2 * (int64_t)bound_rank[code >> 1] + (code & 1);
}

/* Whether pos is inside one of the intervals of a run: its count, then each interval's
 * low and high bound codes, in order (scanned up to the first above pos). */
static inline int
inside_any_interval(int64_t pos, const int32_t *run, const int32_t *bound_rank,
                    int64_t unbounded_hi)
{
    for (int32_t j = 0; j < run[0]; j++) {
        if (pos < lo_position(run[1 + 2 * j], bound_rank))
            return 0;
        if (pos <= hi_position(run[2 + 2 * j], bound_rank, unbounded_hi))
            return 1;
    }
    return 0;
}

/* A predicate row: its tree, its low end and the bound code of its hull's high end. The
 * low end is a bound code (-1: unbounded) for a single interval; a predicate of several
 * has -2 - (the start of its run in runs) there instead, its hull's low end being its run's
 * first. */
enum { ROW_TREE, ROW_LO, ROW_HI, ROW_WIDTH };
#define ROW_RUN(lo) (-2 - (lo))

static const Spec verify_specs[] = {
    {"events", SIGNED, 8, 0, 1}, {"cids", SIGNED, 8, 0, 1}, {"checked", SIGNED, 4, 0, 1},
    {"positions", SIGNED, 4, 0, 2}, {"alive", BOOL, 1, 0, 1},
    {"tree_mask", UNSIGNED, 8, 0, 1}, {"pred_start", SIGNED, 4, 0, 1},
    {"pred_count", SIGNED, 4, 0, 1}, {"rows", SIGNED, 4, 0, 2},
    {"runs", SIGNED, 4, 0, 1}, {"bound_rank", SIGNED, 4, 0, 1},
    {"kept", SIGNED, 8, 1, 1},
};

static PyObject *
verify_candidates(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(verify_specs)];
    int64_t unbounded_hi;
    if (!check_nargs("verify_candidates", nargs, COUNT(verify_specs) + 1)
        || !scalar(args[COUNT(verify_specs)], &unbounded_hi)
        || !ACQUIRE("verify_candidates", args, verify_specs, v))
        return NULL;
    const int64_t *events = I64(v[0]), *cids = I64(v[1]);
    const int32_t *checked = I32(v[2]), *positions = I32(v[3]);
    const char *alive = BOOLS(v[4]);
    const uint64_t *tree_mask = U64(v[5]);
    const int32_t *pred_start = I32(v[6]), *pred_count = I32(v[7]), *rows = I32(v[8]);
    const int32_t *runs = I32(v[9]), *bound_rank = I32(v[10]);
    int64_t *kept = I64(v[11]);
    Py_ssize_t n = LEN(v[1]), n_events = v[3].shape[0], n_trees = v[3].shape[1];
    if (LEN(v[0]) != n || LEN(v[2]) != n || LEN(v[11]) < n || v[8].shape[1] != ROW_WIDTH)
        return refuse(v, COUNT(verify_specs), "verify_candidates(): events, cids and checked "
                      "differ in length, kept is shorter, or rows is not [rows, 3]");
    uint64_t *has = malloc((n_events ? n_events : 1) * sizeof(uint64_t));
    int32_t *first = malloc((n ? 2 * n : 1) * sizeof(int32_t)); /* and each one's end */
    if (!has || !first) {
        free(has);
        free(first);
        release(v, COUNT(verify_specs));
        return PyErr_NoMemory();
    }
    int32_t *end = first + n;
    int64_t n_kept = 0;
    Py_BEGIN_ALLOW_THREADS
    /* Pass 0: the mask of the trees each event has (bit t % 64 for tree t). */
    for (Py_ssize_t e = 0; e < n_events; e++) {
        uint64_t mask = 0;
        for (Py_ssize_t t = 0; t < n_trees; t++)
            if (positions[e * n_trees + t] >= 0)
                mask |= (uint64_t)1 << (t & 63);
        has[e] = mask;
    }
    /* Pass 1: each live candidate's first unchecked row (-1: dead, or it needs a tree its
     * event lacks), and its conjunct's end; these loads do not depend on each other, so
     * the processor overlaps their cache misses. */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t cid = cids[i];
        if (!alive[cid] || (tree_mask[cid] & ~has[events[i]])) {
            first[i] = -1;
            continue;
        }
        first[i] = pred_start[cid] + checked[i];
        end[i] = pred_start[cid] + pred_count[cid];
    }
    /* Pass 2: the rows, from the first unchecked one to the first false one. */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t pid = first[i];
        if (pid < 0)
            continue;
        const int32_t *event_positions = positions + events[i] * n_trees;
        int holds = 1;
        for (; pid < end[i]; pid++) {
            const int32_t *row = rows + pid * ROW_WIDTH;
            int32_t pos = event_positions[row[ROW_TREE]], lo = row[ROW_LO];
            if (pos > hi_position(row[ROW_HI], bound_rank, unbounded_hi)
                || (lo >= -1 ? pos < lo_position(lo, bound_rank)
                             : !inside_any_interval(pos, runs + ROW_RUN(lo), bound_rank,
                                                    unbounded_hi))) {
                holds = 0;
                break;
            }
        }
        if (holds)
            kept[n_kept++] = i;
    }
    Py_END_ALLOW_THREADS
    free(has);
    free(first);
    release(v, COUNT(verify_specs));
    return PyLong_FromLongLong(n_kept);
}

static const Spec fallback_specs[] = {
    {"first", SIGNED, 8, 0, 1}, {"end", SIGNED, 8, 0, 1}, {"keys", SIGNED, 8, 0, 1},
    {"offsets", SIGNED, 0, 0, 1}, {"values", SIGNED, 4, 0, 1}, {"events", SIGNED, 8, 0, 1},
    {"positions", SIGNED, 4, 0, 2},
};

/* Whether key j of entry i is kept: a single predicate, or a second tree the event has. */
#define FALLBACK_KEEPS(j, i)                                                              \
    ((tree = keys[j] & 0xFFFFFFFF) == no_tree || positions[events[i] * n_trees + tree] >= 0)
#define OFFSET(j) (wide ? offsets64[j] : (int64_t)offsets32[j])

static PyObject *
fallback_candidates(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(fallback_specs)];
    int64_t no_tree;
    if (!check_nargs("fallback_candidates", nargs, 8) || !scalar(args[7], &no_tree)
        || !ACQUIRE("fallback_candidates", args, fallback_specs, v))
        return NULL;
    const int64_t *first = I64(v[0]), *end = I64(v[1]), *keys = I64(v[2]);
    int wide = v[3].itemsize == 8;
    const int64_t *offsets64 = I64(v[3]);
    const int32_t *offsets32 = I32(v[3]), *values = I32(v[4]);
    const int64_t *events = I64(v[5]);
    const int32_t *positions = I32(v[6]);
    Py_ssize_t n = LEN(v[0]), n_trees = v[6].shape[1];
    int64_t total = 0, tree;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        for (int64_t j = first[i]; j < end[i]; j++)
            if (FALLBACK_KEEPS(j, i))
                total += OFFSET(j + 1) - OFFSET(j);
    Py_END_ALLOW_THREADS
    PyObject *owner_column = new_int64_column(total);
    PyObject *found_column = PyByteArray_FromStringAndSize(NULL, total * sizeof(int32_t));
    if (!owner_column || !found_column) {
        Py_XDECREF(owner_column);
        Py_XDECREF(found_column);
        release(v, COUNT(fallback_specs));
        return NULL;
    }
    int64_t *owner = (int64_t *)PyByteArray_AS_STRING(owner_column);
    int32_t *found = (int32_t *)PyByteArray_AS_STRING(found_column);
    Py_BEGIN_ALLOW_THREADS
    int64_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        for (int64_t j = first[i]; j < end[i]; j++)
            if (FALLBACK_KEEPS(j, i))
                for (int64_t at = OFFSET(j); at < OFFSET(j + 1); at++) {
                    owner[k] = i;
                    found[k++] = values[at];
                }
    Py_END_ALLOW_THREADS
    release(v, COUNT(fallback_specs));
    return Py_BuildValue("(NN)", owner_column, found_column);
}

static inline int64_t
space_pair_key(int64_t sid_a, int64_t sid_b)
{
    int64_t low = sid_a < sid_b ? sid_a : sid_b, high = sid_a < sid_b ? sid_b : sid_a;
    return ((high + 1) << 32) | low;
}

static const Spec pair_specs[] = {
    {"event", SIGNED, 8, 0, 1}, {"tree", SIGNED, 8, 0, 1}, {"sid", SIGNED, 8, 0, 1},
    {"tree_pairs", SIGNED, 8, 0, 1},
};

static PyObject *
hashed_pair_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(pair_specs)];
    int64_t merge_ratio;
    if (!check_nargs("hashed_pair_entries", nargs, 5) || !scalar(args[4], &merge_ratio)
        || !ACQUIRE("hashed_pair_entries", args, pair_specs, v))
        return NULL;
    const int64_t *event = I64(v[0]), *tree = I64(v[1]), *sid = I64(v[2]);
    const int64_t *tree_pairs = I64(v[3]);
    Py_ssize_t n = LEN(v[0]), n_pairs = LEN(v[3]);
    /* per entry: its event's end, and the run of its tree's pairs */
    int64_t *scratch = malloc((n ? 3 * n : 1) * sizeof(int64_t));
    if (!scratch) {
        release(v, COUNT(pair_specs));
        return PyErr_NoMemory();
    }
    int64_t *event_end = scratch, *up_start = scratch + n, *up_end = scratch + 2 * n;
    int64_t bound = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t stop = n;
    for (int64_t i = n - 1; i >= 0; i--) {
        if (i + 1 < n && event[i + 1] != event[i])
            stop = i + 1;
        event_end[i] = stop;
        up_start[i] = lower_bound(tree_pairs, 0, n_pairs, tree[i] << 32);
        up_end[i] = lower_bound(tree_pairs, 0, n_pairs, (tree[i] + 1) << 32);
        int64_t partners = up_end[i] - up_start[i], later = stop - i - 1;
        bound += partners < later ? partners : later;
    }
    Py_END_ALLOW_THREADS
    PyObject *owner_column = new_int64_column(bound), *keys_column = new_int64_column(bound);
    if (!owner_column || !keys_column) {
        Py_XDECREF(owner_column);
        Py_XDECREF(keys_column);
        free(scratch);
        release(v, COUNT(pair_specs));
        return NULL;
    }
    int64_t *owner = (int64_t *)PyByteArray_AS_STRING(owner_column);
    int64_t *keys = (int64_t *)PyByteArray_AS_STRING(keys_column);
    int64_t k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < n; i++) {
        int64_t first = up_start[i], last = up_end[i], lo = i + 1, hi = event_end[i];
        int64_t partners = last - first, later = hi - lo;
        int64_t shorter = partners < later ? partners : later;
        int64_t longer = partners < later ? later : partners;
        if (merge_ratio * shorter >= longer) {
            /* alike in length: one merge of the two sorted runs of trees */
            int64_t p = first, j = lo;
            while (p < last && j < hi) {
                int64_t high = tree_pairs[p] & 0xFFFFFFFF;
                if (high < tree[j])
                    p++;
                else if (high > tree[j])
                    j++;
                else {
                    owner[k] = i;
                    keys[k++] = space_pair_key(sid[i], sid[j]);
                    p++;
                    j++;
                }
            }
        } else if (partners < later) { /* each partner searched among the later entries */
            for (int64_t p = first; p < last; p++) {
                int64_t high = tree_pairs[p] & 0xFFFFFFFF;
                int64_t at = lower_bound(tree, lo, hi, high);
                if (at < hi && tree[at] == high) {
                    owner[k] = i;
                    keys[k++] = space_pair_key(sid[i], sid[at]);
                }
            }
        } else { /* each later entry's pair searched among the tree's pairs */
            int64_t low = tree[i] << 32;
            for (int64_t j = lo; j < hi; j++) {
                int64_t want = low | tree[j];
                int64_t at = lower_bound(tree_pairs, first, last, want);
                if (at < last && tree_pairs[at] == want) {
                    owner[k] = i;
                    keys[k++] = space_pair_key(sid[i], sid[j]);
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    free(scratch);
    release(v, COUNT(pair_specs));
    if (PyByteArray_Resize(owner_column, k * sizeof(int64_t)) < 0
        || PyByteArray_Resize(keys_column, k * sizeof(int64_t)) < 0) {
        Py_DECREF(owner_column);
        Py_DECREF(keys_column);
        return NULL;
    }
    return Py_BuildValue("(NN)", owner_column, keys_column);
}

static const Spec pair_keys_specs[] = {
    {"sid_a", SIGNED, 8, 0, 1}, {"sid_b", SIGNED, 8, 0, 1}, {"out", SIGNED, 8, 1, 1},
};

static PyObject *
space_pair_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(pair_keys_specs)];
    if (!check_nargs("space_pair_keys", nargs, 3)
        || !ACQUIRE("space_pair_keys", args, pair_keys_specs, v))
        return NULL;
    const int64_t *a = I64(v[0]), *b = I64(v[1]);
    int64_t *out = I64(v[2]);
    Py_ssize_t n = LEN(v[2]);
    if (LEN(v[0]) < n || LEN(v[1]) < n)
        return refuse(v, COUNT(pair_keys_specs), "space_pair_keys(): sid_a or sid_b is shorter");
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = space_pair_key(a[i], b[i]);
    release(v, COUNT(pair_keys_specs));
    Py_RETURN_NONE;
}

/* PSTBloom's Bloom signatures: the two bits of conjunct cid in a filter of `bits` bits (a
 * power of two), from one multiplicative hash of cid + 1. */
static inline void
bloom_positions(int64_t cid, uint64_t bits, uint64_t multiplier, uint64_t *a, uint64_t *b)
{
    uint64_t x = ((uint64_t)cid + 1) * multiplier, mask = bits - 1;
    *a = (x >> 40) & mask;
    *b = (x >> 8) & mask;
}

#define HAS_BIT(words, bit) (((words)[(bit) >> 6] >> ((bit) & 63)) & 1)

static const Spec bloom_add_specs[] = {
    {"pool", UNSIGNED, 8, 1, 1}, {"offsets", SIGNED, 8, 0, 1}, {"bits", SIGNED, 8, 0, 1},
    {"cids", SIGNED, 8, 0, 1},
};

static PyObject *
bloom_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(bloom_add_specs)];
    uint64_t multiplier;
    if (!check_nargs("bloom_add", nargs, 5) || !unsigned_scalar(args[4], &multiplier)
        || !ACQUIRE("bloom_add", args, bloom_add_specs, v))
        return NULL;
    uint64_t *pool = U64(v[0]);
    const int64_t *offsets = I64(v[1]), *bits = I64(v[2]), *cids = I64(v[3]);
    Py_ssize_t n = LEN(v[3]);
    if (LEN(v[1]) < n || LEN(v[2]) < n)
        return refuse(v, COUNT(bloom_add_specs),
                      "bloom_add(): offsets or bits is shorter than cids");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t a, b, *filter = pool + offsets[i];
        bloom_positions(cids[i], (uint64_t)bits[i], multiplier, &a, &b);
        filter[a >> 6] |= (uint64_t)1 << (a & 63);
        filter[b >> 6] |= (uint64_t)1 << (b & 63);
    }
    Py_END_ALLOW_THREADS
    release(v, COUNT(bloom_add_specs));
    Py_RETURN_NONE;
}

static const Spec signature_specs[] = {
    {"events", SIGNED, 8, 0, 1}, {"cids", SIGNED, 8, 0, 1}, {"alive", BOOL, 1, 0, 1},
    {"sig_mask", UNSIGNED, 8, 0, 1}, {"pred_start", SIGNED, 4, 0, 1},
    {"rows", SIGNED, 4, 0, 2}, {"sid_matrix", SIGNED, 8, 0, 2},
    {"sig_bits", SIGNED, 8, 0, 1}, {"sig_offset", SIGNED, 8, 0, 1},
    {"sig_pool", UNSIGNED, 8, 0, 1}, {"kept", SIGNED, 8, 1, 1},
};

static PyObject *
signature_filter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(signature_specs)];
    uint64_t multiplier;
    if (!check_nargs("signature_filter", nargs, COUNT(signature_specs) + 1)
        || !unsigned_scalar(args[COUNT(signature_specs)], &multiplier)
        || !ACQUIRE("signature_filter", args, signature_specs, v))
        return NULL;
    const int64_t *events = I64(v[0]), *cids = I64(v[1]);
    const char *alive = BOOLS(v[2]);
    const uint64_t *sig_mask = U64(v[3]), *sig_pool = U64(v[9]);
    const int32_t *pred_start = I32(v[4]), *rows = I32(v[5]);
    const int64_t *sid_matrix = I64(v[6]), *sig_bits = I64(v[7]), *sig_offset = I64(v[8]);
    int64_t *kept = I64(v[10]);
    Py_ssize_t n = LEN(v[1]), n_trees = v[6].shape[1], n_signed = LEN(v[7]);
    if (LEN(v[0]) != n || LEN(v[10]) < n || v[5].shape[1] != ROW_WIDTH)
        return refuse(v, COUNT(signature_specs), "signature_filter(): events and cids differ in "
                      "length, kept is shorter, or rows is not [rows, 3]");
    int64_t n_kept = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t cid = cids[i];
        if (!alive[cid])
            continue;
        const int64_t *event_sids = sid_matrix + events[i] * n_trees;
        int holds = 1;
        /* predicate k of the conjunct, in access order, is signed when bit k is set; the
         * access predicate (k = 0) is not */
        uint64_t signed_rest = sig_mask[cid] >> 1;
        for (int64_t pid = pred_start[cid] + 1; signed_rest; signed_rest >>= 1, pid++) {
            if (!(signed_rest & 1))
                continue;
            int64_t sid = event_sids[rows[pid * ROW_WIDTH + ROW_TREE]];
            if (sid < 0) { /* the event lacks the predicate's attribute */
                holds = 0;
                break;
            }
            if (sid >= n_signed || sig_bits[sid] == 0)
                continue; /* the space has no filter */
            uint64_t a, b;
            bloom_positions(cid, (uint64_t)sig_bits[sid], multiplier, &a, &b);
            const uint64_t *filter = sig_pool + sig_offset[sid];
            if (!HAS_BIT(filter, a) || !HAS_BIT(filter, b)) {
                holds = 0;
                break;
            }
        }
        if (holds)
            kept[n_kept++] = i;
    }
    Py_END_ALLOW_THREADS
    release(v, COUNT(signature_specs));
    return PyLong_FromLongLong(n_kept);
}

/* ------------------------------------------------------------------ multimap */

static const Spec compact_specs[] = {
    {"keys", SIGNED, 8, 1, 1}, {"offsets", SIGNED, 4, 1, 1}, {"values", SIGNED, 4, 1, 1},
    {"kept", BOOL, 1, 0, 1},
};

static PyObject *
compact_in_place(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(compact_specs)];
    if (!check_nargs("compact_in_place", nargs, 4)
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
    release(v, COUNT(compact_specs));
    return Py_BuildValue("(LL)", (long long)n_keys, (long long)n_values);
}

static const Spec shift_specs[] = {
    {"offsets", SIGNED, 4, 1, 1}, {"merged_at", SIGNED, 8, 0, 1}, {"step", SIGNED, 8, 0, 1},
};

static PyObject *
shift_offsets(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(shift_specs)];
    if (!check_nargs("shift_offsets", nargs, 3)
        || !ACQUIRE("shift_offsets", args, shift_specs, v))
        return NULL;
    int32_t *offsets = I32(v[0]);
    const int64_t *merged_at = I64(v[1]), *step = I64(v[2]);
    Py_ssize_t n = LEN(v[0]), n_merged = LEN(v[1]);
    if (LEN(v[2]) < n_merged + 1)
        return refuse(v, COUNT(shift_specs),
                      "shift_offsets(): step is shorter than merged_at + 1");
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t below = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        while (below < n_merged && merged_at[below] < j)
            below++;
        offsets[j] += (int32_t)step[below];
    }
    Py_END_ALLOW_THREADS
    release(v, COUNT(shift_specs));
    Py_RETURN_NONE;
}

static const Spec bucket_specs[] = {{"keys", SIGNED, 8, 0, 1}, {"starts", SIGNED, 4, 1, 1}};

static PyObject *
bucket_starts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(bucket_specs)];
    int64_t shift;
    if (!check_nargs("bucket_starts", nargs, 3) || !scalar(args[2], &shift)
        || !ACQUIRE("bucket_starts", args, bucket_specs, v))
        return NULL;
    const int64_t *keys = I64(v[0]);
    int32_t *starts = I32(v[1]);
    Py_ssize_t n = LEN(v[0]);
    int64_t buckets = n ? (keys[n - 1] >> shift) - (keys[0] >> shift) + 1 : 0;
    if (LEN(v[1]) != buckets + 1)
        return refuse(v, COUNT(bucket_specs), "bucket_starts(): starts is not buckets + 1 long");
    int64_t b = 0;
    if (n) {
        int64_t base = keys[0] >> shift;
        for (Py_ssize_t i = 0; i < n; i++)
            for (int64_t bucket = (keys[i] >> shift) - base; b <= bucket; b++)
                starts[b] = (int32_t)i;
    }
    for (; b <= buckets; b++)
        starts[b] = (int32_t)n;
    release(v, COUNT(bucket_specs));
    Py_RETURN_NONE;
}

static const Spec lower_specs[] = {
    {"keys", SIGNED, 8, 0, 1}, {"starts", SIGNED, 4, 0, 1}, {"queries", SIGNED, 8, 0, 1},
    {"out", SIGNED, 8, 1, 1},
};

static PyObject *
lower_bounds(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(lower_specs)];
    int64_t shift;
    if (!check_nargs("lower_bounds", nargs, 5) || !scalar(args[2], &shift))
        return NULL;
    PyObject *columns[4] = {args[0], args[1], args[3], args[4]};
    if (!ACQUIRE("lower_bounds", columns, lower_specs, v))
        return NULL;
    const int64_t *keys = I64(v[0]), *queries = I64(v[2]);
    const int32_t *starts = I32(v[1]);
    int64_t *out = I64(v[3]);
    Py_ssize_t n = LEN(v[0]), q = LEN(v[3]);
    if (LEN(v[2]) < q)
        return refuse(v, COUNT(lower_specs), "lower_bounds(): queries is shorter than out");
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
    release(v, COUNT(lower_specs));
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
    if (!check_nargs(func, nargs, adding ? 4 : 5) || !unsigned_scalar(args[2], &multiplier)
        || !scalar(args[3], &shift))
        return NULL;
    PyObject *columns[3] = {args[0], args[1], adding ? NULL : args[4]};
    if (!acquire(func, columns, filter_specs, n_columns, v))
        return NULL;
    uint64_t *words = U64(v[0]);
    const int64_t *keys = I64(v[1]);
    Py_ssize_t n = LEN(v[1]);
    uint64_t n_bits = (uint64_t)LEN(v[0]) << 6;
    if (shift < 1 || shift > 63 || n_bits < ((uint64_t)1 << (64 - shift))
        || (!adding && LEN(v[2]) < n)) {
        release(v, n_columns);
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
    release(v, n_columns);
    Py_RETURN_NONE;
}

static PyObject *
filter_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return filter_kernel("filter_add", args, nargs, 1);
}

static PyObject *
filter_may_hold(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return filter_kernel("filter_may_hold", args, nargs, 0);
}

/* ------------------------------------------------------------------ columns */

static const Spec insert_specs[] = {
    {"column", ANY_INT, 0, 1, 1}, {"at", SIGNED, 8, 0, 1}, {"items", ANY_INT, 0, 0, 1},
};

static PyObject *
move_right_and_insert(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(insert_specs)];
    int64_t n;
    if (!check_nargs("move_right_and_insert", nargs, 4) || !scalar(args[1], &n))
        return NULL;
    PyObject *columns[3] = {args[0], args[2], args[3]};
    if (!ACQUIRE("move_right_and_insert", columns, insert_specs, v))
        return NULL;
    Py_ssize_t size = v[0].itemsize, k = LEN(v[2]);
    if (v[2].itemsize != size || LEN(v[1]) != k || n < 0 || LEN(v[0]) < n + k)
        return refuse(v, COUNT(insert_specs), "move_right_and_insert(): items and column differ "
                      "in type, at and items in length, or column has no room for them");
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
    release(v, COUNT(insert_specs));
    Py_RETURN_NONE;
}

static const Spec expand_specs[] = {
    {"starts", SIGNED, 8, 0, 1}, {"counts", SIGNED, 8, 0, 1}, {"owner", SIGNED, 8, 1, 1},
    {"index", SIGNED, 8, 1, 1},
};

static PyObject *
expand_ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(expand_specs)];
    if (!check_nargs("expand_ranges", nargs, 4)
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
        return refuse(v, COUNT(expand_specs), "expand_ranges(): a count is negative, starts is "
                      "shorter than counts, or owner and index are not the counts' sum long");
    Py_BEGIN_ALLOW_THREADS
    int64_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        for (int64_t j = 0; j < counts[i]; j++, k++) {
            owner[k] = i;
            index[k] = starts[i] + j;
        }
    Py_END_ALLOW_THREADS
    release(v, COUNT(expand_specs));
    Py_RETURN_NONE;
}

static const Spec bits_specs[] = {{"words", UNSIGNED, 8, 1, 1}, {"positions", UNSIGNED, 8, 0, 1}};

static PyObject *
set_bits(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(bits_specs)];
    if (!check_nargs("set_bits", nargs, 2) || !ACQUIRE("set_bits", args, bits_specs, v))
        return NULL;
    uint64_t *words = U64(v[0]);
    const uint64_t *positions = U64(v[1]);
    Py_ssize_t n = LEN(v[1]);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        words[positions[i] >> 6] |= (uint64_t)1 << (positions[i] & 63);
    Py_END_ALLOW_THREADS
    release(v, COUNT(bits_specs));
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ byte ranges */

static const Spec copy_specs[] = {
    {"data", UNSIGNED, 1, 0, 1}, {"starts", SIGNED, 8, 0, 1}, {"lengths", SIGNED, 8, 0, 1},
    {"out", UNSIGNED, 1, 1, 1}, {"out_starts", SIGNED, 8, 0, 1},
};

static PyObject *
copy_ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(copy_specs)];
    if (!check_nargs("copy_ranges", nargs, 5) || !ACQUIRE("copy_ranges", args, copy_specs, v))
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
    release(v, COUNT(copy_specs));
    Py_RETURN_NONE;
}

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

/* ------------------------------------------------------------------ id table */

static const Spec hash_specs[] = {
    {"data", UNSIGNED, 1, 0, 1}, {"offsets", SIGNED, 8, 0, 1}, {"out", UNSIGNED, 4, 1, 1},
};

static PyObject *
hash_ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(hash_specs)];
    if (!check_nargs("hash_ranges", nargs, 3) || !ACQUIRE("hash_ranges", args, hash_specs, v))
        return NULL;
    const uint8_t *data = U8(v[0]);
    const int64_t *offsets = I64(v[1]);
    uint32_t *out = U32(v[2]);
    Py_ssize_t n = LEN(v[2]);
    if (LEN(v[1]) < n + 1)
        return refuse(v, COUNT(hash_specs), "hash_ranges(): offsets is not longer than out");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) { /* the high half of the 64-bit FNV-1a */
        uint64_t h = 14695981039346656037ULL;
        for (int64_t j = offsets[i]; j < offsets[i + 1]; j++)
            h = (h ^ data[j]) * 1099511628211ULL;
        out[i] = (uint32_t)(h >> 32);
    }
    Py_END_ALLOW_THREADS
    release(v, COUNT(hash_specs));
    Py_RETURN_NONE;
}

/* The id table (psmatch.core.slot_ids) is a linear-probing table of any size: an id's
 * probe starts at its 32-bit hash scaled to the table (multiply-shift, no division; the
 * high half of FNV-1a, into which it mixes every byte) and wraps at the end. Any size,
 * not a power of two, lets the table be rebuilt at twice the ids it holds, not four
 * times. */
#define TABLE_HOME(hash, entries) (((uint64_t)(hash) * (entries)) >> 32)
#define TABLE_NEXT(at, entries) ((at) + 1 == (entries) ? 0 : (at) + 1)

static const Spec find_specs[] = {
    {"table", SIGNED, 4, 0, 1}, {"slot_hash", UNSIGNED, 4, 0, 1},
    {"buffer", UNSIGNED, 1, 0, 1}, {"start", SIGNED, 8, 0, 1}, {"length", SIGNED, 4, 0, 1},
    {"data", UNSIGNED, 1, 0, 1}, {"offsets", SIGNED, 8, 0, 1}, {"hashes", UNSIGNED, 4, 0, 1},
    {"out", SIGNED, 8, 1, 1},
};

static PyObject *
find_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(find_specs)];
    int64_t empty;
    if (!check_nargs("find_slots", nargs, 10) || !scalar(args[9], &empty)
        || !ACQUIRE("find_slots", args, find_specs, v))
        return NULL;
    const int32_t *table = I32(v[0]), *length = I32(v[4]);
    const uint32_t *slot_hash = U32(v[1]), *hashes = U32(v[7]);
    const uint8_t *buffer = U8(v[2]), *data = U8(v[5]);
    const int64_t *start = I64(v[3]), *offsets = I64(v[6]);
    int64_t *out = I64(v[8]);
    Py_ssize_t n = LEN(v[8]);
    uint64_t entries = (uint64_t)LEN(v[0]);
    if (LEN(v[7]) < n || LEN(v[6]) < n + 1)
        return refuse(v, COUNT(find_specs), "find_slots(): hashes or offsets too short for out");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t lo = offsets[i], size = offsets[i + 1] - offsets[i];
        out[i] = -1;
        for (uint64_t at = TABLE_HOME(hashes[i], entries); table[at] != empty;
             at = TABLE_NEXT(at, entries)) {
            int32_t slot = table[at];
            if (slot >= 0 && slot_hash[slot] == hashes[i] && length[slot] == size
                && memcmp(buffer + start[slot], data + lo, size) == 0) {
                out[i] = slot;
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS
    release(v, COUNT(find_specs));
    Py_RETURN_NONE;
}

static const Spec table_specs[] = {
    {"table", SIGNED, 4, 1, 1}, {"slot_hash", UNSIGNED, 4, 0, 1}, {"slots", SIGNED, 8, 0, 1},
};

/* File (marker: the empty entry) or mark deleted (marker: the deleted entry) each slot. */
static PyObject *
update_table(const char *func, PyObject *const *args, Py_ssize_t nargs, int filing)
{
    Py_buffer v[COUNT(table_specs)];
    int64_t marker;
    if (!check_nargs(func, nargs, 4) || !scalar(args[3], &marker)
        || !ACQUIRE(func, args, table_specs, v))
        return NULL;
    int32_t *table = I32(v[0]);
    const uint32_t *slot_hash = U32(v[1]);
    const int64_t *slots = I64(v[2]);
    uint64_t entries = (uint64_t)LEN(v[0]);
    Py_ssize_t n = LEN(v[2]);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t at = TABLE_HOME(slot_hash[slots[i]], entries);
        if (filing) {
            while (table[at] != marker)
                at = TABLE_NEXT(at, entries);
            table[at] = (int32_t)slots[i];
        } else {
            while (table[at] != slots[i])
                at = TABLE_NEXT(at, entries);
            table[at] = (int32_t)marker;
        }
    }
    Py_END_ALLOW_THREADS
    release(v, COUNT(table_specs));
    Py_RETURN_NONE;
}

static PyObject *
insert_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return update_table("insert_slots", args, nargs, 1);
}

static PyObject *
remove_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return update_table("remove_slots", args, nargs, 0);
}

/* ------------------------------------------------------------------ module */

#define KERNEL(name, doc) {#name, (PyCFunction)(void (*)(void))name, METH_FASTCALL, doc}

static PyMethodDef kernel_methods[] = {
    KERNEL(verify_candidates, "See psmatch.pstree.kernels.verify_candidates."),
    KERNEL(fallback_candidates, "See psmatch.pstree.kernels.fallback_candidates."),
    KERNEL(hashed_pair_entries, "See psmatch.pstree.kernels.hashed_pair_entries."),
    KERNEL(space_pair_keys, "See psmatch.pstree.kernels.space_pair_keys."),
    KERNEL(bloom_add, "See psmatch.pstree.pstbloom.PSTBloomMatcher.build_signatures."),
    KERNEL(signature_filter, "See psmatch.pstree.pstbloom.PSTBloomMatcher._signature_filter."),
    KERNEL(compact_in_place, "See psmatch.core.multimap.MultiMap.remove_values."),
    KERNEL(shift_offsets, "See psmatch.core.multimap._shift_offsets."),
    KERNEL(bucket_starts, "See psmatch.core.multimap.KeyDirectory."),
    KERNEL(lower_bounds, "See psmatch.core.multimap.KeyDirectory.lower_bounds."),
    KERNEL(filter_add, "See psmatch.core.multimap.KeyFilter.add."),
    KERNEL(filter_may_hold, "See psmatch.core.multimap.KeyFilter.may_hold."),
    KERNEL(move_right_and_insert, "See psmatch.core.columns.insert_sorted_in_place."),
    KERNEL(expand_ranges, "See psmatch.core.columns.expand_ranges."),
    KERNEL(set_bits, "See psmatch.core.columns.set_bits."),
    KERNEL(copy_ranges, "See psmatch.core.slot_bytes.copy_ranges."),
    KERNEL(json_string_lengths, "See psmatch.service.heads."),
    KERNEL(join_notifications, "See psmatch.service.heads."),
    KERNEL(hash_ranges, "See psmatch.core.slot_ids."),
    KERNEL(find_slots, "See psmatch.core.slot_ids."),
    KERNEL(insert_slots, "See psmatch.core.slot_ids."),
    KERNEL(remove_slots, "See psmatch.core.slot_ids."),
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kernels_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "psmatch.core._kernels",
    .m_doc = "The compiled loops of psmatch (see the comment at the top of src/psmatch/core/_kernels.c).",
    .m_size = -1,
    .m_methods = kernel_methods,
};

PyMODINIT_FUNC
PyInit__kernels(void)
{
    return PyModule_Create(&kernels_module);
}
