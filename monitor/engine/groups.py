"""The group registry: interning of (model, version, segment) groups and the version
lifecycle.

A group is what a bucket row is keyed by: a model, a version and the model's
slice-dimension values (top-K folded by ``segments.SegmentFolder``; ``()`` without
slices). Codes are handed out in arrival order and never reused, so every store, the
join buffer and a checkpoint can refer to a group by its code.

Versions are bounded: a model has at most ``max_versions`` live versions; predictions
of one more are rejected with a counted reason and a log line, never merged into
another version. A version without predictions for ``version_idle_ttl`` (and for longer
than its model's windows reach) is retired and stops counting; it comes back as a new
version if it reappears; an operator retires versions by name pattern at once
(``retire``: ``monitor versions retire``). Per version the registry also keeps the
cumulative labeled and wrong counts that error-budget burn rates are taken of
(``monitor rules``).

A flood of junk versions can fill a model's slots while a real new version (a canary)
is then rejected for days. Rejected versions are therefore counted too, in bounded
memory — the heavy hitters of a stream by Misra and Gries ("Finding repeated
elements", 1982; ``BLOCKED_TRACKED`` counters per model, each count an underestimate
by at most the rejections of one batch spread over the counters) — and a version
with at least ``BLOCKED_MIN`` rejected predictions in the last ``BLOCKED_RECENT_MS``
"looks real": it is reported (``blocked``: ``mlmon_version_blocked``, an alert),
while a million one-off build ids stay below it.
"""

from __future__ import annotations

import fnmatch
import itertools
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .join import NO_TS, JoinReject
from .models import ModelSpec
from .records import factorize
from .segments import SegmentFolder, dimension_values, sliced_dimensions

__all__ = ["BLOCKED_MIN", "Group", "GroupRegistry", "VersionInfo"]

_log = logging.getLogger(__name__)

Group = tuple[int, str, tuple[str, ...]]  # (model index or -1, version, segment)
BLOCKED_TRACKED = 32  # Misra-Gries counters of rejected versions per model
BLOCKED_MIN = 100  # rejected predictions that make a version look real
BLOCKED_RECENT_MS = 3_600_000  # ... within the last hour (event time)
_ID_BITS = 21  # version and segment ids packed beside the model index in one int64
_ID_LIMIT = 1 << _ID_BITS


def _packed(model: Any, vid: Any, sid: Any) -> Any:
    """(model, version id, segment id) as one integer (scalars or int64 arrays)."""
    return (model << (2 * _ID_BITS)) | (vid << _ID_BITS) | sid


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """One version of a model as the registry knows it (``monitor versions list``)."""

    model: str
    version: str
    live: bool  # counts against max_versions
    last_seen_ms: int  # newest prediction (event time)
    labeled: int
    errors: int


class GroupRegistry:
    def __init__(self, models: Sequence[ModelSpec]) -> None:
        self.models = tuple(models)
        self.model_index = {m.name: i for i, m in enumerate(self.models)}
        self.folders = {i: SegmentFolder(m) for i, m in enumerate(self.models) if m.slices}
        # every model's sliced dimensions, each once: a batch codes each one's texts once
        self._slice_dimensions = sliced_dimensions(self.models)
        self._clear()

    def _clear(self) -> None:
        # group code -> (model index, version, segment); model -1 when no longer configured
        self.groups: list[Group] = []
        self._index: dict[Group, int] = {}
        # the same index by integers (``_known_codes``): version text and segment key ->
        # an id (those of some group), and packed (model, version id, segment id) -> code
        self._version_ids: dict[str, int] = {}
        self._segment_ids: dict[tuple[str, ...], int] = {}
        self._packed: dict[int, int] = {}
        self.model = np.empty(0, np.int16)  # group -> model index
        self.mv = np.empty(0, np.int32)  # group -> index of its (model, version)
        self.base = np.empty(0, np.int32)  # group -> group of (model, version, ())
        self._versions: dict[tuple[int, str], list[int]] = {}  # (model, version) -> groups
        # per (model, version) in ``_versions`` order: cumulative [labeled, errors] and the
        # newest prediction time
        self.outcomes = np.zeros((0, 2), np.int64)
        self.last_seen = np.zeros(0, np.int64)
        self.retired: set[tuple[int, str]] = set()
        self.live: Counter[int] = Counter()  # live versions per model
        self.rejected: Counter[str] = Counter()  # predictions rejected per model name
        # per model: rejected version -> [count (Misra-Gries), newest rejection ms]
        self._blocked: dict[int, dict[str, list[int]]] = {}

    def __len__(self) -> int:
        return len(self.groups)

    # -- interning -------------------------------------------------------------------
    def codes(
        self,
        model: np.ndarray,
        version: Sequence[str],
        segments: Sequence[dict[str, Any] | None] | None = None,
    ) -> np.ndarray:
        """Group code per row, -1 for a version over its model's cap; only the batch's
        distinct (model, version, segment) keys touch Python (pd.factorize hashes the
        strings in C)."""
        n = len(version)
        seg_codes = np.zeros(n, np.int64)
        seg_keys: list[tuple[str, ...]] = [()]
        if self.folders:
            seen: dict[tuple[str, ...], int] = {(): 0}
            # each dimension's texts coded once for the batch, then each model folds its
            # rows' codes (its rows found by one stable sort, in arrival order)
            segs = segments if segments else [None] * n
            dims = {d: dimension_values(segs, d) for d in self._slice_dimensions}
            order = np.argsort(model, kind="stable")
            sorted_model = model[order]
            for m, folder in self.folders.items():
                lo, hi = np.searchsorted(sorted_model, [m, m + 1]).tolist()
                if lo == hi:
                    continue
                rows = order[lo:hi]
                codes, keys = folder.fold(
                    {d: (dims[d][0][rows], dims[d][1]) for d in folder.dimensions}
                )
                remap = np.empty(len(keys), np.int64)
                for j, key in enumerate(keys):
                    code = seen.get(key)
                    if code is None:
                        code = seen[key] = len(seg_keys)
                        seg_keys.append(key)
                    remap[j] = code
                seg_codes[rows] = remap[codes]
        vcodes, vuniq = factorize(version)
        versions = [str(v) for v in vuniq]
        nv, ns = len(versions), len(seg_keys)
        combined = (model.astype(np.int64) * nv + vcodes) * ns + seg_codes
        ucomb, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
        umv, useg = np.divmod(ucomb, ns)
        arrival = umv[np.argsort(first, kind="stable")]
        _, at = np.unique(arrival, return_index=True)  # each (model, version) once
        refused = self._refused(
            [(mv // nv, versions[mv % nv]) for mv in arrival[np.sort(at)].tolist()]
        )
        ucodes = self._known_codes(umv, useg, versions, seg_keys)
        if refused:  # over the model's max_versions: rejected by the caller
            out = [m * nv + versions.index(v) for m, v in refused]
            ucodes[np.isin(umv, out)] = -2
        index = self._index
        for i in np.flatnonzero(ucodes == -1).tolist():  # new groups, in key order
            m, v = divmod(int(umv[i]), nv)
            key = (m, versions[v], seg_keys[int(useg[i])])
            code = index.get(key)
            ucodes[i] = self._add(key) if code is None else code
        ucodes[ucodes == -2] = -1
        self._sync()
        return ucodes.astype(np.int32)[inverse.reshape(-1)]

    def _known_codes(
        self,
        umv: np.ndarray,
        useg: np.ndarray,
        versions: list[str],
        seg_keys: list[tuple[str, ...]],
    ) -> np.ndarray:
        """The code of each batch key (model·nv + version, segment) that has a group, -1
        for the rest: one dictionary look-up of a packed integer per key, so a batch
        touching thousands of groups (a fleet of models × slices) stays C-level work."""
        nv = len(versions)
        vid = np.array([self._version_ids.get(v, -1) for v in versions], np.int64)
        sid = np.array([self._segment_ids.get(k, -1) for k in seg_keys], np.int64)
        m, v = np.divmod(umv, nv)
        vk, sk = vid[v], sid[useg]
        out = np.full(umv.shape[0], -1, np.int64)
        known = np.flatnonzero((vk >= 0) & (sk >= 0))
        if known.shape[0]:
            keys = _packed(m[known], vk[known], sk[known]).tolist()
            out[known] = np.fromiter(
                map(self._packed.get, keys, itertools.repeat(-1)), np.int64, len(keys)
            )
        return out

    def _refused(self, pairs: list[tuple[int, str]]) -> set[tuple[int, str]]:
        """The (model, version) pairs of a batch that may not have groups. A live version
        always may; a new or retired one while its model has fewer than ``max_versions``
        live versions. Pairs are decided in arrival order (first row of each), so the
        batch boundaries never change which versions get in."""
        refused: set[tuple[int, str]] = set()
        pending = [0] * len(self.models)
        for key in dict.fromkeys(pairs):
            m = key[0]
            if key in self._versions and key not in self.retired:
                continue
            if self.live[m] + pending[m] >= self.models[m].max_versions:
                refused.add(key)
            elif key in self.retired:
                self.retired.discard(key)
                self.live[m] += 1
            else:
                pending[m] += 1  # counted live by _add
        return refused

    def _add(self, key: Group) -> int:
        if key[2] and (key[0], key[1], ()) not in self._index:
            self._add((key[0], key[1], ()))  # the version's base group (wide stats)
        code = len(self.groups)
        self.groups.append(key)
        self._index[key] = code
        vid = self._version_ids.setdefault(key[1], len(self._version_ids))
        sid = self._segment_ids.setdefault(key[2], len(self._segment_ids))
        if key[0] >= 0 and vid < _ID_LIMIT and sid < _ID_LIMIT:
            self._packed[int(_packed(key[0], vid, sid))] = code
        if (key[0], key[1]) not in self._versions and key[0] >= 0:
            self.live[key[0]] += 1
        self._versions.setdefault((key[0], key[1]), []).append(code)
        return code

    def _sync(self) -> None:
        """The per-group arrays after groups were added."""
        if len(self.groups) == self.model.shape[0]:
            return
        self.model = np.array([g[0] for g in self.groups], np.int16)
        mv = {k: i for i, k in enumerate(self._versions)}
        self.mv = np.array([mv[(g[0], g[1])] for g in self.groups], np.int32)
        index = self._index
        self.base = np.array([index[(g[0], g[1], ())] for g in self.groups], np.int32)
        grow = len(self._versions) - self.outcomes.shape[0]
        if grow > 0:
            self.outcomes = np.vstack([self.outcomes, np.zeros((grow, 2), np.int64)])
            self.last_seen = np.concatenate([self.last_seen, np.full(grow, NO_TS)])

    def version_groups(self, model: int, version: str) -> np.ndarray:
        """Every group (segment) of one model version."""
        return np.asarray(self._versions.get((model, version), []), np.int32)

    # -- version lifecycle -----------------------------------------------------------
    def reject(
        self, model: np.ndarray, version: Sequence[str], rows: np.ndarray, ts_ms: np.ndarray
    ) -> list[JoinReject]:
        """Count and return the predictions ``rows`` (of versions over their model's cap),
        with their reason; logs at the 1st, 2nd, 4th, 8th… rejection of a model."""
        rejects: list[JoinReject] = []
        for m in np.unique(model[rows]).tolist():
            sel = rows[model[rows] == m]
            spec = self.models[m]
            k = int(sel.shape[0])
            self._count_blocked(m, [version[i] for i in sel.tolist()], int(ts_ms[sel].max()))
            before = self.rejected[spec.name]
            self.rejected[spec.name] += k
            detail = f"model {spec.name!r} has max_versions={spec.max_versions} live versions"
            if before == 0 or (before + k).bit_length() > before.bit_length():  # 1, 2, 4, 8…
                _log.warning(
                    "%s: %d prediction(s) rejected so far (latest version %r); raise "
                    "max_versions or fix the producer's version field",
                    detail, before + k, version[int(sel[-1])],
                )  # fmt: skip
            rejects.extend((int(i), "version_limit", detail) for i in sel.tolist())
        return rejects

    def _count_blocked(self, m: int, versions: list[str], at_ms: int) -> None:
        """Weighted Misra-Gries over the rejected versions of model ``m``."""
        table = self._blocked.setdefault(m, {})
        for v, k in Counter(versions).items():
            entry = table.get(v)
            if entry is not None:
                entry[0] += k
                entry[1] = max(entry[1], at_ms)
                continue
            if len(table) >= BLOCKED_TRACKED:
                d = min(k, min(e[0] for e in table.values()))
                for name in list(table):
                    table[name][0] -= d
                    if table[name][0] <= 0:
                        del table[name]
                k -= d
            if k > 0 and len(table) < BLOCKED_TRACKED:
                table[v] = [k, at_ms]

    def blocked(self) -> list[tuple[str, str, int]]:
        """(model, version, rejected predictions) of the versions that look real: at
        least ``BLOCKED_MIN`` rejected recently (``retire_idle`` forgets older ones)."""
        return sorted(
            (self.models[m].name, v, count)
            for m, table in self._blocked.items()
            for v, (count, _) in table.items()
            if count >= BLOCKED_MIN
        )

    def retire(self, model: int, pattern: str) -> list[str]:
        """Retire model ``model``'s live versions whose name matches the shell-style
        ``pattern`` (``fnmatch``, case-sensitive) now: they stop counting against
        ``max_versions``, their history stays until it leaves every window, and each
        comes back as a new version if it sends again. Returns the names retired."""
        done = []
        for m, v in self._versions:
            if m == model and (m, v) not in self.retired and fnmatch.fnmatchcase(v, pattern):
                self.retired.add((m, v))
                self.live[m] -= 1
                done.append(v)
        if done:
            self._blocked.get(model, {}).clear()  # counted against slots that are free now
            _log.warning("model %r: %d version(s) retired by an operator (pattern %r)",
                         self.models[model].name, len(done), pattern)  # fmt: skip
        return done

    def versions(self) -> list[VersionInfo]:
        """Every version of every configured model, live or retired."""
        out = []
        for i, ((m, v), last) in enumerate(zip(self._versions, self.last_seen, strict=True)):
            if m < 0:
                continue
            labeled, errors = (int(x) for x in self.outcomes[i])
            live = (m, v) not in self.retired
            out.append(VersionInfo(self.models[m].name, v, live, int(last), labeled, errors))
        return out

    def seen(self, group: np.ndarray, ts: np.ndarray) -> None:
        """Predictions of ``group`` arrived at event times ``ts``."""
        np.maximum.at(self.last_seen, self.mv[group], ts)

    def count_outcomes(self, group: np.ndarray, wrong: np.ndarray) -> None:
        """Joined rows of ``group``, ``wrong`` where the decision missed the label."""
        mv = self.mv[group]
        n = self.outcomes.shape[0]
        self.outcomes[:, 0] += np.bincount(mv, minlength=n)
        self.outcomes[:, 1] += np.bincount(mv, weights=wrong, minlength=n).astype(np.int64)

    def retire_idle(self, now_ms: int) -> None:
        """A version without predictions for ``version_idle_ttl`` — and for longer than its
        model's windows reach, so nothing it counted is still shown — stops counting
        against ``max_versions``; it comes back as a new version if it reappears."""
        for i, (m, v) in enumerate(self._versions):
            if m < 0 or (m, v) in self.retired:
                continue
            spec = self.models[m]
            if now_ms - int(self.last_seen[i]) > max(spec.version_idle_ttl_ms, spec.horizon_ms):
                self.retired.add((m, v))
                self.live[m] -= 1
        for table in self._blocked.values():  # rejections of the last hour only
            for v in [v for v, (_, at) in table.items() if now_ms - at > BLOCKED_RECENT_MS]:
                del table[v]

    def outcome_counts(self) -> list[tuple[int, str, int, int]]:
        """(model index, version, labeled, errors) so far, cumulative since first start."""
        return [
            (m, v, int(c[0]), int(c[1]))
            for (m, v), c in zip(self._versions, self.outcomes, strict=True)
            if m >= 0
        ]

    # -- state -----------------------------------------------------------------------
    def groups_state(self) -> dict[str, Any]:
        """The groups (by model name: a reordered config still restores) and the
        segment folders' counts."""
        return {
            "groups": [
                [self.models[m].name if m >= 0 else None, v, list(seg)] for m, v, seg in self.groups
            ],
            "segment_counts": {str(m): f.state() for m, f in self.folders.items()},
        }

    def lifecycle_state(self) -> dict[str, Any]:
        """Per-version outcomes, last prediction times and retirements; rejections."""
        return {
            "outcomes": [
                [self.models[m].name, v, lab, err] for m, v, lab, err in self.outcome_counts()
            ],
            "version_last_ms": [
                [self.models[m].name, v, int(t), (m, v) in self.retired]
                for (m, v), t in zip(self._versions, self.last_seen, strict=True)
                if m >= 0
            ],
            "versions_rejected": dict(sorted(self.rejected.items())),
        }

    def load(self, meta: Mapping[str, Any]) -> None:
        """Restore from ``groups_state`` and ``lifecycle_state`` (a state written before
        version lifecycles: every version was last seen at the prediction watermark)."""
        self._clear()
        for name, v, *seg in meta["groups"]:
            self._add((self.model_index.get(name, -1), v, tuple(seg[0] if seg else ())))
        self._sync()
        mv_index = {k: i for i, k in enumerate(self._versions)}
        for name, v, lab, err in meta.get("outcomes", []):
            i = mv_index.get((self.model_index.get(name, -1), v))
            if i is not None:
                self.outcomes[i] = (int(lab), int(err))
        self.last_seen[:] = int(meta["pred_watermark_ms"])
        for name, v, last, retired in meta.get("version_last_ms", []):
            m = self.model_index.get(name, -1)
            i = mv_index.get((m, v))
            if i is not None:
                self.last_seen[i] = int(last)
                if retired:
                    self.retired.add((m, v))
        self.live = Counter(m for m, v in self._versions if m >= 0 and (m, v) not in self.retired)
        self.rejected = Counter(
            {str(k): int(c) for k, c in meta.get("versions_rejected", {}).items()}
        )
        for key, st in meta.get("segment_counts", {}).items():
            if int(key) in self.folders:
                self.folders[int(key)].load(st)
