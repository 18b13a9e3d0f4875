"""``monitor baseline``: build a drift reference profile from training or validation data.

Reads Parquet, CSV or JSONL with pandas. Numeric columns become equal-mass histograms
over the reference's own quantiles (``drift.bins``), categorical columns their category
frequencies (top ``drift.max_categories``, the rest folded into ``__other__``); the
prediction score and the label prior are profiled when their columns are present.
JSONL may hold prediction records: a nested features object (``fields.features``) is
flattened, so a profile can be built from logged traffic as well as from a training set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .config import ModelSettings, Settings
from .drift.reference import (
    OTHER_SKETCH_CELLS,
    CategoricalReference,
    NumericReference,
    ReferenceProfile,
)
from .ingest.decode import canonical_label
from .stats.regression import naive_mae_scale

__all__ = ["BaselineError", "build_baseline", "read_table"]


class BaselineError(Exception):
    """The input cannot give a profile; the message says why."""


@dataclass(frozen=True, slots=True)
class BaselineSummary:
    profile: ReferenceProfile
    rows: int
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]


PARQUET_EXTRA = "pip install 'model-monitor[parquet]'"


def _require_pyarrow(path: Path) -> None:
    """Parquet support is an optional extra (only ``monitor baseline`` reads Parquet)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise BaselineError(
            f"{path}: reading Parquet needs pyarrow, which is not installed; "
            f"install the parquet extra ({PARQUET_EXTRA}) or use .csv / .jsonl"
        ) from None


def read_table(path: Path) -> pd.DataFrame:
    suffix = "".join(path.suffixes[-2:]).lower() if path.suffix == ".gz" else path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            _require_pyarrow(path)
            return pd.read_parquet(path)
        if suffix in (".csv", ".csv.gz"):
            return pd.read_csv(path)
        if suffix in (".jsonl", ".ndjson", ".json", ".jsonl.gz"):
            records = pd.read_json(path, lines=True, dtype=False)
            return pd.json_normalize(records.to_dict(orient="records"))
    except FileNotFoundError:
        raise BaselineError(f"{path} does not exist") from None
    except (ValueError, OSError, ImportError) as err:  # pandas' parse errors are ValueErrors
        raise BaselineError(f"{path} cannot be read as {suffix.lstrip('.')}: {err}") from None
    except Exception as err:  # pyarrow / parser errors of other kinds
        raise BaselineError(f"{path} cannot be read: {type(err).__name__}: {err}") from None
    raise BaselineError(f"{path}: unknown format {suffix!r}; use .parquet, .csv or .jsonl")


def _pick_model(settings: Settings, name: str | None) -> ModelSettings:
    if name is not None:
        try:
            return settings.model(name)
        except KeyError:
            raise BaselineError(f"model {name!r} is not in the configuration") from None
    if len(settings.models) == 1:
        return settings.models[0]
    raise BaselineError("the configuration has several models: choose one with --model")


def build_baseline(settings: Settings, path: Path, model: str | None = None) -> BaselineSummary:
    m = _pick_model(settings, model)
    drift = m.drift
    frame = read_table(path)
    if frame.empty:
        raise BaselineError(f"{path} holds no rows")
    f = m.fields
    prefix = f"{f.features}."
    frame = frame.rename(
        columns={c: c[len(prefix) :] for c in frame.columns if c.startswith(prefix)}
    )
    label_col = settings.join.label_fields.label
    reserved = {f.id, f.ts, f.model, f.version, f.score, f.prediction, label_col}
    reserved |= {c for c in frame.columns if c.startswith(f"{f.segments}.") or c == f.segments}
    wanted = list(drift.features) if drift and drift.features else None
    columns = wanted or [c for c in frame.columns if c not in reserved]
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise BaselineError(f"{path} lacks the configured drift features {missing}")
    if not columns:
        raise BaselineError(f"{path} has no feature columns (columns: {list(frame.columns)})")
    bins = drift.bins if drift else 100
    max_categories = drift.max_categories if drift else 50
    forced = set(drift.categorical) if drift else set()
    features: list[NumericReference | CategoricalReference] = []
    numeric, categorical = [], []
    for col in columns:
        series = frame[col]
        if col not in forced and _is_numeric(series):
            values = pd.to_numeric(series, errors="coerce").to_numpy(np.float64)
            if not np.isfinite(values).any():
                raise BaselineError(f"numeric feature {col!r} has no finite values in {path}")
            features.append(NumericReference.from_values(col, values, bins=bins))
            numeric.append(col)
        else:
            values = [None if _missing(v) else str(v) for v in series.tolist()]
            features.append(
                CategoricalReference.from_values(
                    col, values, max_categories=max_categories, sketch_cells=OTHER_SKETCH_CELLS
                )
            )
            categorical.append(col)
    score = None
    if f.score in frame.columns:
        s = pd.to_numeric(frame[f.score], errors="coerce").to_numpy(np.float64)
        if np.isfinite(s).any():
            score = NumericReference.from_values("__score__", s, bins=bins)
    prior = None
    if label_col in frame.columns:
        texts = [t for v in frame[label_col].tolist() if (t := _label_text(v)) is not None]
        if texts:
            counts = pd.Series(texts).value_counts(normalize=True)
            prior = {str(k): float(v) for k, v in counts.items()}
    naive_mae = None
    if m.task == "regression" and label_col in frame.columns:
        naive_mae = _naive_mae(frame, label_col, f.ts, m.mase_season)
    profile = ReferenceProfile(
        features=tuple(features),
        score=score,
        label_prior=prior,
        n=len(frame),
        naive_mae=naive_mae,
        naive_season=m.mase_season,
    )
    return BaselineSummary(profile, len(frame), tuple(numeric), tuple(categorical))


def _naive_mae(frame: pd.DataFrame, target: str, ts: str, season: int) -> float | None:
    """MASE's scale: in-sample MAE of the seasonal naive forecast of the target, in time
    order (by the ``ts`` column when present, else file order); None when undefined."""
    rows = frame
    if ts in frame.columns:
        when = frame[ts]
        key = (
            pd.to_numeric(when, errors="coerce")
            if _is_numeric(when)
            else pd.to_datetime(when, errors="coerce", utc=True)
        )
        rows = frame.assign(_order=key).sort_values("_order", kind="stable")
    y = pd.to_numeric(rows[target], errors="coerce").to_numpy(np.float64)
    scale = naive_mae_scale(y[np.isfinite(y)], season)
    return scale if math.isfinite(scale) and scale > 0 else None


def _label_text(value: Any) -> str | None:
    if _missing(value):
        return None
    try:
        return canonical_label(value)
    except Exception:  # not a class label (a list, an object): not part of the prior
        return None


def _is_numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))
