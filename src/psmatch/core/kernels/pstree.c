/* The PS-Tree family's loops (their Python faces: src/psmatch/pstree/kernels.py): the
 * verification of candidate conjuncts against an event's space positions, PSTHash's scan
 * of its fallback lists, the pairing of one event's located entries into space-pair keys,
 * and those keys for given pairs of spaces. Each checks the indices, offsets and ranges it
 * relies on; what only the index's own tables can vouch for is said at each kernel. */
#include "args.h"

/* A bound code is an interval end as stored: bound id * 2 + closed, -1 (or any negative)
 * when unbounded; its space position comes from the bound's rank in its tree (see
 * psmatch.pstree.forest.UNBOUNDED_HI). A code of 0 or more is below 2 * len(bound_rank):
 * the callers check it (CODE_OK). */
#define CODE_OK(code, n_codes) ((code) < (n_codes))

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
 * low and high bound codes, in order (scanned up to the first above pos). The run starts
 * at runs[start]; 1 when pos is inside, 0 when not, -1 when the run or a code of it lies
 * outside its column. */
static inline int
inside_any_interval(int64_t pos, const int32_t *runs, int64_t start, int64_t n_runs,
                    const int32_t *bound_rank, int64_t n_codes, int64_t unbounded_hi)
{
    if (start >= n_runs || runs[start] < 0 || runs[start] > (n_runs - start - 1) / 2)
        return -1;
    const int32_t *run = runs + start;
    for (int32_t j = 0; j < run[0]; j++) {
        int32_t lo = run[1 + 2 * j], hi = run[2 + 2 * j];
        if (!CODE_OK(lo, n_codes) || !CODE_OK(hi, n_codes))
            return -1;
        if (pos < lo_position(lo, bound_rank))
            return 0;
        if (pos <= hi_position(hi, bound_rank, unbounded_hi))
            return 1;
    }
    return 0;
}

/* has[e]: the tree mask of event e's row of the [n_events, n_trees] position matrix, bit
 * t % 64 set for each tree t it has a position in (0 or more). */
static void
event_tree_masks(const int32_t *positions, Py_ssize_t n_events, Py_ssize_t n_trees,
                 uint64_t *has)
{
    for (Py_ssize_t e = 0; e < n_events; e++) {
        uint64_t mask = 0;
        for (Py_ssize_t t = 0; t < n_trees; t++)
            if (positions[e * n_trees + t] >= 0)
                mask |= (uint64_t)1 << (t & 63);
        has[e] = mask;
    }
}

static const Spec verify_specs[] = {
    {"events", SIGNED, 8, 0, 1}, {"cids", SIGNED, 8, 0, 1}, {"checked", SIGNED, 4, 0, 1},
    {"positions", SIGNED, 4, 0, 2}, {"alive", BOOL, 1, 0, 1},
    {"tree_mask", UNSIGNED, 8, 0, 1}, {"pred_start", SIGNED, 4, 0, 1},
    {"pred_count", SIGNED, 4, 0, 1}, {"rows", SIGNED, 4, 0, 2},
    {"runs", SIGNED, 4, 0, 1}, {"bound_rank", SIGNED, 4, 0, 1},
    {"kept", SIGNED, 8, 1, 1},
};

/* verify_candidates(events, cids, checked, positions, alive, tree_mask, pred_start,
 * pred_count, rows, runs, bound_rank, kept, unbounded_hi) -> n: kept[:n], the candidates i
 * whose conjunct cids[i] is live and whose rows from the checked[i]-th on hold for event
 * events[i]. Checked first: events (within positions' rows), cids (within alive, which
 * tree_mask, pred_start and pred_count are as long as at least); in the first pass, before
 * the rows are read, each live candidate's rows (pred_start, pred_count and checked 0 or
 * more, their end within rows). Checked where read, the loop stopping with ValueError:
 * each row's tree (within positions' columns) and bound codes, and each interval run
 * (within runs): rows are read only up to a candidate's first false one, whose place no
 * pass before the loop knows, and a pass over all the rows would cost O(predicates) a
 * call. */
PyObject *
psk_verify_candidates(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "verify_candidates";
    Py_buffer v[COUNT(verify_specs)];
    int64_t unbounded_hi;
    if (!psk_check_nargs(func, nargs, COUNT(verify_specs) + 1)
        || !psk_scalar(args[COUNT(verify_specs)], &unbounded_hi)
        || !ACQUIRE(func, args, verify_specs, v))
        return NULL;
    const int64_t *events = I64(v[0]), *cids = I64(v[1]);
    const int32_t *checked = I32(v[2]), *positions = I32(v[3]);
    const char *alive = BOOLS(v[4]);
    const uint64_t *tree_mask = U64(v[5]);
    const int32_t *pred_start = I32(v[6]), *pred_count = I32(v[7]), *rows = I32(v[8]);
    const int32_t *runs = I32(v[9]), *bound_rank = I32(v[10]);
    int64_t *kept = I64(v[11]);
    Py_ssize_t n = LEN(v[1]), n_events = v[3].shape[0], n_trees = v[3].shape[1];
    Py_ssize_t n_conjuncts = LEN(v[4]), n_rows = v[8].shape[0], n_runs = LEN(v[9]);
    int64_t n_codes = 2 * (int64_t)LEN(v[10]);
    if (LEN(v[0]) != n || LEN(v[2]) != n || LEN(v[11]) < n || v[8].shape[1] != ROW_WIDTH)
        return psk_refuse(v, COUNT(verify_specs), "verify_candidates(): events, cids and "
                          "checked differ in length, kept is shorter, or rows is not [rows, 3]");
    if (LEN(v[5]) < n_conjuncts || LEN(v[6]) < n_conjuncts || LEN(v[7]) < n_conjuncts)
        return psk_refuse(v, COUNT(verify_specs), "verify_candidates(): tree_mask, pred_start "
                          "or pred_count is shorter than alive");
    if (n_rows > INT32_MAX)
        return psk_refuse_arg(v, COUNT(verify_specs), func, "rows", "holds 2 ** 31 rows or more");
    if (psk_first_outside(events, n, 0, n_events) >= 0)
        return psk_refuse_arg(v, COUNT(verify_specs), func, "events",
                              "holds an event outside positions");
    if (psk_first_outside(cids, n, 0, n_conjuncts) >= 0)
        return psk_refuse_arg(v, COUNT(verify_specs), func, "cids",
                              "holds a conjunct outside alive");
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
    const char *bad = NULL;
    Py_BEGIN_ALLOW_THREADS
    /* Pass 0: the mask of the trees each event has. */
    event_tree_masks(positions, n_events, n_trees, has);
    /* Pass 1: each live candidate's first unchecked row (-1: dead, or it needs a tree its
     * event lacks), and its conjunct's end; these loads do not depend on each other, so
     * the processor overlaps their cache misses. */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t cid = cids[i];
        if (!alive[cid] || (tree_mask[cid] & ~has[events[i]])) {
            first[i] = -1;
            continue;
        }
        int64_t start = pred_start[cid], stop = start + pred_count[cid];
        int64_t from = start + checked[i];
        if (start < 0 || pred_count[cid] < 0 || checked[i] < 0 || stop > n_rows) {
            bad = "pred_start";
            break;
        }
        first[i] = (int32_t)(from < stop ? from : stop);
        end[i] = (int32_t)stop;
    }
    /* Pass 2: the rows, from the first unchecked one to the first false one. */
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        int64_t pid = first[i];
        if (pid < 0)
            continue;
        const int32_t *event_positions = positions + events[i] * n_trees;
        int holds = 1;
        for (; pid < end[i]; pid++) {
            const int32_t *row = rows + pid * ROW_WIDTH;
            int32_t tree = row[ROW_TREE], lo = row[ROW_LO], hi = row[ROW_HI];
            if (tree < 0 || tree >= n_trees || !CODE_OK(lo, n_codes) || !CODE_OK(hi, n_codes)) {
                bad = "rows";
                break;
            }
            int32_t pos = event_positions[tree];
            if (pos > hi_position(hi, bound_rank, unbounded_hi)) {
                holds = 0;
                break;
            }
            if (lo >= -1) {
                if (pos < lo_position(lo, bound_rank)) {
                    holds = 0;
                    break;
                }
                continue;
            }
            int inside = inside_any_interval(pos, runs, ROW_RUN((int64_t)lo), n_runs,
                                             bound_rank, n_codes, unbounded_hi);
            if (inside < 0)
                bad = "runs";
            if (inside <= 0) {
                holds = 0;
                break;
            }
        }
        if (holds && !bad)
            kept[n_kept++] = i;
    }
    Py_END_ALLOW_THREADS
    free(has);
    free(first);
    if (bad)
        return psk_refuse_arg(v, COUNT(verify_specs), func, bad,
                              "leads to a row, tree, bound or interval run outside its column");
    psk_release(v, COUNT(verify_specs));
    return PyLong_FromLongLong(n_kept);
}

static const Spec fallback_specs[] = {
    {"first", SIGNED, 8, 0, 1}, {"end", SIGNED, 8, 0, 1}, {"keys", SIGNED, 8, 0, 1},
    {"offsets", SIGNED, 0, 0, 1}, {"values", SIGNED, 4, 0, 1}, {"events", SIGNED, 8, 0, 1},
    {"positions", SIGNED, 4, 0, 2}, {"tree_mask", UNSIGNED, 8, 0, 1},
};

/* Whether key j of entry i is kept: a single predicate, or a second tree the event has
 * (the tree within positions: checked by the first loop). */
#define FALLBACK_KEEPS(j, i)                                                              \
    ((tree = keys[j] & 0xFFFFFFFF) == no_tree || positions[events[i] * n_trees + tree] >= 0)
#define OFFSET(j) (wide ? offsets64[j] : (int64_t)offsets32[j])

/* fallback_candidates(first, end, keys, offsets, values, events, positions, tree_mask,
 * no_tree) -> (owner, found): for each entry i and each key j in [first[i], end[i]) whose
 * tree is no_tree or one event events[i] has, i and each value of values[offsets[j]:offsets[j
 * + 1]] whose tree mask tree_mask[value] needs no tree the event lacks (bit t % 64 for
 * each tree t of positions' row with a position of 0 or more). Checked first: first, end
 * and events alike in length, events within positions. Checked by the first loop
 * (counting the outputs' greatest length, before the second fills them): each non-empty
 * range of keys within keys and offsets, each key's tree within positions, each kept
 * key's offsets ascending within values. Checked by the second: each value read within
 * tree_mask. */
PyObject *
psk_fallback_candidates(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "fallback_candidates";
    Py_buffer v[COUNT(fallback_specs)];
    int64_t no_tree;
    if (!psk_check_nargs(func, nargs, COUNT(fallback_specs) + 1)
        || !psk_scalar(args[COUNT(fallback_specs)], &no_tree)
        || !ACQUIRE(func, args, fallback_specs, v))
        return NULL;
    const int64_t *first = I64(v[0]), *end = I64(v[1]), *keys = I64(v[2]);
    int wide = v[3].itemsize == 8;
    const int64_t *offsets64 = I64(v[3]);
    const int32_t *offsets32 = I32(v[3]), *values = I32(v[4]);
    const int64_t *events = I64(v[5]);
    const int32_t *positions = I32(v[6]);
    const uint64_t *tree_mask = U64(v[7]);
    Py_ssize_t n = LEN(v[0]), n_trees = v[6].shape[1], n_values = LEN(v[4]);
    Py_ssize_t n_events = v[6].shape[0], n_masks = LEN(v[7]);
    Py_ssize_t n_keys = LEN(v[2]) < LEN(v[3]) - 1 ? LEN(v[2]) : LEN(v[3]) - 1;
    if (LEN(v[1]) != n || LEN(v[5]) != n)
        return psk_refuse(v, COUNT(fallback_specs),
                          "fallback_candidates(): first, end and events differ in length");
    if (psk_first_outside(events, n, 0, n_events) >= 0)
        return psk_refuse_arg(v, COUNT(fallback_specs), func, "events",
                              "holds an event outside positions");
    uint64_t *has = malloc((n_events ? n_events : 1) * sizeof(uint64_t));
    if (!has) {
        psk_release(v, COUNT(fallback_specs));
        return PyErr_NoMemory();
    }
    int64_t total = 0, tree;
    const char *bad = NULL;
    Py_BEGIN_ALLOW_THREADS
    event_tree_masks(positions, n_events, n_trees, has);
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        if (first[i] < end[i] && (first[i] < 0 || end[i] > n_keys)) {
            bad = "first";
            break;
        }
        for (int64_t j = first[i]; j < end[i]; j++) {
            tree = keys[j] & 0xFFFFFFFF;
            if (tree != no_tree && tree >= n_trees) {
                bad = "keys";
                break;
            }
            if (FALLBACK_KEEPS(j, i)) {
                int64_t lo = OFFSET(j), hi = OFFSET(j + 1);
                if (lo < 0 || lo > hi || hi > n_values) {
                    bad = "offsets";
                    break;
                }
                if (__builtin_add_overflow(total, hi - lo, &total)
                    || total > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(int64_t)) {
                    bad = "offsets";
                    break;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        free(has);
        return psk_refuse_arg(v, COUNT(fallback_specs), func, bad,
                              "leads to a key, tree or value outside its column");
    }
    PyObject *owner_column = psk_new_int64_column(total);
    PyObject *found_column = PyByteArray_FromStringAndSize(NULL, total * sizeof(int32_t));
    if (!owner_column || !found_column) {
        free(has);
        Py_XDECREF(owner_column);
        Py_XDECREF(found_column);
        psk_release(v, COUNT(fallback_specs));
        return NULL;
    }
    int64_t *owner = (int64_t *)PyByteArray_AS_STRING(owner_column);
    int32_t *found = (int32_t *)PyByteArray_AS_STRING(found_column);
    int64_t k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        uint64_t lacks = ~has[events[i]];
        for (int64_t j = first[i]; j < end[i] && !bad; j++)
            if (FALLBACK_KEEPS(j, i))
                for (int64_t at = OFFSET(j); at < OFFSET(j + 1); at++) {
                    int32_t cid = values[at];
                    if (cid < 0 || cid >= n_masks) {
                        bad = "values";
                        break;
                    }
                    /* a conjunct needing a tree the event lacks cannot match it */
                    if (tree_mask[cid] & lacks)
                        continue;
                    owner[k] = i;
                    found[k++] = cid;
                }
    }
    Py_END_ALLOW_THREADS
    free(has);
    if (bad) {
        Py_DECREF(owner_column);
        Py_DECREF(found_column);
        return psk_refuse_arg(v, COUNT(fallback_specs), func, bad,
                              "holds a conjunct outside tree_mask");
    }
    psk_release(v, COUNT(fallback_specs));
    if (PyByteArray_Resize(owner_column, k * (Py_ssize_t)sizeof(int64_t)) < 0
        || PyByteArray_Resize(found_column, k * (Py_ssize_t)sizeof(int32_t)) < 0) {
        Py_DECREF(owner_column);
        Py_DECREF(found_column);
        return NULL;
    }
    return Py_BuildValue("(NN)", owner_column, found_column);
}

/* The order-free key of the pair of spaces a and b, both in [0, 2 ** 31 - 1): the smaller in
 * the low half, the larger plus one in the high half. */
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

/* hashed_pair_entries(event, tree, sid, tree_pairs, merge_ratio) -> (owner, keys): for
 * each (i, j), i < j, of one event whose trees tree[i] < tree[j] are a pair of tree_pairs
 * (low << 32 | high), i and the space_pair_key of sid[i] and sid[j]. Checked first: the
 * three columns alike in length, sorted by event then strictly by tree, each tree and sid
 * in [0, 2 ** 31 - 1) (their shifts cannot overflow), merge_ratio in [0, 2 ** 16]. The
 * order of tree_pairs (sorted, unique) is PSTHashMatcher._add_tree_pairs' guarantee, not
 * checked: a pass over it would cost O(tree pairs) a call, not O(entries); pairs out of
 * order are missed pairs, never an access outside (every search stays within its run,
 * and the outputs are sized by the first loop, an upper bound of what the second
 * writes whatever the pairs' order). */
PyObject *
psk_hashed_pair_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "hashed_pair_entries";
    Py_buffer v[COUNT(pair_specs)];
    int64_t merge_ratio;
    if (!psk_check_nargs(func, nargs, 5) || !psk_scalar(args[4], &merge_ratio)
        || !ACQUIRE(func, args, pair_specs, v))
        return NULL;
    const int64_t *event = I64(v[0]), *tree = I64(v[1]), *sid = I64(v[2]);
    const int64_t *tree_pairs = I64(v[3]);
    Py_ssize_t n = LEN(v[0]), n_pairs = LEN(v[3]);
    if (LEN(v[1]) != n || LEN(v[2]) != n)
        return psk_refuse(v, COUNT(pair_specs),
                          "hashed_pair_entries(): event, tree and sid differ in length");
    if (merge_ratio < 0 || merge_ratio > (1 << 16))
        return psk_refuse(v, COUNT(pair_specs),
                          "hashed_pair_entries(): merge_ratio is not in [0, 2 ** 16]");
    if (psk_first_outside(tree, n, 0, INT32_MAX) >= 0)
        return psk_refuse_arg(v, COUNT(pair_specs), func, "tree",
                              "holds a tree outside [0, 2 ** 31 - 1)");
    if (psk_first_outside(sid, n, 0, INT32_MAX) >= 0)
        return psk_refuse_arg(v, COUNT(pair_specs), func, "sid",
                              "holds a space outside [0, 2 ** 31 - 1)");
    for (Py_ssize_t i = 0; i + 1 < n; i++)
        if (event[i + 1] < event[i] || (event[i + 1] == event[i] && tree[i + 1] <= tree[i]))
            return psk_refuse_arg(v, COUNT(pair_specs), func, "event",
                                  "and tree are not sorted by event, then strictly by tree");
    /* per entry: its event's end, and the run of its tree's pairs */
    int64_t *spans = malloc((n ? 3 * n : 1) * sizeof(int64_t));
    if (!spans) {
        psk_release(v, COUNT(pair_specs));
        return PyErr_NoMemory();
    }
    int64_t *event_end = spans, *up_start = spans + n, *up_end = spans + 2 * n;
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
        free(spans);
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
    free(spans);
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

/* space_pair_keys(sid_a, sid_b, out): out[i] = space_pair_key(sid_a[i], sid_b[i]), each
 * space in [0, 2 ** 31 - 1). */
PyObject *
psk_space_pair_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "space_pair_keys";
    Py_buffer v[COUNT(pair_keys_specs)];
    if (!psk_check_nargs(func, nargs, 3) || !ACQUIRE(func, args, pair_keys_specs, v))
        return NULL;
    const int64_t *a = I64(v[0]), *b = I64(v[1]);
    int64_t *out = I64(v[2]);
    Py_ssize_t n = LEN(v[2]);
    if (LEN(v[0]) < n || LEN(v[1]) < n)
        return psk_refuse(v, COUNT(pair_keys_specs),
                          "space_pair_keys(): sid_a or sid_b is shorter");
    if (psk_first_outside(a, n, 0, INT32_MAX) >= 0)
        return psk_refuse_arg(v, COUNT(pair_keys_specs), func, "sid_a",
                              "holds a space outside [0, 2 ** 31 - 1)");
    if (psk_first_outside(b, n, 0, INT32_MAX) >= 0)
        return psk_refuse_arg(v, COUNT(pair_keys_specs), func, "sid_b",
                              "holds a space outside [0, 2 ** 31 - 1)");
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = space_pair_key(a[i], b[i]);
    psk_release(v, COUNT(pair_keys_specs));
    Py_RETURN_NONE;
}
