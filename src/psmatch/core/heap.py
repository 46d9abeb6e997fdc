"""Python's heap during bulk work: the cyclic collector paused, freed pages given back.

Bulk paths (a matcher's ``add_many``, a worker replaying the change log) make millions
of small container objects that live until the bulk step ends and form no cycles:
reference counting frees them all. The cyclic collector, triggered by every few
hundred allocations, would walk them again and again; :func:`gc_paused` keeps it off
for the step. What the step freed stays in glibc's heap unless
:func:`release_free_heap` asks for it back.

Not done: having glibc map every block of 1 MiB or more apart (``mallopt``'s
``M_MMAP_THRESHOLD``; by default blocks of up to 32 MiB come from the heap, where a
worker's numpy temporaries leave holes). It lowers a large index's peak by a tenth or
so, but each temporary then costs fresh pages from the system: matching and the
service's throughput got markedly slower.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a bulk step, and restore its state
    (nested uses restore only the outermost). Cycles made meanwhile (an exception's
    traceback) are collected once it runs again.

    With the collector running, a bulk load of BE-Gen subscriptions or a worker's
    catch-up of the change log spends a large share of its CPU in collections that find
    nothing. Where the objects made do not live long (validating subscription records
    keeps only their texts) pausing it gains nothing.
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
    larger; matching leaves numpy temporaries' pages behind the same way (the peak, set
    while loading, stays). Only glibc has ``malloc_trim``; elsewhere this does nothing.
    Cost: a walk of the heap's free blocks, a few milliseconds in a process holding 1M
    subscriptions.
    """
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


@cache
def _glibc() -> ctypes.CDLL | None:
    """The C library if it is glibc (it has ``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim  # noqa: B018 - the lookup raises AttributeError without glibc
    except (OSError, AttributeError):
        return None
    return libc
