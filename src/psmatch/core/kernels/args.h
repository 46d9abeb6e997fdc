/* Private header of psmatch.core._kernels: what every kernel file shares. Owns the column
 * specification (Spec) and the helpers that acquire and check a kernel's arguments
 * (args.c), the views' typed accessors, the int64 output columns a kernel sizes itself,
 * the binary search and the PS-Tree predicate row that two files use each, and the
 * prototypes of every kernel, for the method table (src/psmatch/core/_kernels.c).
 *
 * Names shared between the files carry the prefix psk_; the extension is built with
 * -fvisibility=hidden, so that none of them is exported from the shared object (only
 * PyInit__kernels is).
 */
#ifndef PSMATCH_KERNELS_ARGS_H
#define PSMATCH_KERNELS_ARGS_H

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

/* Acquire the buffers of args[0 .. n - 1] as specs says; on failure release those taken,
 * set TypeError (or the buffer protocol's error) and return 0. */
int psk_acquire(const char *func, PyObject *const *args, const Spec *specs, int n,
                Py_buffer *views);
void psk_release(Py_buffer *views, int n);
/* Release the views and refuse the call's lengths: ValueError(message), NULL. */
PyObject *psk_refuse(Py_buffer *views, int n, const char *message);
int psk_check_nargs(const char *func, Py_ssize_t nargs, Py_ssize_t want);
/* A Python int argument as int64 or uint64; 0 with the conversion's error set. */
int psk_scalar(PyObject *obj, int64_t *out);
int psk_unsigned_scalar(PyObject *obj, uint64_t *out);
/* An int64 column the kernel fills: a bytearray, viewed by its caller with np.frombuffer. */
PyObject *psk_new_int64_column(Py_ssize_t n);

/* The value checks, each one pass before a loop: every index, offset, count and length a
 * loop relies on is checked, and a value it cannot handle is refused with ValueError
 * naming the argument, "func(): argument 'name' <what>" (psk_refuse_arg releases the
 * views first). The psk_first_* passes return the first index i < n that fails, or -1. */
PyObject *psk_refuse_arg(Py_buffer *views, int n, const char *func, const char *name,
                         const char *what);
/* values[i] outside [lo, hi) */
Py_ssize_t psk_first_outside(const int64_t *values, Py_ssize_t n, int64_t lo, int64_t hi);
Py_ssize_t psk_first_outside32(const int32_t *values, Py_ssize_t n, int64_t lo, int64_t hi);
/* values[i + 1] < values[i] */
Py_ssize_t psk_first_descent(const int64_t *values, Py_ssize_t n);
/* Whether offsets[0 .. n] (n + 1 of them) ascend from 0 or more to at most limit: the CSR
 * ranges offsets[i]:offsets[i + 1] of a column of limit items. */
int psk_offsets_within(const int64_t *offsets, Py_ssize_t n, int64_t limit);

/* The number of columns a loop's specs describe, and the acquisition of them all. */
#define COUNT(specs) ((int)(sizeof(specs) / sizeof((specs)[0])))
#define ACQUIRE(func, args, specs, views) psk_acquire(func, args, specs, COUNT(specs), views)

#define LEN(view) ((view).shape[0])
#define I64(view) ((int64_t *)(view).buf)
#define I32(view) ((int32_t *)(view).buf)
#define U64(view) ((uint64_t *)(view).buf)
#define U32(view) ((uint32_t *)(view).buf)
#define U8(view) ((uint8_t *)(view).buf)
#define BOOLS(view) ((const char *)(view).buf)

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

/* The PS-Tree family's predicate rows (pstree.c, pstbloom.c), an int32 column [rows, 3]. A
 * predicate row: its tree, its low end and the bound code of its hull's high end. The low
 * end is a bound code (-1: unbounded) for a single interval; a predicate of several has
 * -2 - (the start of its run in runs) there instead, its hull's low end being its run's
 * first. */
enum { ROW_TREE, ROW_LO, ROW_HI, ROW_WIDTH };
#define ROW_RUN(lo) (-2 - (lo))

/* The kernels, by the file that holds each (METH_FASTCALL functions). */
#define PSK_KERNEL(name) PyObject *psk_##name(PyObject *self, PyObject *const *args, \
                                              Py_ssize_t nargs)
/* pstree.c */
PSK_KERNEL(verify_candidates);
PSK_KERNEL(fallback_candidates);
PSK_KERNEL(hashed_pair_entries);
PSK_KERNEL(space_pair_keys);
/* pstbloom.c */
PSK_KERNEL(bloom_add);
PSK_KERNEL(signature_filter);
/* multimap.c */
PSK_KERNEL(compact_in_place);
PSK_KERNEL(shift_offsets);
PSK_KERNEL(bucket_starts);
PSK_KERNEL(lower_bounds);
PSK_KERNEL(filter_add);
PSK_KERNEL(filter_may_hold);
/* columns.c */
PSK_KERNEL(move_right_and_insert);
PSK_KERNEL(expand_ranges);
PSK_KERNEL(set_bits);
PSK_KERNEL(copy_ranges);
/* slot_ids.c */
PSK_KERNEL(hash_ranges);
PSK_KERNEL(find_slots);
PSK_KERNEL(insert_slots);
PSK_KERNEL(remove_slots);
PSK_KERNEL(scan_comparisons);

#endif
