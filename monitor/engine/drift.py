"""Drift monitoring in the engine: histogram cells per bucket, detectors per window.

Each model with a drift reference gets one count matrix in the bucket store whose
columns are the concatenated cells of its features (and of the prediction score): the
live summary of any window is then the sum of that window's bucket rows — bounded
memory whatever the traffic, mergeable by addition like every other statistic. The
tests themselves (binned KS, chi-square, effect sizes, multiple-testing correction) live
in ``monitor.drift``; this module only counts and asks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..drift.budget import drift_window_end_ms, window_alpha
from ..drift.detector import DriftDetector, DriftReport, LabelPriorDrift, label_prior_drift
from ..drift.reference import OTHER, CategoricalReference, NumericReference, ReferenceProfile
from ..drift.summaries import categorical_cells, n_cells, numeric_cells
from .models import DriftSpec, ModelSpec, WindowSpec
from .records import PredictionBatch
from .snapshot import DriftResult
from .view import StoreView

__all__ = ["SCORE_FEATURE", "DriftResult", "DriftTracker"]

SCORE_FEATURE = "__score__"
_log = logging.getLogger(__name__)


class _ModelDrift:
    """Layout and detector of one model's drift matrix."""

    def __init__(self, spec: DriftSpec, model: ModelSpec, profile: ReferenceProfile) -> None:
        self.spec = spec
        self.model = model
        self.profile = profile
        wanted = set(spec.features) if spec.features else None
        self.refs: list[NumericReference | CategoricalReference] = [
            r for r in profile.features if wanted is None or r.name in wanted
        ]
        self.offsets: list[int] = []
        width = 0
        for ref in self.refs:
            self.offsets.append(width)
            width += n_cells(ref)
        self.score_offset = width if profile.score is not None else -1
        if profile.score is not None:
            width += n_cells(profile.score)
        self.width = width
        tested = ReferenceProfile(
            features=tuple(self.refs),
            score=profile.score,
            label_prior=profile.label_prior,
            n=profile.n,
        )
        kwargs: dict[str, Any] = {"alpha": spec.alpha, "correction": spec.correction}
        if spec.numeric_effect is not None:
            kwargs["numeric_effect"] = spec.numeric_effect
        if spec.categorical_effect is not None:
            kwargs["categorical_effect"] = spec.categorical_effect
        if spec.min_samples is not None:
            kwargs["min_samples"] = spec.min_samples
        self.detector_kwargs = kwargs
        self.detector = DriftDetector(tested, **kwargs)

    def detector_with(self, reference_counts: np.ndarray) -> DriftDetector | None:
        """A detector whose reference is a live count vector in this matrix's layout
        (bins and categories stay those of the bootstrap profile); None if empty."""
        feats: list[NumericReference | CategoricalReference] = []
        for ref, off in zip(self.refs, self.offsets, strict=True):
            feats.append(_with_counts(ref, reference_counts[off : off + n_cells(ref)]))
        score = None
        if self.score_offset >= 0 and self.profile.score is not None:
            w = n_cells(self.profile.score)
            score = _with_counts(
                self.profile.score,
                reference_counts[self.score_offset : self.score_offset + w],
            )
        if all(f.n == 0 for f in feats) and (score is None or score.n == 0):
            return None
        profile = ReferenceProfile(
            features=tuple(feats), score=score, label_prior=None, n=max([f.n for f in feats] + [0])
        )
        return DriftDetector(profile, **self.detector_kwargs)

    @property
    def matrix(self) -> str:
        return "drift"  # in the model's own wide store

    def cells(
        self,
        features: Sequence[dict[str, Any] | None],
        score: np.ndarray,
        numeric: Mapping[str, np.ndarray] | None = None,
        ready: Mapping[str, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]:
        """(event index, column) pairs for a batch of this model's predictions, and the
        (feature, value) pairs of unseen categorical values met. ``numeric`` holds the
        numeric features the decoder already put in columns (monitor.ingest.decode),
        ``ready`` numeric features' cells computed ahead (:meth:`DriftTracker.with_cells`)."""
        n = len(features)
        ev: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        unseen: list[tuple[str, str]] = []
        idx = np.arange(n)
        for ref, off in zip(self.refs, self.offsets, strict=True):
            name = ref.name
            if isinstance(ref, NumericReference) and ready is not None and name in ready:
                ev.append(idx)
                cols.append(ready[name].astype(np.int64) + off)
                continue
            if isinstance(ref, NumericReference) and numeric is not None and name in numeric:
                c = numeric_cells(ref, numeric[name])
                ev.append(idx)
                cols.append(np.asarray(c, np.int64) + off)
                continue
            raw = [f.get(name) if f is not None else None for f in features]
            if isinstance(ref, NumericReference):
                values = np.array(
                    [v if type(v) is float or type(v) is int else math.nan for v in raw],
                    np.float64,
                )
                c = numeric_cells(ref, values)
            else:
                texts = [_category(v) for v in raw]
                c, new = categorical_cells(ref, texts)
                unseen.extend((name, v) for v in new)
            ev.append(idx)
            cols.append(np.asarray(c, np.int64) + off)
        if self.score_offset >= 0:
            assert self.profile.score is not None
            ev.append(idx)
            cols.append(
                np.asarray(numeric_cells(self.profile.score, score), np.int64) + self.score_offset
            )
        if not ev:
            return np.empty(0, np.int64), np.empty(0, np.int64), unseen
        return np.concatenate(ev), np.concatenate(cols), unseen

    def live(self, counts: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        for ref, off in zip(self.refs, self.offsets, strict=True):
            out[ref.name] = counts[off : off + n_cells(ref)]
        if self.score_offset >= 0:
            assert self.profile.score is not None
            out[SCORE_FEATURE] = counts[
                self.score_offset : self.score_offset + n_cells(self.profile.score)
            ]
        return out


def _with_counts(
    ref: NumericReference | CategoricalReference, cells: np.ndarray
) -> NumericReference | CategoricalReference:
    """``ref`` with its reference counts replaced by a live cell vector of its layout.

    Numeric cells: 0 missing, 1 underflow, bins, overflow — out-of-range reference values
    fold into the outer bins (the bootstrap's range defines the bins). Categorical cells:
    0 missing, categories, unseen — unseen values fold into ``__other__`` when present."""
    cells = np.asarray(cells, np.int64)
    missing = int(cells[0])
    if isinstance(ref, NumericReference):
        counts = cells[2:-1].copy()
        if counts.shape[0]:
            counts[0] += cells[1]
            counts[-1] += cells[-1]
        present = int(counts.sum())
        n = present + missing
        return replace(ref, counts=counts, n=n, missing_rate=missing / n if n else 0.0)
    counts = cells[1:-1].copy()
    if OTHER in ref.categories:
        counts[ref.categories.index(OTHER)] += cells[-1]
    n = int(counts.sum()) + missing
    return replace(ref, counts=counts, n=n, missing_rate=missing / n if n else 0.0)


class _Bootstrap:
    """The first predictions of a model with a live reference: they fix the bins and
    categories (and, in "first" mode, start the reference period).

    Bounded whatever the records carry: one column per *tracked* feature (the configured
    ones, or the first ``max_features`` names met, in arrival order), each ``bootstrap``
    rows of a float (the value when it is a number) and an int32 category code (per
    feature at most ``_MAX_CATEGORIES`` distinct texts; later ones fold into
    ``__other__``, which only matters past the top ``max_categories`` a reference keeps).
    So the sample costs at most bootstrap × max_features × 12 bytes (12 MB by default),
    never the raw feature dicts. Feature values of untracked names are counted
    (``untracked``)."""

    def __init__(self, spec: DriftSpec) -> None:
        self.spec = spec
        cap = spec.bootstrap
        self.n = 0
        self.ts = np.zeros(cap, np.int64)
        self.group = np.zeros(cap, np.int32)
        self.score = np.zeros(cap, np.float64)
        self.fixed = bool(spec.features)
        self.max_features = len(spec.features) if self.fixed else spec.max_features
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        self.num: list[np.ndarray] = []  # per feature: value when a number, else NaN
        self.cat: list[np.ndarray] = []  # per feature: category code, -1 missing
        self.vocab: list[dict[str, int]] = []
        self.present: list[int] = []
        self.numbers: list[int] = []
        self.untracked = 0  # feature values of names over the cap
        for name in spec.features:
            self._track(name)

    def _track(self, name: str) -> int:
        self._index[name] = len(self.names)
        self.names.append(name)
        self.num.append(np.full(self.spec.bootstrap, np.nan))
        self.cat.append(np.full(self.spec.bootstrap, -1, np.int32))
        self.vocab.append({})
        self.present.append(0)
        self.numbers.append(0)
        return self._index[name]

    @property
    def room(self) -> int:
        return max(0, self.spec.bootstrap - self.n)

    def add(
        self, ts: np.ndarray, group: np.ndarray, feats: Sequence[Any], score: np.ndarray
    ) -> None:
        """Append (at most ``room``) predictions to the sample."""
        k = min(self.room, len(ts))
        lo = self.n
        self.ts[lo : lo + k] = ts[:k]
        self.group[lo : lo + k] = group[:k]
        self.score[lo : lo + k] = score[:k]
        for r in range(k):
            f = feats[r]
            if not f:
                continue
            if self.fixed or len(self.names) >= self.max_features:
                seen = 0
                for i, name in enumerate(self.names):
                    if name in f:
                        seen += 1
                        self._put(i, lo + r, f[name])
                self.untracked += len(f) - seen
                continue
            for name, value in f.items():
                i = self._index.get(name)
                if i is None:
                    if len(self.names) >= self.max_features:
                        self.untracked += 1
                        continue
                    i = self._track(name)
                self._put(i, lo + r, value)
        self.n += k

    def _put(self, i: int, row: int, value: Any) -> None:
        if value is None:
            return
        self.present[i] += 1
        if type(value) is float or type(value) is int:
            # a number's category text is rebuilt from the value if the feature turns out
            # categorical: no text kept per distinct number
            self.num[i][row] = value
            self.numbers[i] += 1
            self.cat[i][row] = _INT if type(value) is int else _FLOAT
            return
        text = _category(value)
        if text is None:
            return
        vocab = self.vocab[i]
        code = vocab.get(text)
        if code is None:
            code = len(vocab) if len(vocab) < _MAX_CATEGORIES else _FOLDED
            if code != _FOLDED:
                vocab[text] = code
        self.cat[i][row] = code

    @property
    def full(self) -> bool:
        return self.n >= self.spec.bootstrap

    def _texts(self, i: int) -> list[str | None]:
        inverse = dict.fromkeys(range(len(self.vocab[i])), "")
        for text, code in self.vocab[i].items():
            inverse[code] = text
        codes = self.cat[i][: self.n].tolist()
        nums = self.num[i][: self.n].tolist()
        return [
            None if c == -1
            else OTHER if c == _FOLDED
            else str(int(x)) if c == _INT
            else str(x) if c == _FLOAT
            else inverse[c]
            for c, x in zip(codes, nums, strict=True)
        ]  # fmt: skip

    def profile(self) -> ReferenceProfile:
        """Numeric where at least 95% of present values are numbers, else categorical."""
        names = list(self.names) if self.fixed else sorted(self.names)
        numeric: dict[str, np.ndarray] = {}
        categorical: dict[str, list[str | None]] = {}
        for name in names:
            i = self._index[name]
            present, numbers = self.present[i], self.numbers[i]
            if present and numbers >= 0.95 * present:
                numeric[name] = self.num[i][: self.n].copy()
            else:
                categorical[name] = self._texts(i)
        score = self.score[: self.n]
        return ReferenceProfile.from_columns(
            numeric=numeric or None,
            categorical=categorical or None,
            score=score if np.isfinite(score).any() else None,
        )

    def rows(self) -> list[dict[str, Any] | None]:
        """The sample's tracked features as records (to count it into its buckets)."""
        cols: list[tuple[str, list[Any]]] = []
        for name, i in self._index.items():
            present, numbers = self.present[i], self.numbers[i]
            if present and numbers >= 0.95 * present:
                cols.append((name, [None if math.isnan(x) else x for x in self.num[i][: self.n]]))
            else:
                cols.append((name, self._texts(i)))
        return [{name: col[r] for name, col in cols} for r in range(self.n)]

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta = {
            "n": self.n,
            "names": list(self.names),
            "vocab": [list(v) for v in self.vocab],
            "present": list(self.present),
            "numbers": list(self.numbers),
            "untracked": self.untracked,
        }
        n = self.n
        arrays = {"ts": self.ts[:n], "group": self.group[:n], "score": self.score[:n]}
        if self.names:
            arrays["num"] = np.stack([c[:n] for c in self.num])
            arrays["cat"] = np.stack([c[:n] for c in self.cat])
        return meta, {k: v.copy() for k, v in arrays.items()}

    def load(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if "features" in meta:  # format 1 kept the raw sample: summarize it now
            self.__init__(self.spec)  # type: ignore[misc]
            score = np.array([math.nan if x is None else float(x) for x in meta["score"]])
            self.add(np.asarray(meta["ts"], np.int64), np.asarray(meta["group"], np.int32),
                     list(meta["features"]), score)  # fmt: skip
            return
        n = int(meta["n"])
        if not 0 <= n <= self.spec.bootstrap:
            raise ValueError("drift bootstrap sample larger than configured")
        self.__init__(self.spec)  # type: ignore[misc]
        for name in meta["names"]:
            if name not in self._index:
                self._track(name)
        self.n = n
        self.ts[:n] = arrays["ts"]
        self.group[:n] = arrays["group"]
        self.score[:n] = arrays["score"]
        for i, name in enumerate(meta["names"]):
            j = self._index[name]
            self.num[j][:n] = arrays["num"][i]
            self.cat[j][:n] = arrays["cat"][i]
            self.vocab[j] = {t: c for c, t in enumerate(meta["vocab"][i])}
            self.present[j] = int(meta["present"][i])
            self.numbers[j] = int(meta["numbers"][i])
        self.untracked = int(meta["untracked"])


_MAX_CATEGORIES = 1000
_FOLDED = -2  # a category text past _MAX_CATEGORIES: counted as __other__
_INT, _FLOAT = -3, -4  # a number (its text is that of the value in the numeric column)


class DriftTracker:
    def __init__(self, specs: Sequence[DriftSpec], models: Sequence[ModelSpec]) -> None:
        self.models = tuple(models)
        self.specs = {s.model_index: s for s in specs}
        self.by_model = {
            s.model_index: _ModelDrift(s, models[s.model_index], s.profile)
            for s in specs
            if s.live is None
        }
        self.bootstrap = {s.model_index: _Bootstrap(s) for s in specs if s.live is not None}
        self.live_start: dict[int, int] = {}  # model -> first bootstrap timestamp (ms)
        self.frozen: dict[int, np.ndarray] = {}  # model -> "first"-mode reference counts
        # model -> feature values a live bootstrap did not track (over drift.max_features)
        self.untracked: dict[int, int] = {}
        # (model, version, window) -> the last test and what it was computed from
        self._tested: dict[tuple[int, str, str], _Tested] = {}

    def numeric_features(self) -> list[str]:
        """Names of the numeric features some model's reference tests (the decoder puts
        them in a float block, ``PredictionBatch.numeric``)."""
        return sorted(
            {
                r.name
                for d in self.by_model.values()
                for r in d.refs
                if isinstance(r, NumericReference)
            }
        )

    def reads_feature_objects(self) -> bool:
        """Whether drift reads records' features objects beyond ``numeric_features``
        (a categorical feature, a live reference's bootstrap sample)."""
        return bool(self.bootstrap) or any(
            not isinstance(r, NumericReference) for d in self.by_model.values() for r in d.refs
        )

    def untracked_features(self) -> dict[str, int]:
        """Feature values left out of live references, per model name (cumulative)."""
        counts = dict(self.untracked)
        for m, boot in self.bootstrap.items():
            counts[m] = counts.get(m, 0) + boot.untracked
        return {self.models[m].name: c for m, c in sorted(counts.items()) if c}

    def with_cells(self, batch: PredictionBatch) -> PredictionBatch:
        """``batch`` with its numeric block's drift cells (``numeric_cells``) against each
        model's fixed reference: work that reads no engine state, done where the batch is
        decoded (replay's decoding processes) so the applying process only adds the cells
        up. A live reference changes as data arrives: its model's rows are left to the
        applying process (-1), as are rows of a reference swapped since (the fingerprint
        is checked there)."""
        block = batch.numeric
        if block is None or not len(batch):
            return batch
        column = {name: j for j, name in enumerate(batch.numeric_names)}
        out = np.full(block.shape, -1, np.int32)
        done: list[tuple[int, str]] = []
        for m, d in self.by_model.items():
            rows = np.flatnonzero(batch.model == m)
            if d.spec.live is not None or rows.shape[0] == 0:
                continue
            for ref in d.refs:
                j = column.get(ref.name)
                if isinstance(ref, NumericReference) and j is not None:
                    out[rows, j] = numeric_cells(ref, block[rows, j])
            done.append((m, d.spec.fingerprint))
        if not done:
            return batch
        return replace(batch, numeric_cells=out, cells_of=tuple(done))

    def fingerprints(self) -> dict[str, str]:
        """Reference fingerprint per model name."""
        return {self.models[m].name: d.spec.fingerprint for m, d in self.by_model.items()}

    def become_ready(self, m: int) -> _ModelDrift:
        """Build the live reference's layout from the bootstrap sample."""
        boot = self.bootstrap.pop(m)
        d = _ModelDrift(boot.spec, self.models[m], boot.profile())
        self.by_model[m] = d
        self.live_start[m] = int(boot.ts[: boot.n].min())
        if boot.untracked:
            self.untracked[m] = self.untracked.get(m, 0) + boot.untracked
            _log.warning(
                "live drift reference of model %r tracks %d features; %d values of other "
                "feature names were left out (raise drift.max_features to track more)",
                self.models[m].name, len(boot.names), boot.untracked,
            )  # fmt: skip
        return d

    def reference_counts(
        self, view: StoreView, m: int, start_ms: int, end_ms: int, version: str | None = None
    ) -> np.ndarray | None:
        """Model ``m``'s drift cells summed over the buckets starting in [start, end) —
        every version's, or only ``version``'s — in its reference's layout; None when the
        model has no drift matrix (no reference file, or nothing counted)."""
        d = self.by_model.get(m)
        found = view.wide_matrix(m, d.matrix) if d is not None else None
        if d is None or found is None:
            return None
        b_group, b_bucket, matrix = found
        width = view.width_ms
        rows = (b_bucket * width >= start_ms) & (b_bucket * width < end_ms)
        if version is not None:
            members = [i for i, g in enumerate(view.groups) if g[0] == m and g[1] == version]
            rows &= np.isin(b_group, members)
        return matrix[rows].sum(axis=0, dtype=np.int64)

    def rotated_profile(
        self, m: int, counts: np.ndarray, period: tuple[int, int]
    ) -> ReferenceProfile:
        """Model ``m``'s reference with its counts replaced by ``counts`` (a vector of its
        layout, :meth:`reference_counts`): the same bins and categories, so the cells
        already counted stay valid; the label prior stays the old reference's."""
        d = self.by_model[m]
        feats = tuple(
            _with_counts(ref, counts[off : off + n_cells(ref)])
            for ref, off in zip(d.refs, d.offsets, strict=True)
        )
        kept = {f.name for f in feats}
        # features the profile holds but this model does not test are carried over
        rest = tuple(f for f in d.profile.features if f.name not in kept)
        score = d.profile.score
        if d.score_offset >= 0 and score is not None:
            score = _with_counts(score, counts[d.score_offset : d.score_offset + n_cells(score)])
        n = max([f.n for f in feats] + ([score.n] if score is not None else []) + [0])
        return replace(d.profile, features=feats + rest, score=score, n=n, period=period)

    def swap_reference(self, m: int, profile: ReferenceProfile, fingerprint: str) -> None:
        """Test model ``m`` against ``profile`` from now on. Its layout must be the old
        reference's (:meth:`rotated_profile`), so the stored cells keep their meaning."""
        d = self.by_model[m]
        spec = replace(d.spec, profile=profile, fingerprint=fingerprint)
        new = _ModelDrift(spec, self.models[m], profile)
        if (new.width, new.offsets, new.score_offset) != (d.width, d.offsets, d.score_offset):
            raise ValueError("the new reference's cells differ from the old one's")
        self.specs[m] = spec
        self.by_model[m] = new

    def horizon_ms(self) -> int:
        """Extra bucket retention that live "previous" references need."""
        return max([s.live_span_ms for s in self.specs.values() if s.live == "previous"] + [0])

    def freeze_due(self, pred_watermark_ms: int) -> list[tuple[int, int, int]]:
        """(model, start, end) of "first"-mode reference periods complete but not frozen."""
        out = []
        for m, start in self.live_start.items():
            spec = self.specs[m]
            if spec.live == "first" and m not in self.frozen:
                end = start + spec.live_span_ms
                if pred_watermark_ms >= end:
                    out.append((m, start, end))
        return out

    def state(self) -> dict[str, Any]:
        return {
            str(m): {
                "profile": self.by_model[m].profile.to_json() if m in self.by_model else None,
                "start_ms": self.live_start.get(m),
                "frozen": self.frozen[m].tolist() if m in self.frozen else None,
                "bootstrap": self.bootstrap[m].state()[0] if m in self.bootstrap else None,
                "untracked": self.untracked.get(m, 0),
            }
            for m, spec in self.specs.items()
            if spec.live is not None
        }

    def arrays(self) -> dict[str, np.ndarray]:
        """The bootstrap samples' columns (checkpoint arrays)."""
        out: dict[str, np.ndarray] = {}
        for m, boot in self.bootstrap.items():
            out.update({f"drift_boot/{m}/{k}": v for k, v in boot.state()[1].items()})
        return out

    def load(
        self, state: dict[str, Any], arrays: Mapping[str, np.ndarray] | None = None
    ) -> list[_ModelDrift]:
        """Restore live references; returns those that are ready (their matrices must be
        registered before the buckets load)."""
        ready = []
        for key, st in state.items():
            m = int(key)
            spec = self.specs.get(m)
            if spec is None or spec.live is None:
                continue
            if st.get("untracked"):
                self.untracked[m] = int(st["untracked"])
            if st.get("profile") is not None:
                self.bootstrap.pop(m, None)
                d = _ModelDrift(spec, self.models[m], ReferenceProfile.from_json(st["profile"]))
                self.by_model[m] = d
                self.live_start[m] = int(st["start_ms"])
                if st.get("frozen") is not None:
                    self.frozen[m] = np.asarray(st["frozen"], np.int64)
                ready.append(d)
            elif st.get("bootstrap") is not None and m in self.bootstrap:
                prefix = f"drift_boot/{m}/"
                cols = {
                    k[len(prefix) :]: v for k, v in (arrays or {}).items() if k.startswith(prefix)
                }
                self.bootstrap[m].load(st["bootstrap"], cols)
        return ready

    def evaluate(
        self,
        view: StoreView,
        now_ms: int,
        models: Sequence[ModelSpec] | None = None,
        unseen: Mapping[tuple[str, str], Sequence[str]] | None = None,
        input_ended: bool = False,
    ) -> tuple[DriftResult, ...]:
        """Drift per model, version and window (``models`` may add windows, e.g. replay's
        ``all``; ``unseen`` names a few unseen categorical values per (model, feature));
        the label prior comes from the confusion counts of ``view.buckets``. Configured
        windows end at the last step of their grid (:func:`_tested_window`); ``input_ended``: the
        bucket holding ``now_ms`` is complete too (replay's end of input)."""
        pruning = models is None  # every configured window: tests not met are dropped
        models = self.models if models is None else models
        out: list[DriftResult] = []
        met: dict[tuple[int, str, str], _Tested] = {}
        groups, width_ms, segment_counts = view.groups, view.width_ms, view.buckets
        if not groups or not self.by_model:
            return ()
        closed_ms = (now_ms // width_ms + 1) * width_ms if input_ended else now_ms
        for m, d in self.by_model.items():
            found = view.wide_matrix(m, d.matrix)
            if found is None:
                continue
            b_group, b_bucket, matrix = found
            model = models[m]
            windows = [w for w in model.windows if not d.spec.windows or w.label in d.spec.windows]
            for w in windows:
                configured = w in self.models[m].windows  # not replay's "all"
                at = closed_ms if configured else now_ms
                lo, hi, level = _tested_window(view, at, w, configured, d.spec, input_ended)
                sel = np.flatnonzero((b_bucket >= lo) & (b_bucket <= hi))
                if sel.shape[0] == 0:
                    continue
                detector = d.detector
                reference: object = detector  # what the detector tests against
                period = d.profile.period  # a rotated reference names its traffic
                if d.spec.live == "first":
                    if m not in self.frozen:
                        continue  # the reference period is still running
                    detector = d.detector_with(self.frozen[m])
                    reference = self.frozen[m].tobytes()
                    start = self.live_start[m]
                    period = (start, start + d.spec.live_span_ms)
                elif d.spec.live == "previous":
                    span = d.spec.live_span_ms // width_ms
                    ref_rows = (b_bucket >= lo - span) & (b_bucket < lo)
                    ref_counts = matrix[ref_rows].sum(axis=0, dtype=np.int64)
                    detector = d.detector_with(ref_counts)
                    reference = ref_counts.tobytes()
                    period = ((lo - span) * width_ms, lo * width_ms)
                if detector is None:
                    continue  # no reference traffic yet
                by_version: dict[str, list[int]] = {}
                for gid in np.unique(b_group[sel]).tolist():
                    by_version.setdefault(groups[gid][1], []).append(gid)
                for version, members in by_version.items():
                    rows = sel[np.isin(b_group[sel], members)]
                    counts = matrix[rows].sum(axis=0, dtype=np.int64)
                    names = {f: v for (mn, f), v in (unseen or {}).items() if mn == model.name}
                    tested = _Tested(
                        lo, hi, level, reference, counts.tobytes(),
                        tuple(sorted((f, tuple(v)) for f, v in names.items())),
                    )  # fmt: skip
                    key = (m, version, w.label)
                    last = self._tested.get(key)
                    if last is not None and last.same_input(tested):
                        tested = last
                    else:
                        tested.report = detector.predict(d.live(counts), names, level)
                    met[key] = tested
                    report = tested.report
                    prior = None
                    if d.profile.label_prior:
                        c_group, c_bucket = segment_counts["group"], segment_counts["bucket"]
                        in_version = np.isin(
                            c_group,
                            [i for i, g in enumerate(groups) if g[0] == m and g[1] == version],
                        )
                        c_rows = in_version & (c_bucket >= lo) & (c_bucket <= hi)
                        conf = segment_counts["confusion"][c_rows].sum(axis=0)
                        prior = _label_prior(d, conf, level)
                    out.append(
                        DriftResult(
                            model.name,
                            version,
                            w.label,
                            lo * width_ms,
                            (hi + 1) * width_ms,
                            report,
                            prior,
                            period,
                        )
                    )
        if pruning:
            self._tested = met
        else:
            self._tested.update(met)
        return tuple(out)


@dataclass(eq=False)
class _Tested:
    """One window's drift test and its inputs: the test is a pure function of them, so
    an evaluation whose window, level, reference, counts and unseen names are all the
    same reuses the report. (A configured window moves on its grid, hourly at most, while
    the daemon and replay evaluate every few seconds: most evaluations test the same
    window again.)"""

    lo: int
    hi: int
    level: float
    reference: object  # the bootstrap detector itself, or a live reference's counts
    counts: bytes
    unseen: tuple[tuple[str, tuple[str, ...]], ...]
    report: DriftReport | None = None

    def same_input(self, other: _Tested) -> bool:
        return (
            self.lo == other.lo
            and self.hi == other.hi
            and self.level == other.level
            and (self.reference is other.reference or self.reference == other.reference)
            and self.counts == other.counts
            and self.unseen == other.unseen
        )


def _tested_window(
    view: StoreView,
    now_ms: int,
    w: WindowSpec,
    configured: bool,
    spec: DriftSpec,
    input_ended: bool = False,
) -> tuple[int, int, float]:
    """Inclusive bucket range and level of the window drift tests at ``now``: for a
    configured window the one ending at the last step of its grid (the window's size up
    to an hour, else hourly; so a day holds a fixed number of distinct tested windows
    however often the daemon evaluates), tested at its share of the daily false-alarm
    budget (monitor/drift/budget.py); once the input has ended (replay's report) the one
    ending with the input, as no later step will come; another window (replay's
    ``all``) as it is, at ``alpha``."""
    if not configured:
        lo, hi = view.tiers.window(now_ms, w.size_ms, w.delay_ms)
        return lo, hi, spec.alpha
    grid_end = drift_window_end_ms(now_ms, w.size_ms, w.delay_ms)
    end = now_ms - w.delay_ms if input_ended else grid_end
    lo, hi = view.tiers.window(end - 1, w.size_ms, 0)
    return lo, hi, window_alpha(spec.alpha, spec.false_alarm_budget, w.size_ms)


def _label_prior(d: _ModelDrift, conf: np.ndarray, alpha: float) -> LabelPriorDrift | None:
    """Label-prior drift from the window's confusion counts (labeled predictions)."""
    model = d.model
    negatives, positives = int(conf[0] + conf[1]), int(conf[2] + conf[3])
    if negatives + positives == 0 or d.profile.label_prior is None:
        return None
    prior: dict[str, float] = {}
    for text, share in d.profile.label_prior.items():
        cls = model.is_positive(text)
        if cls < 0:
            return None  # the reference's labels are not this model's classes
        key = "positive" if cls else "negative"
        prior[key] = prior.get(key, 0.0) + share
    return label_prior_drift(prior, {"negative": negatives, "positive": positives}, alpha)


def _category(value: Any) -> str | None:
    """A categorical feature value as text; objects and arrays count as missing (their
    text is no category, and str() of a deeply nested one would recurse)."""
    if value is None or isinstance(value, dict | list):
        return None
    return str(value)
