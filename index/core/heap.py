"""Python's heap during bulk work: the cyclic collector paused, freed pages given back.

Bulk paths (a matcher's ``add_many``, a worker replaying the change log) make millions
of small container objects that live until the bulk step ends and form no cycles:
reference counting frees them all. The cyclic collector, triggered by every few
hundred allocations, would walk them again and again; :func:`gc_paused` keeps it off
for the step. What the step freed stays in glibc's heap unless
:func:`release_free_heap` asks for it back, and by default glibc serves allocations of
up to 32 MiB from that heap (its threshold for a mapping of their own grows to the
largest block freed), so that a worker's numpy temporaries leave it full of holes:
:func:`map_large_allocations` keeps the threshold at :data:`LARGE_ALLOCATION`.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

LARGE_ALLOCATION = 1 << 20
"""Bytes from which :func:`map_large_allocations` has glibc give an allocation a mapping
of its own, returned to the system when it is freed."""
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a bulk step, and restore its state
    (nested uses restore only the outermost). Cycles made meanwhile (an exception's
    traceback) are collected once it runs again.

    Measured on this machine: ``WorkerIndex.apply`` of 100,000 BE-Gen subscriptions into
    PSTHash took 17.8 and 21.2 s CPU with the collector, 11.5 and 12.9 s without; a
    worker's catch-up of 200,000 changes 52-58 µs a change with it (the collector
    paused in ``add_many`` only), 40-41 µs without. Where the objects made do not live
    long (validating subscription records keeps only their texts) it gains nothing:
    ``validate_records`` took 56-64 µs a record either way.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def release_free_heap() -> None:
    """Give the heap pages freed by a bulk step back to the operating system.

    Parsing leaves many short-lived Python objects behind; glibc keeps their pages
    unless asked, so a process that loaded a million subscriptions would stay that much
    larger. Only glibc has ``malloc_trim``; elsewhere this does nothing. Cost: a walk
    of the heap's free blocks, 2-5 ms in a process holding 1M subscriptions.
    """
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def map_large_allocations() -> None:
    """Have glibc serve every allocation of :data:`LARGE_ALLOCATION` bytes or more by a
    mapping of its own (``mallopt(M_MMAP_THRESHOLD)``), unmapped when it is freed,
    instead of from the heap. Process-wide and idempotent; does nothing without glibc.

    Measured in one process holding 1M BE-Gen subscriptions in PSTHash, loaded through
    the change log, then matching and replacing 200,000 of them: the peak resident
    memory was 815-817 MiB loading and 884 MiB replacing, against 901-920 and 940-949
    MiB with glibc's default; matching 8,000 events took 0.8-1.1 s of CPU at a 32 MiB,
    1 MiB or 256 KiB threshold alike.
    """
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, LARGE_ALLOCATION)


@cache
def _glibc() -> ctypes.CDLL | None:
    """The C library if it is glibc (it has ``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim  # noqa: B018 - the lookup raises AttributeError without glibc
    except (OSError, AttributeError):
        return None
    return libc
