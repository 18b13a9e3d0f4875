"""What a ranking join needs beside the columnar join buffer: item lists and relevance maps.

A ranking prediction is one query's ranked list and its label a relevance map; neither fits
the fixed-width columns of :class:`~monitor.engine.table.KeyedTable`. The buffer still holds
the query's row (identity, time, group, join state, and the label's digest as its value, so
duplicates and conflicts are judged as for any label); this side table holds the variable
parts until the join turns them into one fixed-size row of per-query sums
(:class:`~monitor.stats.ranking.RankingLayout`), which is all the buckets keep.

- A list waits under (id hash, group) until its label joins it, then is dropped.
- A relevance map stays under (id hash, digest) while any prediction or waiting label of
  that id is in the buffer: a later version's prediction (shadow mode) joins it too.
- Entries whose id left the buffer (joined and expired, evicted) are collected, amortized.

Checkpointed as flat arrays (UTF-8 item bytes, lengths, scores, grades): no pickle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import attrgetter, is_, is_not
from typing import Any

import numpy as np

from ..metrics.protocol import RankingRows
from ..stats.ranking import RankedList, RankingLayout, batch_query_metrics

__all__ = ["RankingState"]

_PREFIX = "ranking."


class RankingState:
    """Ranked lists waiting for labels and relevance maps, keyed by id hash."""

    def __init__(self) -> None:
        self.lists: dict[tuple[int, int], RankedList] = {}  # (key, group) -> list
        self.relevance: dict[tuple[int, float], dict[str, float]] = {}  # (key, digest)

    def __len__(self) -> int:
        return len(self.lists) + len(self.relevance)

    def add_lists(self, keys: np.ndarray, groups: np.ndarray, lists: Sequence[Any]) -> None:
        """Lists of new (first-seen) predictions; rows of other tasks carry None."""
        for key, group, ranked in zip(keys.tolist(), groups.tolist(), lists, strict=True):
            if ranked is not None:
                self.lists[(key, group)] = ranked

    def add_relevance(
        self,
        keys: np.ndarray,
        digests: np.ndarray,
        relevance: Sequence[dict[str, float] | None],
    ) -> np.ndarray:
        """Keep each ranking label's grades (the first of equal digests); returns the mask
        of rows that are ranking labels."""
        mask = np.fromiter(map(is_not, relevance, repeat(None)), bool, len(relevance))
        if not mask.any():
            return mask
        pairs = list(compress(zip(keys.tolist(), digests.tolist(), strict=True), mask))
        grades = list(compress(relevance, mask))
        fresh = dict(zip(reversed(pairs), reversed(grades), strict=True))  # the first wins
        held = self.relevance
        for pair in fresh.keys() & held.keys():  # ... and one held already
            del fresh[pair]
        held.update(fresh)
        return mask

    def contributions(
        self,
        layout: RankingLayout,
        keys: np.ndarray,
        groups: np.ndarray,
        digests: np.ndarray,
        keep: list[RankingRows] | None = None,
    ) -> np.ndarray:
        """Per-query rows (``layout.width``) of joined queries; their lists are released.
        A query whose list or grades are unknown contributes a zero row (counted nowhere),
        which a consistent state never produces. ``keep``: also append the queries' grades
        in ranked order (what metric families of ranking models read; an unknown query
        has none).

        The batch's queries are scored together (``batch_query_metrics``): the grades of
        every ranked item of the batch are looked up in one C-level ``map`` (each item in
        its query's map), and the scores and grades of all queries are concatenated once,
        as are the judged grades of each query (``all_judged``: no per-query split into
        ranked and unranked items)."""
        n = keys.shape[0]
        out = np.zeros((n, layout.width))
        key_list = keys.tolist()
        lists = list(map(self.lists.pop, zip(key_list, groups.tolist(), strict=True),
                         repeat(None)))  # fmt: skip
        grades = list(map(self.relevance.get, zip(key_list, digests.tolist(), strict=True)))
        known: list[int] | slice
        if any(map(is_, lists, repeat(None))) or None in grades:  # (consistent: none)
            known = [i for i, (r, g) in enumerate(zip(lists, grades, strict=True))
                     if r is not None and g is not None]  # fmt: skip
            ranked, maps = [lists[i] for i in known], [grades[i] for i in known]
        else:
            known, ranked, maps = slice(None), lists, grades
        nk = len(ranked)
        lengths = np.fromiter(map(len, map(_items, ranked)), np.int64, nk)
        # each ranked item's grade (0: unjudged), all queries' items in one C-level map
        each_map = chain.from_iterable(map(repeat, maps, lengths.tolist()))
        items = chain.from_iterable(map(_items, ranked))
        total = int(lengths.sum())
        gains = np.fromiter(map(dict.get, each_map, items, repeat(0.0)), np.float64, total)
        judged_lengths = np.fromiter(map(len, maps), np.int64, nk)
        judged = np.fromiter(
            chain.from_iterable(map(dict.values, maps)), np.float64, int(judged_lengths.sum())
        )
        if nk:
            scores = np.concatenate(list(map(_scores, ranked)), dtype=np.float64)
            out[known] = batch_query_metrics(
                scores, gains, lengths, judged, judged_lengths, layout.ks, all_judged=True
            )
        if keep is not None:
            sizes = np.zeros(n, np.int64)
            sizes[known] = lengths
            missed = np.zeros(n, np.int64)
            # relevant items a list did not rank: judged relevant minus ranked relevant
            missed[known] = _per_query_positive(judged, judged_lengths) - _per_query_positive(
                gains, lengths
            )
            keep.append(
                RankingRows(gains, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), missed)
            )
        return out

    def collect(
        self,
        in_predictions: Callable[[np.ndarray], np.ndarray],
        in_labels: Callable[[np.ndarray], np.ndarray],
    ) -> int:
        """Drop lists whose id has no prediction left and maps whose id has neither a
        prediction nor a waiting label; returns entries dropped."""
        before = len(self)
        if self.lists:
            keys = np.fromiter((k for k, _ in self.lists), np.uint64, len(self.lists))
            alive = in_predictions(keys)
            for (key, group), ok in zip(list(self.lists), alive.tolist(), strict=True):
                if not ok:
                    del self.lists[(key, group)]
        if self.relevance:
            keys = np.fromiter((k for k, _ in self.relevance), np.uint64, len(self.relevance))
            alive = in_predictions(keys) | in_labels(keys)
            for entry, ok in zip(list(self.relevance), alive.tolist(), strict=True):
                if not ok:
                    del self.relevance[entry]
        return before - len(self)

    # -- state ---------------------------------------------------------------------------
    def arrays(self) -> dict[str, np.ndarray]:
        lists = list(self.lists.items())
        rel = list(self.relevance.items())
        item_len, item_bytes = _pack([i for _, r in lists for i in r.items])
        rel_len, rel_bytes = _pack([i for _, g in rel for i in g])
        return {
            f"{_PREFIX}list_keys": np.array([k for (k, _), _ in lists], np.uint64),
            f"{_PREFIX}list_groups": np.array([g for (_, g), _ in lists], np.int64),
            f"{_PREFIX}list_sizes": np.array([len(r.items) for _, r in lists], np.int64),
            f"{_PREFIX}list_scores": np.concatenate(
                [np.zeros(0)] + [np.asarray(r.scores, np.float64) for _, r in lists]
            ),
            f"{_PREFIX}item_len": item_len,
            f"{_PREFIX}item_bytes": item_bytes,
            f"{_PREFIX}rel_keys": np.array([k for (k, _), _ in rel], np.uint64),
            f"{_PREFIX}rel_digests": np.array([d for (_, d), _ in rel], np.float64),
            f"{_PREFIX}rel_sizes": np.array([len(g) for _, g in rel], np.int64),
            f"{_PREFIX}rel_grades": np.array([x for _, g in rel for x in g.values()], np.float64),
            f"{_PREFIX}rel_item_len": rel_len,
            f"{_PREFIX}rel_item_bytes": rel_bytes,
        }

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Restore from :meth:`arrays`; ValueError when the arrays do not fit together."""
        a = {k[len(_PREFIX) :]: np.asarray(v) for k, v in arrays.items() if k.startswith(_PREFIX)}
        self.lists, self.relevance = {}, {}
        if not a:
            return
        sizes = a["list_sizes"].astype(np.int64)
        items = _unpack(a["item_len"], a["item_bytes"])
        scores = a["list_scores"].astype(np.float64)
        packed = _packed(
            "ranked lists", "groups", sizes, a["list_keys"], a["list_groups"], len(items), scores
        )
        for key, group, start, end in packed:
            self.lists[(int(key), int(group))] = RankedList(
                tuple(items[start:end]), scores[start:end].copy()
            )
        sizes = a["rel_sizes"].astype(np.int64)
        names = _unpack(a["rel_item_len"], a["rel_item_bytes"])
        grades = a["rel_grades"].astype(np.float64)
        packed = _packed(
            "relevance maps", "digests", sizes, a["rel_keys"], a["rel_digests"], len(names), grades
        )
        for key, digest, start, end in packed:
            self.relevance[(int(key), float(digest))] = dict(
                zip(names[start:end], grades[start:end].tolist(), strict=True)
            )


_items = attrgetter("items")
_scores = attrgetter("scores")


def _per_query_positive(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """How many of each query's ``lengths[q]`` consecutive ``values`` are positive."""
    owner = np.repeat(np.arange(lengths.shape[0]), lengths)
    return np.bincount(owner, weights=values > 0, minlength=lengths.shape[0]).astype(np.int64)


def _pack(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [s.encode("utf-8") for s in strings]
    lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
    return lengths, np.frombuffer(b"".join(encoded), np.uint8).copy()


def _unpack(lengths: np.ndarray, data: np.ndarray) -> list[str]:
    lengths = np.asarray(lengths, np.int64)
    raw = np.asarray(data, np.uint8).tobytes()
    if (lengths < 0).any() or int(lengths.sum()) != len(raw):
        raise ValueError("item ids: lengths disagree with the bytes")
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]] if ends else []
    try:
        return [raw[s:e].decode("utf-8") for s, e in zip(starts, ends, strict=True)]
    except UnicodeDecodeError as err:
        raise ValueError(f"item ids are not UTF-8: {err}") from None


def _packed(
    what: str,
    tag: str,
    sizes: np.ndarray,
    keys: np.ndarray,
    tags: np.ndarray,
    items: int,
    values: np.ndarray,
) -> list[tuple[int, int | float, int, int]]:
    """(key, tag, start, end) of each entry packed as ``sizes`` consecutive ones of the
    ``items`` item ids and their ``values``; ValueError when the arrays do not fit."""
    if not (sizes.shape == keys.shape == tags.shape) or (sizes < 0).any():
        raise ValueError(f"{what}: keys, {tag} and sizes disagree")
    if int(sizes.sum()) != items or values.shape != (items,):
        raise ValueError(f"{what}: item counts disagree")
    ends = np.cumsum(sizes)
    return list(
        zip(keys.tolist(), tags.tolist(), (ends - sizes).tolist(), ends.tolist(), strict=True)
    )
