/* PSTBloom's Bloom signatures (their Python face: src/psmatch/pstree/pstbloom.py): setting
 * the two bits of each conjunct in its space's filter, and the candidates' filter pass. */
#include "args.h"

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

PyObject *
psk_signature_filter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(signature_specs)];
    uint64_t multiplier;
    if (!psk_check_nargs("signature_filter", nargs, COUNT(signature_specs) + 1)
        || !psk_unsigned_scalar(args[COUNT(signature_specs)], &multiplier)
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
        return psk_refuse(v, COUNT(signature_specs), "signature_filter(): events and cids "
                          "differ in length, kept is shorter, or rows is not [rows, 3]");
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
    psk_release(v, COUNT(signature_specs));
    return PyLong_FromLongLong(n_kept);
}
