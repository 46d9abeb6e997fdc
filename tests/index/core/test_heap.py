"""The heap during bulk work: the cyclic collector paused and restored, large blocks
mapped apart."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

from index.core.heap import LARGE_ALLOCATION, gc_paused, map_large_allocations


def test_the_collector_is_off_inside_and_restored_by_the_outermost_pause() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause found it off, and leaves it off
    assert gc.isenabled()


def test_a_pause_ends_when_its_step_raises_and_keeps_a_collector_found_off() -> None:
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("a bulk step failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()



class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]  # fmt: skip


def _mapped_bytes() -> int:
    """Bytes glibc holds in allocations of their own mapping (``mallinfo2().hblkhd``)."""
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = _MallInfo2
    return int(mallinfo2().hblkhd)


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc >= 2.33 only")
def test_after_map_large_allocations_a_large_block_is_mapped_and_unmapped_when_freed() -> None:
    # freeing a 16 MiB mapped block would raise glibc's default threshold past 2 MiB
    assert np.ones(16 << 20, dtype=np.uint8).all()  # allocated, then freed
    map_large_allocations()
    before = _mapped_bytes()
    block = np.ones(2 * LARGE_ALLOCATION, dtype=np.uint8)
    assert _mapped_bytes() - before >= block.nbytes
    del block
    assert _mapped_bytes() - before < LARGE_ALLOCATION
