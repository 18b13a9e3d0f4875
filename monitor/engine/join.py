"""The join buffer: predictions waiting for labels, labels waiting for predictions.

``JoinBuffer`` owns the two keyed tables, the duplicate and conflict rules and the
bounds (TTLs on the other stream's robust progress, eviction caps); the engine hands it
batches and receives the rows that joined (:class:`Joined`), which it passes on to its
accumulators. It knows nothing of models or buckets: which label a row stores for its
model comes from the engine's ``classify`` function.

Join semantics (docs/semantics.md):
- A label joins the prediction with the same id whichever arrives first. Identity of a
  prediction is (id, model, version): two versions scoring one id (shadow mode) are two
  predictions that share the label.
- A prediction waits until the label stream's robust progress passes its timestamp +
  ``label_ttl``; a label that arrived first waits until the prediction stream's passes
  its timestamp + ``orphan_label_ttl`` — event time, so a replay and a live run agree,
  and a stalled label feed expires nothing that still waits for it.
- At most ``max_pending`` predictions and ``max_orphan_labels`` labels are held; the
  oldest (by event time) are evicted first. Every expiry and eviction is counted.
- Duplicates are idempotent (first wins, counted); a second label that disagrees with
  the first is a ``conflicting_label`` rejection.
- Joined predictions stay (marked labeled) until their TTL, so late duplicates and
  conflicts are still recognised.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .table import KeyedTable, stable_order

__all__ = ["NO_TS", "NUMERIC", "RANKED", "JoinBuffer", "JoinReject", "Joined", "Unseen"]

JoinReject = tuple[int, str, str]  # (index in the batch, reason, detail)

NO_TS = np.iinfo(np.int64).min
# label_code of a label that is a number and no class name (a regression target): its
# value lives in the float column beside it, so targets never grow the label vocabulary
NUMERIC = -2
# label_code of a ranking label: its relevance map waits in the engine's RankingState, its
# digest in the float column (so equal maps are duplicates and different ones conflicts)
RANKED = -3

PRED_COLUMNS: dict[str, type] = {
    "ts": np.int64,
    "group": np.int32,
    "score": np.float64,
    "decision": np.int8,
    "label": np.int8,  # 1/0 positive/negative for this model, -1 waiting
    "label_code": np.int32,  # canonical label text code, -1 waiting
    "label_ts": np.int64,
}
ORPHAN_COLUMNS: dict[str, type] = {"ts": np.int64, "code": np.int32}

# (label codes, numeric values, groups) -> the label each row stores for its model, -1
# when the label does not fit the model
Classify = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True, slots=True)
class Joined:
    """Prediction rows that just got their label. ``rows`` index ``JoinBuffer.preds``
    and stay valid until its next insert; the other fields are per row."""

    rows: np.ndarray
    group: np.ndarray
    pred_ts: np.ndarray
    y_true: np.ndarray  # 1/0 (binary), class index (multiclass), 0 (regression, ranking)
    decision: np.ndarray
    score: np.ndarray
    codes: np.ndarray
    values: np.ndarray  # numeric label (regression target, relevance digest) or NaN
    label_ts: np.ndarray

    def __len__(self) -> int:
        return int(self.rows.shape[0])


@dataclass(frozen=True, slots=True)
class Unseen:
    """``JoinBuffer.unseen``'s answer: the batch positions (ascending) of the predictions
    to insert, and the rows already held under their ids — ``rows[i]`` belongs to the
    prediction at ``positions[index[i]]``. ``order``: the stable sorting permutation of
    the keys to insert, when sorting the batch gave it (every row inserted, no two keys
    equal — the common batch), so the inserts and the orphans' lookup sort none again."""

    positions: np.ndarray
    index: np.ndarray
    rows: np.ndarray
    order: np.ndarray | None = None


class JoinBuffer:
    """Pending predictions and orphan labels, with their bounds and join rules."""

    def __init__(
        self,
        extra_columns: Mapping[str, type],
        label_ttl_ms: int,
        orphan_label_ttl_ms: int,
        max_pending: int,
        max_orphan_labels: int,
        numeric_labels: bool = False,
    ) -> None:
        """``extra_columns``: task columns of the predictions (probabilities, bounds,
        ranking loss); ``numeric_labels`` keeps label values (regression, ranking)."""
        self.label_ttl_ms = int(label_ttl_ms)
        self.orphan_label_ttl_ms = int(orphan_label_ttl_ms)
        self.max_pending = int(max_pending)
        self.max_orphan_labels = int(max_orphan_labels)
        self.numeric_labels = numeric_labels
        self.pred_columns: dict[str, type] = {**PRED_COLUMNS, **extra_columns}
        self.orphan_columns: dict[str, type] = dict(ORPHAN_COLUMNS)
        if numeric_labels:
            self.pred_columns["label_value"] = np.float64
            self.orphan_columns["value"] = np.float64
        self.preds = KeyedTable(self.pred_columns, unique=False)
        self.orphans = KeyedTable(self.orphan_columns)
        self.pending = 0  # predictions still waiting for their label
        self._min_pred_ts = NO_TS
        self._min_orphan_ts = NO_TS

    def nbytes(self) -> int:
        return self.preds.nbytes() + self.orphans.nbytes()

    def value(self, table: KeyedTable, rows: np.ndarray) -> np.ndarray:
        """Numeric label values of some rows (NaN when no model keeps them)."""
        column = "label_value" if table is self.preds else "value"
        if column in table.columns:
            return table.col(column)[rows]
        return np.full(rows.shape[0], np.nan)

    def proba(self, rows: np.ndarray, k: int) -> np.ndarray:
        """(rows, k) probabilities of multiclass predictions (NaN rows: decision only)."""
        return np.column_stack([self.preds.col(f"p{j}")[rows] for j in range(k)])

    def has_prediction(self, keys: np.ndarray) -> np.ndarray:
        present = np.zeros(keys.shape[0], bool)
        present[self.preds.lookup_all(keys)[0]] = True
        return present

    def has_label(self, keys: np.ndarray) -> np.ndarray:
        return self.orphans.lookup(keys) >= 0

    # -- predictions -------------------------------------------------------------------
    def unseen(
        self, keys: np.ndarray, identity: np.ndarray, identity_of_group: np.ndarray
    ) -> Unseen:
        """The predictions to insert: the first of each (key, identity) in the batch, if
        the buffer does not hold it yet. ``identity`` is each row's (model, version)
        index, ``identity_of_group`` the same per group, so a resend with other segments
        is a duplicate. Also the rows already held under their ids (other identities:
        the siblings ``join_new`` may take a label from)."""
        distinct = None  # the keys' order, when no two are equal (every row is first)
        if identity.shape[0] and identity.min() == identity.max():
            order = stable_order(keys)  # one identity: the keys decide
            ks = keys[order]
            is_first = np.ones(order.shape[0], bool)
            is_first[1:] = ks[1:] != ks[:-1]
            if is_first.all():
                distinct = order
        else:
            order = np.lexsort((identity, keys))  # stable: earliest index first
            ks, ms = keys[order], identity[order]
            is_first = np.ones(order.shape[0], bool)
            is_first[1:] = (ks[1:] != ks[:-1]) | (ms[1:] != ms[:-1])
        if distinct is None:
            first = np.sort(order[is_first])
            q, rows = self.preds.lookup_all(keys[first])
        else:
            first = np.arange(keys.shape[0])
            q, rows = self.preds.lookup_all(keys, distinct)
        exists = np.zeros(first.shape[0], bool)
        same = identity_of_group[self.preds.col("group")[rows]] == identity[first][q]
        exists[q[same]] = True
        fresh = ~exists
        prior = fresh[q]
        index = np.cumsum(fresh) - 1  # position among the fresh ones
        if distinct is not None and not fresh.all():
            distinct = None  # (the ones held already are not inserted)
        return Unseen(first[fresh], index[q[prior]], rows[prior], distinct)

    def insert_predictions(
        self, keys: np.ndarray, columns: Mapping[str, np.ndarray], order: np.ndarray | None = None
    ) -> np.ndarray:
        """Add new predictions, waiting (label columns are set here); returns their rows,
        valid until :meth:`settle` (the caller's, once the batch is joined and counted).
        ``order``: the keys' stable sorting permutation (``Unseen.order``), if known."""
        k = keys.shape[0]
        cols = dict(columns)
        cols.update(
            label=np.full(k, -1, np.int8),
            label_code=np.full(k, -1, np.int32),
            label_ts=np.zeros(k, np.int64),
        )
        if self.numeric_labels:
            cols["label_value"] = np.full(k, np.nan)
        rows = self.preds.insert(keys, cols, compact=False, order=order)
        self.pending += k
        tmin = int(np.min(columns["ts"]))
        if self._min_pred_ts == NO_TS or tmin < self._min_pred_ts:
            self._min_pred_ts = tmin
        return rows

    def join_new(
        self, keys: np.ndarray, own: np.ndarray, held: Unseen, classify: Classify
    ) -> tuple[Joined | None, int]:
        """Join just inserted predictions (``keys``, their rows ``own``) with a label
        already known: one a sibling (another version of the id, among the rows ``held``
        found before the insert) joined, else a waiting orphan (then released). Returns
        the join (None if none) and how many predictions had a label that is no class of
        their model (left waiting; the label's bytes went by long ago, so there is
        nothing to dead-letter)."""
        k = keys.shape[0]
        # a labeled id's rows all carry the same label: any labeled sibling will do
        known = self.preds.col("label")[held.rows] >= 0
        sibling = np.full(k, -1, np.int64)
        sibling[held.index[known]] = held.rows[known]
        joined: list[Joined] = []
        unknown = 0
        has = sibling >= 0
        # a sibling's label lives in the prediction table, a waiting one in the orphans
        sources = [(own[has], self.preds, sibling[has], "label_code", "label_ts")]
        rest = np.flatnonzero(~has)
        if rest.shape[0] == k:  # (no sibling: the keys' own order, when the batch had it)
            orow = self.orphans.lookup(keys, held.order)
        else:
            orow = self.orphans.lookup(keys[rest]) if rest.shape[0] else rest
        hit = orow >= 0
        orow = orow[hit]
        sources.append((own[rest[hit]], self.orphans, orow, "code", "ts"))
        for prow, table, src, code, ts in sources:
            if src.shape[0] == 0:
                continue
            done, bad = self._attach(
                prow, table.col(code)[src], self.value(table, src), table.col(ts)[src], classify
            )
            unknown += int(np.count_nonzero(bad))
            joined.append(done)
        if orow.shape[0]:
            self.orphans.delete(orow)
        return (_concat(joined) if joined else None), unknown

    def settle(self) -> None:
        """Compact the prediction table if due: after a batch's predictions were inserted
        and joined and the joined rows read (``insert_predictions`` defers it, so the rows
        it returned, those ``unseen`` found and the ``Joined`` rows stay valid until here)."""
        self.preds.maybe_compact()

    # -- labels ------------------------------------------------------------------------
    @staticmethod
    def rounds(keys: np.ndarray) -> list[np.ndarray]:
        """Indices of a label batch in rounds: every id's first occurrence, then every
        second one, ... — applied round by round (each vectorized), the result equals
        applying the labels one by one in arrival order."""
        n = keys.shape[0]
        order = stable_order(keys)
        sk = keys[order]
        starts = np.ones(n, bool)
        starts[1:] = sk[1:] != sk[:-1]
        pos = np.arange(n)
        rank_sorted = pos - np.maximum.accumulate(np.where(starts, pos, 0))
        rank = np.empty(n, np.int64)
        rank[order] = rank_sorted
        return [np.flatnonzero(rank == r) for r in range(int(rank.max()) + 1)]

    def add_labels(
        self,
        keys: np.ndarray,
        ts: np.ndarray,
        codes: np.ndarray,
        values: np.ndarray,
        idx: np.ndarray,
        classify: Classify,
        rejects: list[JoinReject],
    ) -> tuple[Joined | None, int]:
        """Apply labels ``idx`` of a batch (unique ids): join their waiting predictions,
        keep the others as orphans. Conflicts and labels that are no class of their
        model go to ``rejects``; returns the join and how many labels were duplicates."""
        dups = 0
        code, value = codes[idx], values[idx]
        q, rows = self.preds.lookup_all(keys[idx])
        has_rows = np.zeros(idx.shape[0], bool)
        has_rows[q] = True
        labeled = self.preds.col("label")[rows] >= 0
        # a labeled id's rows all carry the same label (later versions copy it)
        is_known = np.zeros(idx.shape[0], bool)
        is_known[q[labeled]] = True
        known = np.full(idx.shape[0], -1, np.int64)
        known[q[labeled]] = self.preds.col("label_code")[rows[labeled]]
        known_value = np.full(idx.shape[0], np.nan)
        known_value[q[labeled]] = self.value(self.preds, rows[labeled])
        same = same_label(known, known_value, code, value)
        dups += int(np.count_nonzero(is_known & same))
        for i in idx[is_known & ~same].tolist():
            rejects.append((i, "conflicting_label", "disagrees with the joined label"))
        joined = None
        todo = ~is_known[q]
        if todo.any():
            jq, jrows = q[todo], rows[todo]
            joined, bad = self._attach(jrows, code[jq], value[jq], ts[idx][jq], classify)
            for i in idx[np.unique(jq[bad])].tolist():
                rejects.append((i, "unknown_class", "label is not a class of this model"))
        # labels whose prediction has not arrived (or is gone)
        rest = idx[~has_rows]
        if rest.shape[0]:
            orow = self.orphans.lookup(keys[rest])
            waiting = orow >= 0
            if waiting.any():
                ow, rw = orow[waiting], rest[waiting]
                agree = same_label(
                    self.orphans.col("code")[ow], self.value(self.orphans, ow),
                    codes[rw], values[rw],
                )  # fmt: skip
                dups += int(np.count_nonzero(agree))
                for i in rest[waiting][~agree].tolist():
                    rejects.append((i, "conflicting_label", "disagrees with a waiting label"))
            fresh = rest[~waiting]
            if fresh.shape[0]:
                cols = {"ts": ts[fresh], "code": codes[fresh]}
                if self.numeric_labels:
                    cols["value"] = values[fresh]
                self.orphans.insert(keys[fresh], cols)
                tmin = int(ts[fresh].min())
                if self._min_orphan_ts == NO_TS or tmin < self._min_orphan_ts:
                    self._min_orphan_ts = tmin
        return joined, dups

    def _attach(
        self,
        prow: np.ndarray,
        codes: np.ndarray,
        values: np.ndarray,
        label_ts: np.ndarray,
        classify: Classify,
    ) -> tuple[Joined, np.ndarray]:
        """Mark waiting prediction rows labeled; returns the join and the mask of rows
        whose label does not fit their model (left waiting, not joined)."""
        group = self.preds.col("group")[prow]
        y_true = classify(codes, values, group)
        bad = y_true < 0
        ok = ~bad
        prow, y_true, group = prow[ok], y_true[ok], group[ok]
        codes, values, label_ts = codes[ok], values[ok], label_ts[ok]
        p = self.preds
        joined = Joined(
            rows=prow,
            group=group,
            pred_ts=p.col("ts")[prow],
            y_true=y_true,
            decision=p.col("decision")[prow],
            score=p.col("score")[prow],
            codes=codes,
            values=values,
            label_ts=label_ts,
        )
        if prow.shape[0]:
            p.col("label")[prow] = y_true
            p.col("label_code")[prow] = codes
            p.col("label_ts")[prow] = label_ts
            if self.numeric_labels:
                p.col("label_value")[prow] = values
            self.pending -= int(prow.shape[0])
        return joined, bad

    # -- bounds --------------------------------------------------------------------------
    def expire(self, label_mark_ms: int | None, pred_mark_ms: int | None) -> Counter[str]:
        """Drop predictions older than the label stream's mark − ``label_ttl`` and labels
        older than the prediction stream's mark − ``orphan_label_ttl`` (marks: each
        stream's robust progress, None before its first record), then the oldest beyond
        the caps. Returns the join events (expired/evicted, only predictions still
        waiting count)."""
        events: Counter[str] = Counter()
        if label_mark_ms is not None:
            cutoff = label_mark_ms - self.label_ttl_ms
            if self._min_pred_ts != NO_TS and self._min_pred_ts < cutoff:
                self._drop_predictions(self.preds.col("ts") < cutoff, "expired_prediction", events)
        excess = len(self.preds) - self.max_pending
        if excess > 0:
            self._drop_predictions(_oldest(self.preds, excess), "evicted_prediction", events)
        if pred_mark_ms is not None:
            cutoff = pred_mark_ms - self.orphan_label_ttl_ms
            if self._min_orphan_ts != NO_TS and self._min_orphan_ts < cutoff:
                self._drop_orphans(self.orphans.col("ts") < cutoff, "expired_orphan_label", events)
        excess = len(self.orphans) - self.max_orphan_labels
        if excess > 0:
            self._drop_orphans(_oldest(self.orphans, excess), "evicted_orphan_label", events)
        return events

    def _drop_predictions(self, mask: np.ndarray, event: str, events: Counter[str]) -> None:
        rows = np.flatnonzero(mask & self.preds.alive)
        if rows.shape[0]:
            unlabeled = int(np.count_nonzero(self.preds.col("label")[rows] < 0))
            self.pending -= unlabeled
            if unlabeled:
                events[event] += unlabeled
            self.preds.delete(rows, distinct=True)
        self._min_pred_ts = _live_min(self.preds)

    def _drop_orphans(self, mask: np.ndarray, event: str, events: Counter[str]) -> None:
        rows = np.flatnonzero(mask & self.orphans.alive)
        if rows.shape[0]:
            events[event] += int(rows.shape[0])
            self.orphans.delete(rows, distinct=True)
        self._min_orphan_ts = _live_min(self.orphans)

    # -- state ---------------------------------------------------------------------------
    def consistent(self) -> bool:
        """Whether the pending count is the number of waiting rows (a loaded state)."""
        return self.pending == int(np.count_nonzero(self.preds.col("label") < 0))

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        arrays = {f"preds.{k}": v for k, v in self.preds.state().items()}
        arrays.update({f"orphans.{k}": v for k, v in self.orphans.state().items()})
        return {"pending": self.pending}, arrays

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Restore ``state()``; task columns added to the config since are filled (NaN),
        so adding a model does not discard the buffer."""
        self.preds.load(_with_columns(arrays, "preds.", self.pred_columns))
        self.orphans.load(_with_columns(arrays, "orphans.", self.orphan_columns))
        self.pending = int(meta["pending"])
        self._min_pred_ts = _live_min(self.preds)
        self._min_orphan_ts = _live_min(self.orphans)


def same_label(
    code_a: np.ndarray, value_a: np.ndarray, code_b: np.ndarray, value_b: np.ndarray
) -> np.ndarray:
    """Two labels agree: the same class code, or both numeric (or both ranking labels)
    with the same value (target, relevance digest)."""
    return (code_a == code_b) & ((code_a >= 0) | (value_a == value_b))


def _concat(parts: list[Joined]) -> Joined:
    if len(parts) == 1:
        return parts[0]
    return Joined(
        *(np.concatenate([getattr(p, f) for p in parts]) for f in Joined.__dataclass_fields__)
    )


def _oldest(table: KeyedTable, k: int) -> np.ndarray:
    ts = np.where(table.alive, table.col("ts"), np.iinfo(np.int64).max)
    mask = np.zeros(table.size, bool)
    mask[np.argpartition(ts, k - 1)[:k]] = True
    return mask


def _with_columns(
    arrays: Mapping[str, np.ndarray], prefix: str, columns: Mapping[str, type]
) -> dict[str, np.ndarray]:
    state = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
    n = np.asarray(state["keys"]).shape[0]
    for name, dtype in columns.items():
        if name not in state and np.dtype(dtype).kind == "f":
            state[name] = np.full(n, np.nan, dtype)
    return state


def _live_min(table: KeyedTable) -> int:
    if len(table) == 0:
        return NO_TS
    return int(table.col("ts")[table.alive].min())
