/* PSTBloom's Bloom signatures (their Python face: src/psmatch/pstree/pstbloom.py): setting
 * the two bits of each conjunct in its space's filter, and the candidates' filter pass.
 * Each checks the ids, offsets and filter sizes it relies on: a space's filter must lie
 * within the pool. */
#include "args.h"

/* The two bits of conjunct cid in a filter of `bits` bits (a power of two), from one
 * multiplicative hash of cid + 1. */
static inline void
bloom_positions(int64_t cid, uint64_t bits, uint64_t multiplier, uint64_t *a, uint64_t *b)
{
    uint64_t x = ((uint64_t)cid + 1) * multiplier, mask = bits - 1;
    *a = (x >> 40) & mask;
    *b = (x >> 8) & mask;
}

#define HAS_BIT(words, bit) (((words)[(bit) >> 6] >> ((bit) & 63)) & 1)

/* Whether a filter of `bits` bits (a power of two) at word `offset` lies within a pool of
 * n_words words. */
static inline int
filter_within(int64_t offset, int64_t bits, Py_ssize_t n_words)
{
    if (bits <= 0 || (bits & (bits - 1)))
        return 0;
    int64_t words = bits < 64 ? 1 : bits >> 6;
    return offset >= 0 && offset <= n_words - words;
}

static const Spec bloom_add_specs[] = {
    {"pool", UNSIGNED, 8, 1, 1}, {"offsets", SIGNED, 8, 0, 1}, {"bits", SIGNED, 8, 0, 1},
    {"cids", SIGNED, 8, 0, 1},
};

/* bloom_add(pool, offsets, bits, cids, multiplier): conjunct cids[i]'s two bits in the
 * filter of bits[i] bits (a power of two) at word offsets[i] of the pool. */
PyObject *
psk_bloom_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(bloom_add_specs)];
    uint64_t multiplier;
    if (!psk_check_nargs("bloom_add", nargs, 5) || !psk_unsigned_scalar(args[4], &multiplier)
        || !ACQUIRE("bloom_add", args, bloom_add_specs, v))
        return NULL;
    uint64_t *pool = U64(v[0]);
    const int64_t *offsets = I64(v[1]), *bits = I64(v[2]), *cids = I64(v[3]);
    Py_ssize_t n = LEN(v[3]);
    if (LEN(v[1]) < n || LEN(v[2]) < n)
        return psk_refuse(v, COUNT(bloom_add_specs),
                          "bloom_add(): offsets or bits is shorter than cids");
    for (Py_ssize_t i = 0; i < n; i++)
        if (!filter_within(offsets[i], bits[i], LEN(v[0])))
            return psk_refuse_arg(v, COUNT(bloom_add_specs), "bloom_add", "bits",
                                  "holds a size that is not a power of two, or a filter "
                                  "(with its offset) outside the pool");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t a, b, *filter = pool + offsets[i];
        bloom_positions(cids[i], (uint64_t)bits[i], multiplier, &a, &b);
        filter[a >> 6] |= (uint64_t)1 << (a & 63);
        filter[b >> 6] |= (uint64_t)1 << (b & 63);
    }
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(bloom_add_specs));
    Py_RETURN_NONE;
}

static const Spec signature_specs[] = {
    {"events", SIGNED, 8, 0, 1}, {"cids", SIGNED, 8, 0, 1}, {"alive", BOOL, 1, 0, 1},
    {"sig_mask", UNSIGNED, 8, 0, 1}, {"pred_start", SIGNED, 4, 0, 1},
    {"rows", SIGNED, 4, 0, 2}, {"sid_matrix", SIGNED, 8, 0, 2},
    {"sig_bits", SIGNED, 8, 0, 1}, {"sig_offset", SIGNED, 8, 0, 1},
    {"sig_pool", UNSIGNED, 8, 0, 1}, {"kept", SIGNED, 8, 1, 1},
};

/* signature_filter(events, cids, alive, sig_mask, pred_start, rows, sid_matrix, sig_bits,
 * sig_offset, sig_pool, kept, multiplier) -> n: kept[:n], the candidates i whose conjunct
 * is live and in the filter of its event's space in each signed predicate. Checked
 * first: events and cids as indices (of sid_matrix's rows, of alive, which sig_mask and
 * pred_start are as long as at least). Checked where read, the loop stopping with
 * ValueError: a live candidate's signed predicates' rows (pred_start[cid] + 1 + k for the
 * set bits k of sig_mask[cid] >> 1, from the first to the last, within rows), each one's
 * tree (within sid_matrix's columns), and the filter of a space with one (sig_bits[sid]
 * not 0: the words at sig_offset[sid] its mask reaches, within sig_pool): these are read
 * only for the candidates that get that far, whose number no pass before the loop
 * knows. */
PyObject *
psk_signature_filter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "signature_filter";
    Py_buffer v[COUNT(signature_specs)];
    uint64_t multiplier;
    if (!psk_check_nargs(func, nargs, COUNT(signature_specs) + 1)
        || !psk_unsigned_scalar(args[COUNT(signature_specs)], &multiplier)
        || !ACQUIRE(func, args, signature_specs, v))
        return NULL;
    const int64_t *events = I64(v[0]), *cids = I64(v[1]);
    const char *alive = BOOLS(v[2]);
    const uint64_t *sig_mask = U64(v[3]), *sig_pool = U64(v[9]);
    const int32_t *pred_start = I32(v[4]), *rows = I32(v[5]);
    const int64_t *sid_matrix = I64(v[6]), *sig_bits = I64(v[7]), *sig_offset = I64(v[8]);
    int64_t *kept = I64(v[10]);
    Py_ssize_t n = LEN(v[1]), n_trees = v[6].shape[1], n_signed = LEN(v[7]);
    Py_ssize_t n_rows = v[5].shape[0], n_words = LEN(v[9]), n_conjuncts = LEN(v[2]);
    if (LEN(v[0]) != n || LEN(v[10]) < n || v[5].shape[1] != ROW_WIDTH)
        return psk_refuse(v, COUNT(signature_specs), "signature_filter(): events and cids "
                          "differ in length, kept is shorter, or rows is not [rows, 3]");
    if (LEN(v[3]) < n_conjuncts || LEN(v[4]) < n_conjuncts || LEN(v[8]) < n_signed)
        return psk_refuse(v, COUNT(signature_specs), "signature_filter(): sig_mask or "
                          "pred_start is shorter than alive, or sig_offset than sig_bits");
    if (psk_first_outside(events, n, 0, v[6].shape[0]) >= 0)
        return psk_refuse_arg(v, COUNT(signature_specs), func, "events",
                              "holds an event outside sid_matrix");
    if (psk_first_outside(cids, n, 0, n_conjuncts) >= 0)
        return psk_refuse_arg(v, COUNT(signature_specs), func, "cids",
                              "holds a conjunct outside alive");
    const char *bad = NULL;
    int64_t n_kept = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        int64_t cid = cids[i];
        if (!alive[cid])
            continue;
        const int64_t *event_sids = sid_matrix + events[i] * n_trees;
        int holds = 1;
        /* predicate k of the conjunct, in access order, is signed when bit k is set; the
         * access predicate (k = 0) is not */
        uint64_t signed_rest = sig_mask[cid] >> 1;
        int64_t first_pid = (int64_t)pred_start[cid] + 1;
        /* the rows of the signed predicates, checked once: from the first to the last */
        if (signed_rest && (first_pid < 0 || first_pid + 63 - __builtin_clzll(signed_rest)
                                                 >= n_rows)) {
            bad = "pred_start";
            break;
        }
        for (int64_t pid = first_pid; signed_rest; signed_rest >>= 1, pid++) {
            if (!(signed_rest & 1))
                continue;
            int32_t tree = rows[pid * ROW_WIDTH + ROW_TREE];
            if (tree < 0 || tree >= n_trees) {
                bad = "rows";
                break;
            }
            int64_t sid = event_sids[tree];
            if (sid < 0) { /* the event lacks the predicate's attribute */
                holds = 0;
                break;
            }
            if (sid >= n_signed || sig_bits[sid] == 0)
                continue; /* the space has no filter */
            /* the words the mask bits - 1 can reach (any size > 0 stays within them) */
            int64_t bits = sig_bits[sid], offset = sig_offset[sid];
            if (bits < 0 || offset < 0 || offset > n_words - 1 - ((bits - 1) >> 6)) {
                bad = "sig_bits";
                break;
            }
            uint64_t a, b;
            bloom_positions(cid, (uint64_t)sig_bits[sid], multiplier, &a, &b);
            const uint64_t *filter = sig_pool + sig_offset[sid];
            if (!HAS_BIT(filter, a) || !HAS_BIT(filter, b)) {
                holds = 0;
                break;
            }
        }
        if (holds && !bad)
            kept[n_kept++] = i;
    }
    Py_END_ALLOW_THREADS
    if (bad)
        return psk_refuse_arg(v, COUNT(signature_specs), func, bad,
                              "leads to a row, tree or filter outside its column");
    psk_release(v, COUNT(signature_specs));
    return PyLong_FromLongLong(n_kept);
}
