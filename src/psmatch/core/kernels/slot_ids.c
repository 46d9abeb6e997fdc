/* The id table's loops (their Python face: src/psmatch/core/slot_ids.py): the ids' hashes,
 * and the lookup, filing and removal of slots in the linear-probing table. Each checks the
 * offsets and slots it relies on; every probe visits each entry of the table at most once,
 * so that a table without a free entry, or a slot absent from it, ends the probe. */
#include "args.h"

static const Spec hash_specs[] = {
    {"data", UNSIGNED, 1, 0, 1}, {"offsets", SIGNED, 8, 0, 1}, {"out", UNSIGNED, 4, 1, 1},
};

/* hash_ranges(data, offsets, out): out[i], the high half of the 64-bit FNV-1a of
 * data[offsets[i]:offsets[i + 1]]; offsets ascend within data. */
PyObject *
psk_hash_ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(hash_specs)];
    if (!psk_check_nargs("hash_ranges", nargs, 3) || !ACQUIRE("hash_ranges", args, hash_specs, v))
        return NULL;
    const uint8_t *data = U8(v[0]);
    const int64_t *offsets = I64(v[1]);
    uint32_t *out = U32(v[2]);
    Py_ssize_t n = LEN(v[2]);
    if (LEN(v[1]) < n + 1)
        return psk_refuse(v, COUNT(hash_specs), "hash_ranges(): offsets is not longer than out");
    if (!psk_offsets_within(offsets, n, LEN(v[0])))
        return psk_refuse_arg(v, COUNT(hash_specs), "hash_ranges", "offsets",
                              "does not ascend within data");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) { /* the high half of the 64-bit FNV-1a */
        uint64_t h = 14695981039346656037ULL;
        for (int64_t j = offsets[i]; j < offsets[i + 1]; j++)
            h = (h ^ data[j]) * 1099511628211ULL;
        out[i] = (uint32_t)(h >> 32);
    }
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(hash_specs));
    Py_RETURN_NONE;
}

/* The id table (psmatch.core.slot_ids) is a linear-probing table of any size below 2 ** 32
 * entries: an id's probe starts at its 32-bit hash scaled to the table (multiply-shift, no
 * division, no overflow below that size; the high half of FNV-1a, into which it mixes
 * every byte) and wraps at the end. Any size, not a power of two, lets the table be
 * rebuilt at twice the ids it holds, not four times. */
#define TABLE_HOME(hash, entries) (((uint64_t)(hash) * (entries)) >> 32)
#define TABLE_NEXT(at, entries) ((at) + 1 == (entries) ? 0 : (at) + 1)
#define TABLE_MAX ((Py_ssize_t)1 << 32)

static const Spec find_specs[] = {
    {"table", SIGNED, 4, 0, 1}, {"slot_hash", UNSIGNED, 4, 0, 1},
    {"buffer", UNSIGNED, 1, 0, 1}, {"start", SIGNED, 8, 0, 1}, {"length", SIGNED, 4, 0, 1},
    {"data", UNSIGNED, 1, 0, 1}, {"offsets", SIGNED, 8, 0, 1}, {"hashes", UNSIGNED, 4, 0, 1},
    {"out", SIGNED, 8, 1, 1},
};

/* find_slots(table, slot_hash, buffer, start, length, data, offsets, hashes, out, empty):
 * out[i], the slot whose hash and bytes (buffer[start[slot]:][:length[slot]]) equal query
 * i's (data[offsets[i]:offsets[i + 1]], hash hashes[i]), -1 if none: a probe from the
 * hash, past other entries, to the first empty one, at most once round the table.
 * Checked first: the queries' offsets ascend within data. Checked where read, the loop
 * stopping with ValueError: a table entry's slot (within slot_hash, start and length) and
 * the bytes it compares (within buffer): only the entries a probe meets are read. */
PyObject *
psk_find_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "find_slots";
    Py_buffer v[COUNT(find_specs)];
    int64_t empty;
    if (!psk_check_nargs(func, nargs, 10) || !psk_scalar(args[9], &empty)
        || !ACQUIRE(func, args, find_specs, v))
        return NULL;
    const int32_t *table = I32(v[0]), *length = I32(v[4]);
    const uint32_t *slot_hash = U32(v[1]), *hashes = U32(v[7]);
    const uint8_t *buffer = U8(v[2]), *data = U8(v[5]);
    const int64_t *start = I64(v[3]), *offsets = I64(v[6]);
    int64_t *out = I64(v[8]);
    Py_ssize_t n = LEN(v[8]), n_buffer = LEN(v[2]);
    Py_ssize_t n_slots = LEN(v[1]) < LEN(v[3]) ? LEN(v[1]) : LEN(v[3]);
    n_slots = n_slots < LEN(v[4]) ? n_slots : LEN(v[4]);
    uint64_t entries = (uint64_t)LEN(v[0]);
    if (LEN(v[7]) < n || LEN(v[6]) < n + 1)
        return psk_refuse(v, COUNT(find_specs),
                          "find_slots(): hashes or offsets too short for out");
    if (LEN(v[0]) >= TABLE_MAX)
        return psk_refuse_arg(v, COUNT(find_specs), func, "table",
                              "holds 2 ** 32 entries or more");
    if (!psk_offsets_within(offsets, n, LEN(v[5])))
        return psk_refuse_arg(v, COUNT(find_specs), func, "offsets",
                              "does not ascend within data");
    const char *bad = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        int64_t lo = offsets[i], size = offsets[i + 1] - offsets[i];
        out[i] = -1;
        uint64_t at = entries ? TABLE_HOME(hashes[i], entries) : 0;
        for (uint64_t probes = 0; probes < entries && table[at] != empty;
             probes++, at = TABLE_NEXT(at, entries)) {
            int32_t slot = table[at];
            if (slot < 0)
                continue; /* deleted */
            if (slot >= n_slots) {
                bad = "table";
                break;
            }
            if (slot_hash[slot] != hashes[i] || length[slot] != size)
                continue;
            if (size && (start[slot] < 0 || start[slot] > n_buffer - size)) {
                bad = "start";
                break;
            }
            if (memcmp(buffer + start[slot], data + lo, size) == 0) {
                out[i] = slot;
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (bad)
        return psk_refuse_arg(v, COUNT(find_specs), func, bad,
                              "leads to a slot or bytes outside their column");
    psk_release(v, COUNT(find_specs));
    Py_RETURN_NONE;
}

static const Spec table_specs[] = {
    {"table", SIGNED, 4, 1, 1}, {"slot_hash", UNSIGNED, 4, 0, 1}, {"slots", SIGNED, 8, 0, 1},
};

/* File (marker: the empty entry) or mark deleted (marker: the deleted entry) each slot,
 * at the first entry of its probe holding the marker (filing) or the slot (removing).
 * Checked first: each slot within slot_hash and int32, the marker within int32. A probe
 * goes once round the table at most: a table with no free entry (filing) or without the
 * slot (removing) stops the call with ValueError, the slots before it done. */
static PyObject *
update_table(const char *func, PyObject *const *args, Py_ssize_t nargs, int filing)
{
    Py_buffer v[COUNT(table_specs)];
    int64_t marker;
    if (!psk_check_nargs(func, nargs, 4) || !psk_scalar(args[3], &marker)
        || !ACQUIRE(func, args, table_specs, v))
        return NULL;
    int32_t *table = I32(v[0]);
    const uint32_t *slot_hash = U32(v[1]);
    const int64_t *slots = I64(v[2]);
    uint64_t entries = (uint64_t)LEN(v[0]);
    Py_ssize_t n = LEN(v[2]);
    Py_ssize_t n_slots = LEN(v[1]) <= INT32_MAX ? LEN(v[1]) : (Py_ssize_t)INT32_MAX + 1;
    if (marker < INT32_MIN || marker > INT32_MAX)
        return psk_refuse_arg(v, COUNT(table_specs), func, "marker", "is not an int32");
    if (LEN(v[0]) >= TABLE_MAX)
        return psk_refuse_arg(v, COUNT(table_specs), func, "table",
                              "holds 2 ** 32 entries or more");
    if (psk_first_outside(slots, n, 0, n_slots) >= 0)
        return psk_refuse_arg(v, COUNT(table_specs), func, "slots",
                              "holds a slot outside slot_hash (or int32)");
    Py_ssize_t failed = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && failed < 0; i++) {
        uint64_t at = entries ? TABLE_HOME(slot_hash[slots[i]], entries) : 0, probes = 0;
        int64_t wanted = filing ? marker : slots[i];
        while (probes < entries && table[at] != wanted) {
            at = TABLE_NEXT(at, entries);
            probes++;
        }
        if (probes == entries)
            failed = i;
        else
            table[at] = (int32_t)(filing ? slots[i] : marker);
    }
    Py_END_ALLOW_THREADS
    if (failed >= 0)
        return psk_refuse_arg(v, COUNT(table_specs), func, filing ? "table" : "slots",
                              filing ? "has no free entry for a slot (those before it are filed)"
                                     : "holds a slot absent from the table (those before it "
                                       "are removed)");
    psk_release(v, COUNT(table_specs));
    Py_RETURN_NONE;
}

PyObject *
psk_insert_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return update_table("insert_slots", args, nargs, 1);
}

PyObject *
psk_remove_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return update_table("remove_slots", args, nargs, 0);
}
