/* The PS-Tree family's loops (their Python faces: src/psmatch/pstree/kernels.py): the
 * verification of candidate conjuncts against an event's space positions, PSTHash's scan
 * of its fallback lists, the pairing of one event's located entries into space-pair keys,
 * and those keys for given pairs of spaces. */
#include "args.h"

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

static const Spec verify_specs[] = {
    {"events", SIGNED, 8, 0, 1}, {"cids", SIGNED, 8, 0, 1}, {"checked", SIGNED, 4, 0, 1},
    {"positions", SIGNED, 4, 0, 2}, {"alive", BOOL, 1, 0, 1},
    {"tree_mask", UNSIGNED, 8, 0, 1}, {"pred_start", SIGNED, 4, 0, 1},
    {"pred_count", SIGNED, 4, 0, 1}, {"rows", SIGNED, 4, 0, 2},
    {"runs", SIGNED, 4, 0, 1}, {"bound_rank", SIGNED, 4, 0, 1},
    {"kept", SIGNED, 8, 1, 1},
};

PyObject *
psk_verify_candidates(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(verify_specs)];
    int64_t unbounded_hi;
    if (!psk_check_nargs("verify_candidates", nargs, COUNT(verify_specs) + 1)
        || !psk_scalar(args[COUNT(verify_specs)], &unbounded_hi)
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
        return psk_refuse(v, COUNT(verify_specs), "verify_candidates(): events, cids and checked "
                          "differ in length, kept is shorter, or rows is not [rows, 3]");
    uint64_t *has = malloc((n_events ? n_events : 1) * sizeof(uint64_t));
    int32_t *first = malloc((n ? 2 * n : 1) * sizeof(int32_t)); /* and each one's end */
    if (!has || !first) {
        free(has);
        free(first);
        psk_release(v, COUNT(verify_specs));
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
    psk_release(v, COUNT(verify_specs));
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

PyObject *
psk_fallback_candidates(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(fallback_specs)];
    int64_t no_tree;
    if (!psk_check_nargs("fallback_candidates", nargs, 8) || !psk_scalar(args[7], &no_tree)
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
    PyObject *owner_column = psk_new_int64_column(total);
    PyObject *found_column = PyByteArray_FromStringAndSize(NULL, total * sizeof(int32_t));
    if (!owner_column || !found_column) {
        Py_XDECREF(owner_column);
        Py_XDECREF(found_column);
        psk_release(v, COUNT(fallback_specs));
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
    psk_release(v, COUNT(fallback_specs));
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

PyObject *
psk_hashed_pair_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(pair_specs)];
    int64_t merge_ratio;
    if (!psk_check_nargs("hashed_pair_entries", nargs, 5) || !psk_scalar(args[4], &merge_ratio)
        || !ACQUIRE("hashed_pair_entries", args, pair_specs, v))
        return NULL;
    const int64_t *event = I64(v[0]), *tree = I64(v[1]), *sid = I64(v[2]);
    const int64_t *tree_pairs = I64(v[3]);
    Py_ssize_t n = LEN(v[0]), n_pairs = LEN(v[3]);
    /* per entry: its event's end, and the run of its tree's pairs */
    int64_t *scratch = malloc((n ? 3 * n : 1) * sizeof(int64_t));
    if (!scratch) {
        psk_release(v, COUNT(pair_specs));
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
    PyObject *owner_column = psk_new_int64_column(bound);
    PyObject *keys_column = psk_new_int64_column(bound);
    if (!owner_column || !keys_column) {
        Py_XDECREF(owner_column);
        Py_XDECREF(keys_column);
        free(scratch);
        psk_release(v, COUNT(pair_specs));
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
    psk_release(v, COUNT(pair_specs));
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

PyObject *
psk_space_pair_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(pair_keys_specs)];
    if (!psk_check_nargs("space_pair_keys", nargs, 3)
        || !ACQUIRE("space_pair_keys", args, pair_keys_specs, v))
        return NULL;
    const int64_t *a = I64(v[0]), *b = I64(v[1]);
    int64_t *out = I64(v[2]);
    Py_ssize_t n = LEN(v[2]);
    if (LEN(v[0]) < n || LEN(v[1]) < n)
        return psk_refuse(v, COUNT(pair_keys_specs),
                          "space_pair_keys(): sid_a or sid_b is shorter");
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = space_pair_key(a[i], b[i]);
    psk_release(v, COUNT(pair_keys_specs));
    Py_RETURN_NONE;
}

/* PSTBloom's Bloom signatures: the two bits of conjunct cid in a filter of `bits` bits (a
 * power of two), from one multiplicative hash of cid + 1. */
