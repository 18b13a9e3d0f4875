"""Multiclass catalog over one fixed-size layout: K×K confusion counts, loss sums, top-label bins.

Layout (float64, ``width = K² + 5 + 3M``; M calibration bins, default 10):

* ``[0, K²)`` — confusion counts, row-major, cell ``K·y_true + y_pred``;
* ``K²`` n_proba (rows that carried a probability vector), then Σ log-loss, Σ log-loss²,
  Σ Brier, Σ Brier² (multiclass Brier = Σ_k (p_k − 1[y=k])², sklearn's
  ``brier_score_loss(..., scale_by_half=False)``);
* then M counts, M Σ confidence, M Σ correct for top-label calibration (confidence =
  max_k p_k, correct = argmax p == y; equal-width bins ``(m/M, (m+1)/M]``, first closed).

Per-class results are named ``precision[label]``, ``recall[label]``, ``f1[label]``
(``label`` from the layout's ``labels`` or the class index). Averages follow sklearn: the
classes averaged over are those present in the window (true or predicted), a zero
denominator counts as 0 (sklearn's ``zero_division`` default), ``weighted`` weighs by true
support. The ``micro`` averages of single-label multiclass P/R/F1 all equal accuracy and
are reported as such (Wilson). Interval methods are given per function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .agreement import kappa_with_se, mcc_with_se
from .binary import fbeta
from .common import NAN, clt_mean, homogeneous_delta_se, wald
from .common import as_index as _as_index
from .common import ratio as _ratio
from .results import MetricValue
from .scores import calibration_test, ece_debiased_from_bins, ece_from_bins

__all__ = ["MulticlassLayout"]


@dataclass(frozen=True, slots=True)
class MulticlassLayout:
    """K-class statistics; see the module docstring for the vector layout."""

    n_classes: int
    labels: tuple[str, ...] | None = None
    calibration_bins: int = 10
    eps: float = 1e-15

    def __post_init__(self) -> None:
        if self.n_classes < 2:
            raise ValueError("a multiclass layout needs at least two classes")
        if self.labels is not None and len(self.labels) != self.n_classes:
            raise ValueError("labels must name every class")

    @property
    def _k2(self) -> int:
        return self.n_classes * self.n_classes

    @property
    def width(self) -> int:
        return self._k2 + 5 + 3 * self.calibration_bins

    def empty(self) -> np.ndarray:
        return np.zeros(self.width, dtype=np.float64)

    def label(self, k: int) -> str:
        return self.labels[k] if self.labels is not None else str(k)

    def add_rows(
        self,
        matrix: np.ndarray,
        rows: np.ndarray | int,
        y_true: np.ndarray,
        y_pred: np.ndarray | None = None,
        proba: np.ndarray | None = None,
    ) -> None:
        """Add class indices (and optionally an (m, K) probability matrix) row by row.

        ``y_pred`` defaults to ``argmax(proba)``; when both are given the decision counts
        in the confusion matrix and the probabilities feed losses and calibration.
        """
        k = self.n_classes
        yt = np.asarray(y_true, dtype=np.intp)
        m = yt.size
        r = _as_index(rows, m)
        pr = None if proba is None else np.asarray(proba, dtype=np.float64).reshape(m, k)
        if y_pred is None:
            if pr is None:
                raise ValueError("need y_pred or proba")
            yp = np.argmax(pr, axis=1)
        else:
            yp = np.asarray(y_pred, dtype=np.intp)
        np.add.at(matrix, (r, k * yt + yp), 1.0)
        if pr is None:
            return
        base = self._k2
        p_true = np.clip(pr[np.arange(m), yt], self.eps, 1.0 - self.eps)
        ll = -np.log(p_true)
        onehot = np.zeros_like(pr)
        onehot[np.arange(m), yt] = 1.0
        br = np.sum((pr - onehot) ** 2, axis=1)
        dense = np.column_stack([np.ones(m), ll, ll * ll, br, br * br])
        np.add.at(matrix, (r[:, None], base + np.arange(5)[None, :]), dense)
        mb = self.calibration_bins
        conf = pr.max(axis=1)
        correct = (np.argmax(pr, axis=1) == yt).astype(np.float64)
        edges = np.linspace(0.0, 1.0, mb + 1)
        b = np.searchsorted(edges[1:-1], conf, side="left")
        cal = base + 5
        np.add.at(matrix, (r, cal + b), 1.0)
        np.add.at(matrix, (r, cal + mb + b), conf)
        np.add.at(matrix, (r, cal + 2 * mb + b), correct)

    def add(
        self,
        vec: np.ndarray,
        y_true: np.ndarray,
        y_pred: np.ndarray | None = None,
        proba: np.ndarray | None = None,
    ) -> None:
        self.add_rows(vec[np.newaxis, :], 0, y_true, y_pred, proba)

    def confusion(self, vec: np.ndarray) -> np.ndarray:
        return np.asarray(vec[: self._k2], dtype=np.float64).reshape(self.n_classes, -1)

    def metrics(
        self,
        vec: np.ndarray,
        confidence: float = 0.95,
        per_class: bool = True,
    ) -> list[MetricValue]:
        """Accuracy, averaged and per-class P/R/F1, kappas, MCC, log loss, Brier, top-label
        ECE (plug-in and debiased) and the calibration test of the top-label confidence
        (correct = Bernoulli(confidence) when calibrated: the binary machinery applies)."""
        cm = self.confusion(vec)
        n = float(cm.sum())
        diag = np.diag(cm)
        support, predicted = cm.sum(axis=1), cm.sum(axis=0)
        out = [_ratio("accuracy", float(diag.sum()), n, confidence)]
        out += _averaged(cm, confidence)
        if per_class:
            for k in range(self.n_classes):
                lab = self.label(k)
                out.append(_ratio(f"precision[{lab}]", diag[k], predicted[k], confidence))
                out.append(_ratio(f"recall[{lab}]", diag[k], support[k], confidence))
                out.append(_per_class_f1(cm, k, f"f1[{lab}]", confidence))
        n_int = round(n)
        for weights, name in (
            ("none", "cohen_kappa"),
            ("linear", "cohen_kappa_linear"),
            ("quadratic", "cohen_kappa_quadratic"),
        ):
            value, se = kappa_with_se(cm, weights)  # type: ignore[arg-type]
            out.append(
                wald(name, value, se, n_int, confidence, "fleiss-cohen-everitt", (-1.0, 1.0))
            )
        value, se = mcc_with_se(cm)
        out.append(wald("mcc", value, se, n_int, confidence, "delta", (-1.0, 1.0)))
        b = self._k2
        n_p, s_ll, s_ll2, s_br, s_br2 = (float(x) for x in vec[b : b + 5])
        out.append(clt_mean("log_loss", s_ll, s_ll2, n_p, confidence, (0.0, math.inf)))
        out.append(clt_mean("brier", s_br, s_br2, n_p, confidence, (0.0, 2.0)))
        mb = self.calibration_bins
        cal = np.asarray(vec[b + 5 : b + 5 + 3 * mb], dtype=np.float64).reshape(3, mb)
        out.append(ece_from_bins("ece", cal[0], cal[1], cal[2], confidence))
        test = calibration_test(cal[0], cal[1], cal[2])
        out.append(ece_debiased_from_bins(cal[0], cal[1], cal[2], p_value=test.value))
        out.append(test)
        return out


def _metric_grads(cm: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-class values (sklearn zero_division=0) and their count-gradients, shape (K, K, K)."""
    k = cm.shape[0]
    diag = np.diag(cm)
    support, predicted = cm.sum(axis=1), cm.sum(axis=0)
    denom = {"precision": predicted, "recall": support, "f1": support + predicted}[kind]
    num = 2 * diag if kind == "f1" else diag
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(denom > 0, num / np.where(denom > 0, denom, 1.0), 0.0)
    grads = np.zeros((k, k, k))
    for c in range(k):
        if denom[c] <= 0:
            continue
        g = grads[c]
        if kind == "precision":
            g[:, c] -= values[c] / denom[c]
        elif kind == "recall":
            g[c, :] -= values[c] / denom[c]
        else:
            g[c, :] -= values[c] / denom[c]
            g[:, c] -= values[c] / denom[c]
        g[c, c] += (2.0 if kind == "f1" else 1.0) / denom[c]
    return values, grads, support


def _averaged(cm: np.ndarray, confidence: float) -> list[MetricValue]:
    """macro/micro/weighted precision, recall and F1 with delta-method intervals.

    Each average is a scale-free function of the counts, so its SE is
    sqrt(Σ (∂f/∂C_ij)² C_ij) (Takahashi et al. 2022 derive the macro-F1 case). For
    ``weighted`` the weights R_k/n are differentiated too. Micro averages equal accuracy
    here and get its Wilson interval.
    """
    n = float(cm.sum())
    n_int = round(n)
    present = (cm.sum(axis=0) + cm.sum(axis=1)) > 0
    out: list[MetricValue] = []
    for kind in ("precision", "recall", "f1"):
        values, grads, support = _metric_grads(cm, kind)
        if n <= 0 or not present.any():
            out += [
                MetricValue(f"{kind}_{a}", NAN, NAN, NAN, n_int, "delta")
                for a in ("macro", "micro", "weighted")
            ]
            continue
        macro = float(values[present].mean())
        g_macro = grads[present].sum(axis=0) / present.sum()
        out.append(
            wald(
                f"{kind}_macro",
                macro,
                homogeneous_delta_se(g_macro, cm),
                n_int,
                confidence,
                "delta",
                (0.0, 1.0),
            )
        )
        out.append(_ratio(f"{kind}_micro", float(np.trace(cm)), n, confidence))
        w = support / n
        weighted = float(w @ values)
        g_w = np.tensordot(w, grads, axes=1) + ((values - weighted) / n)[:, None]
        out.append(
            wald(
                f"{kind}_weighted",
                weighted,
                homogeneous_delta_se(g_w, cm),
                n_int,
                confidence,
                "delta",
                (0.0, 1.0),
            )
        )
    return out


def _per_class_f1(cm: np.ndarray, k: int, name: str, confidence: float) -> MetricValue:
    """One-vs-rest F1 of class k; interval as in :func:`monitor.stats.binary.fbeta`."""
    tp = float(cm[k, k])
    fp = float(cm[:, k].sum()) - tp
    fn = float(cm[k, :].sum()) - tp
    tn = float(cm.sum()) - tp - fp - fn
    mv = fbeta(tp, fp, fn, 1.0, confidence, tn)
    return MetricValue(name, mv.value, mv.lower, mv.upper, mv.n, mv.method, mv.note)
