/* The compiled loops of psmatch: a CPython extension, psmatch.core._kernels. This file
 * owns the module: its method table and its initialisation; the loops live in kernels/,
 * one file per concept, and share the argument checks of kernels/args.c (declared, with
 * every kernel's prototype, in the private header kernels/args.h):
 *
 *   kernels/pstree.c         the PS-Tree verification and PSTHash's candidate scans
 *                            (src/psmatch/pstree/kernels.py)
 *   kernels/pstbloom.c       PSTBloom's Bloom signatures (src/psmatch/pstree/pstbloom.py)
 *   kernels/multimap.c       the multimap's compaction, merge, key directory and key filter
 *                            (src/psmatch/core/multimap.py)
 *   kernels/columns.c        the sorted-column insert, range expansion and bit scatter
 *                            (src/psmatch/core/columns.py), the byte range copies
 *                            (src/psmatch/core/slot_bytes.py)
 *   kernels/slot_ids.c       the id table (src/psmatch/core/slot_ids.py)
 *   kernels/scan.c           the bulk scanner of integer conjunctions
 *                            (src/psmatch/core/bulk_scan.py)
 *
 * Each loop's meaning, cost and callers are documented on its Python wrapper in those
 * modules, which also allocates its outputs where their length is known; the C files hold
 * the loops and the checks of their arguments.
 *
 * Why C and not numba (which compiled them before): numba needs LLVM in every process
 * that runs a kernel, about 115 MiB of resident memory per Spark Python worker, and a
 * cache of machine code to load on a worker's first call. These loops are plain C over
 * flat columns; built once by `pip install` (setuptools, the system's C compiler; the
 * sources are listed in pyproject.toml's ext-modules).
 *
 * Arguments: every column is a C-contiguous buffer (a numpy array) of the documented
 * element type, checked on entry (TypeError naming the argument otherwise); scalars are
 * Python ints. Every index, offset, count and length a loop relies on is checked too, in
 * one pass before the loop or, for what only a data-dependent read reaches (a candidate's
 * rows, a probe's table entries), where it is read: a value the loop cannot handle is a
 * ValueError naming the argument, never a read or write outside a column, and no loop
 * runs for ever (tests/core/test_kernel_properties.py; `make test-asan` runs the kernels'
 * tests under AddressSanitizer and UBSan). The loops run without the GIL.
 */
#include "kernels/args.h"

#define KERNEL(name, doc) {#name, (PyCFunction)(void (*)(void))psk_##name, METH_FASTCALL, doc}

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
    KERNEL(hash_ranges, "See psmatch.core.slot_ids."),
    KERNEL(find_slots, "See psmatch.core.slot_ids."),
    KERNEL(insert_slots, "See psmatch.core.slot_ids."),
    KERNEL(remove_slots, "See psmatch.core.slot_ids."),
    KERNEL(scan_comparisons, "See psmatch.core.bulk_scan.scan_columns."),
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kernels_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "psmatch.core._kernels",
    .m_doc = "The compiled loops of psmatch (see the comment at the top of "
             "src/psmatch/core/_kernels.c).",
    .m_size = -1,
    .m_methods = kernel_methods,
};

PyMODINIT_FUNC
PyInit__kernels(void)
{
    return PyModule_Create(&kernels_module);
}
