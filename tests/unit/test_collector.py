"""The collector pause around an evaluation: what a keeping block makes is frozen out of
the young collection, thawed by the next keeping block, and a reference cycle frozen
with it is still reclaimed by the periodic full pass."""

from __future__ import annotations

import gc
import weakref

import pytest

import monitor.collector as collector
from monitor.collector import collector_paused


class _Node:
    def __init__(self) -> None:
        self.other: object = self


def test_a_keeping_block_freezes_what_it_made_and_the_next_thaws_it() -> None:
    was = gc.isenabled()
    gc.enable()
    try:
        with collector_paused(keep=True):
            assert not gc.isenabled()
            made = [[i] for i in range(1_000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(made)
        assert not any(x is made[0] for x in gc.get_objects())  # no young pass walks them
        with collector_paused(keep=True):
            assert gc.get_freeze_count() == 0  # thawed at the start of the next block
            assert any(x is made[0] for x in gc.get_objects(generation=2))
        with collector_paused():  # a plain pause freezes nothing more
            pass
    finally:
        gc.unfreeze()
        if not was:
            gc.disable()


def test_a_frozen_cycle_is_reclaimed_by_the_full_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    with collector_paused(keep=True):
        ref = weakref.ref(_Node())  # garbage at once, but only a cycle pass can free it
    gc.collect()
    assert ref() is not None  # frozen: no pass sees it
    monkeypatch.setattr(collector, "FULL_PASS_EVERY_S", 0.0)
    try:
        with collector_paused(keep=True):  # thaws, and a full pass is due
            assert ref() is None
    finally:
        gc.unfreeze()


def test_cyclic_garbage_made_before_a_keeping_block_is_collected_at_its_start() -> None:
    """Else the block's end freezes it with the block's own survivors."""
    was = gc.isenabled()
    gc.disable()  # no young pass may reclaim it first
    try:
        ref = weakref.ref(_Node())
        assert ref() is not None
        with collector_paused(keep=True):
            assert ref() is None
    finally:
        gc.unfreeze()
        if was:
            gc.enable()
