"""Pausing the cyclic collector for a bulk step, and restoring it."""

from __future__ import annotations

import gc

import pytest

from psmatch.core.heap import gc_paused


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
