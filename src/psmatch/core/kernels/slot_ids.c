/* The id table's loops (their Python face: src/psmatch/core/slot_ids.py): the ids' hashes,
 * and the lookup, filing and removal of slots in the linear-probing table. */
#include "args.h"

static const Spec hash_specs[] = {
    {"data", UNSIGNED, 1, 0, 1}, {"offsets", SIGNED, 8, 0, 1}, {"out", UNSIGNED, 4, 1, 1},
};

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

PyObject *
psk_find_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(find_specs)];
    int64_t empty;
    if (!psk_check_nargs("find_slots", nargs, 10) || !psk_scalar(args[9], &empty)
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
        return psk_refuse(v, COUNT(find_specs),
                          "find_slots(): hashes or offsets too short for out");
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
    psk_release(v, COUNT(find_specs));
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
    if (!psk_check_nargs(func, nargs, 4) || !psk_scalar(args[3], &marker)
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
