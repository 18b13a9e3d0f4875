"""The status page (``GET /``) and the replay's HTML report: published JSON -> one HTML page.

Why server-rendered and self-contained: the page must open where the monitor runs —
behind a firewall, without internet, with JavaScript disabled — so it has inline CSS,
hand-drawn inline SVG charts and no external fetch; it reloads itself with a
``<meta http-equiv="refresh">``. Rendering is pure templating over the same JSON the API
serves (``export.report``): every number on the page is the API's number, formatted, and
also carried verbatim in a ``data-v`` attribute next to a ``data-k`` key, so a test (or a
scraper) can check the page against ``/api/v1/status`` or the JSON report exactly.

The reliability diagram follows DeGroot & Fienberg (1983, "The comparison and
evaluation of forecasters"): observed frequency against mean predicted probability per
bin, with each bin's interval; the comparison chart draws the always-valid confidence
sequence (Howard et al. 2021, "Time-uniform, nonparametric, nonasymptotic confidence
sequences") as a band over time.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from .trend_chart import parse_ms, trend_svg

__all__ = ["KEY_METRIC", "render_report", "render_status_page"]

Json = Mapping[str, Any]

# The metric that ranks slices (worst first) and whether a higher value is worse.
KEY_METRIC: dict[str, tuple[tuple[str, bool], ...]] = {
    "binary": (("error_rate", True), ("accuracy", False), ("roc_auc", False)),
    "multiclass": (("error_rate", True), ("accuracy", False), ("f1_macro", False)),
    "regression": (("mae", True), ("rmse", True), ("r2", False)),
}
_SLICE_COLUMNS = 4  # metrics shown per slice row besides the key metric

_CSS = """
:root{--fg:#1d2430;--mute:#5b6573;--line:#d9dee5;--bg:#f5f7fa;--card:#fff;
--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--acc:#0969da;--band:#cfe2ff}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",
sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1d2430;color:#fff;padding:14px 24px;display:flex;gap:24px;
align-items:baseline;flex-wrap:wrap}
header h1{font-size:20px;margin:0}
header .meta{color:#c9d1d9;font-size:13px}
nav{padding:8px 24px;background:#fff;border-bottom:1px solid var(--line);font-size:13px}
nav a{margin-right:14px;color:var(--acc);text-decoration:none}
main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}
section{margin-top:24px}
h2{font-size:18px;margin:0 0 10px;padding-bottom:4px;border-bottom:2px solid var(--line)}
h3{font-size:16px;margin:18px 0 8px}
h4{font-size:14px;margin:0 0 8px;color:var(--mute)}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:12px 14px;
margin:10px 0}
.grid{display:grid;grid-template-columns:minmax(0,1fr) auto;gap:16px;align-items:start}
.facts{display:flex;flex-wrap:wrap;gap:8px 22px;margin:2px 0 10px;color:var(--mute)}
.facts b{color:var(--fg);font-weight:600}
table{border-collapse:collapse;width:100%;font-size:13px}
table.narrow{width:auto;min-width:420px}
.grid2{display:grid;grid-template-columns:minmax(300px,440px) minmax(0,1fr);gap:20px;
align-items:start}
th,td{padding:4px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{font-weight:600;color:var(--mute);background:#fafbfc}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr:nth-child(even) td{background:#fbfcfd}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;
color:#fff;background:var(--mute)}
.badge.ok,.badge.promote,.badge.inactive,.badge.resolved{background:var(--ok)}
.badge.bad,.badge.rollback,.badge.firing,.badge.invalid,.badge.detected{background:var(--bad)}
.badge.pending,.badge.warn{background:var(--warn)}
.muted{color:var(--mute)}
.empty{color:var(--mute);font-style:italic}
svg text{font:11px system-ui,"DejaVu Sans",sans-serif;fill:var(--mute)}
.reason{color:var(--mute);font-size:12px}
footer{color:var(--mute);font-size:12px;margin-top:32px}
.badge.slo_firing,.badge.invalid_comparison{background:var(--bad)}
.badge.drift,.badge.slo_pending,.badge.unreliable_estimate{background:var(--warn)}
.badge.no_data,.badge.provisional{background:var(--mute)}
.cells{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:10px}
.cell{background:var(--card);border:1px solid var(--line);border-left:6px solid var(--ok);
border-radius:6px;padding:8px 12px}
.cell.slo_firing,.cell.rollback,.cell.invalid_comparison{border-left-color:var(--bad)}
.cell.drift,.cell.slo_pending,.cell.unreliable_estimate{border-left-color:var(--warn)}
.cell.no_data,.cell.provisional{border-left-color:var(--mute)}
.cell h4{margin:0 0 4px;color:var(--fg)}
.cell ul{margin:4px 0 0;padding-left:18px}
.cause{color:var(--fg);font-weight:600;font-size:13px}
tr.firing td{background:#fff1f0}
tr.below td,td.below{color:#8c959f}
td.breach{color:var(--bad);font-weight:700}
td.worse{color:var(--bad);font-weight:600}
td.better{color:var(--acc)}
.trends{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));gap:12px}
"""


# -- formatting ---------------------------------------------------------------------------
def _fmt(x: Any) -> str:
    """A number as people read it: 4 significant digits, thousands separated."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, numbers.Integral):
        return f"{int(x):,}"
    x = float(x)
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x != 0 and (abs(x) >= 10_000 or abs(x) < 1e-3):
        return f"{x:.4g}" if abs(x) < 1e-3 else f"{x:,.0f}"
    return f"{x:.4g}"


def _pct(x: Any) -> str:
    return "—" if x is None else f"{100 * float(x):.1f}%"


def _e(x: Any) -> str:
    return escape(str(x), quote=True)


def _key(*parts: Any) -> str:
    return "|".join(str(p) for p in parts)


def _v(x: Any) -> str:
    """The exact value for ``data-v``: repr of a float round-trips, None is empty."""
    if x is None:
        return ""
    return repr(float(x)) if isinstance(x, float) else str(x)


def _num(key: str, x: Any, text: str | None = None, cls: str = "n") -> str:
    """A table cell carrying the exact value (``data-v``) under a stable key (``data-k``)."""
    shown = _fmt(x) if text is None else text
    return f'<td class="{cls}" data-k="{_e(key)}" data-v="{_e(_v(x))}">{_e(shown)}</td>'


def _badge(state: str, text: str | None = None) -> str:
    return f'<span class="badge {_e(state)}">{_e(text or state)}</span>'


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    s = max(0.0, seconds)
    if s < 120:
        return f"{s:.0f}s ago"
    if s < 7200:
        return f"{s / 60:.0f} min ago"
    return f"{s / 3600:.1f} h ago"


def _table(
    head: Sequence[str], rows: Iterable[str], numeric: Iterable[int] = (), narrow: bool = False
) -> str:
    nums = set(numeric)
    th = "".join(
        f'<th class="n">{_e(h)}</th>' if i in nums else f"<th>{_e(h)}</th>"
        for i, h in enumerate(head)
    )
    cls = ' class="narrow"' if narrow else ""
    return f"<table{cls}><thead><tr>{th}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


# -- charts (inline SVG) ------------------------------------------------------------------
def _reliability_svg(bins: Sequence[Json], label: str) -> str:
    """Observed frequency vs mean predicted probability per bin, with the bin's interval;
    marker area proportional to the bin's count."""
    size, pad = 240, 32
    inner = size - 2 * pad

    def px(v: float) -> float:
        return pad + inner * min(max(v, 0.0), 1.0)

    def py(v: float) -> float:
        return size - pad - inner * min(max(v, 0.0), 1.0)

    out = [
        f'<svg role="img" aria-label="{_e(label)}" width="{size}" height="{size}" '
        f'viewBox="0 0 {size} {size}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{_e(label)}</title>",
        f'<rect x="{pad}" y="{pad}" width="{inner}" height="{inner}" fill="#fff" '
        'stroke="#d9dee5"/>',
        f'<line x1="{px(0)}" y1="{py(0)}" x2="{px(1)}" y2="{py(1)}" stroke="#8c959f" '
        'stroke-dasharray="4 3"/>',
    ]
    for t in (0.0, 0.5, 1.0):
        out.append(f'<text x="{px(t)}" y="{size - pad + 14}" text-anchor="middle">{t:g}</text>')
        out.append(f'<text x="{pad - 6}" y="{py(t) + 4}" text-anchor="end">{t:g}</text>')
    out.append(
        f'<text x="{size / 2}" y="{size - 4}" text-anchor="middle">mean predicted</text>'
        f'<text x="10" y="{size / 2}" text-anchor="middle" '
        f'transform="rotate(-90 10 {size / 2})">observed</text>'
    )
    counts = [int(b.get("count") or 0) for b in bins]
    biggest = max(counts, default=0) or 1
    for b, n in zip(bins, counts, strict=True):
        mp, ob = b.get("mean_predicted"), b.get("observed")
        if not n or mp is None or ob is None:
            continue
        lo, hi = b.get("observed_ci_lower"), b.get("observed_ci_upper")
        if lo is not None and hi is not None:
            out.append(
                f'<line x1="{px(mp):.1f}" y1="{py(lo):.1f}" x2="{px(mp):.1f}" y2="{py(hi):.1f}" '
                'stroke="#0969da" stroke-width="1.5" opacity="0.6"/>'
            )
        r = 2.5 + 5.5 * math.sqrt(n / biggest)
        out.append(
            f'<circle cx="{px(mp):.1f}" cy="{py(ob):.1f}" r="{r:.1f}" fill="#0969da" '
            f'fill-opacity="0.75"><title>predicted {_fmt(mp)}, observed {_fmt(ob)}, '
            f"n={n:,}</title></circle>"
        )
    out.append("</svg>")
    return "".join(out)


def _cs_svg(points: Sequence[Json], margin: float, label: str) -> str:
    """The effect over time with its confidence sequence as a band; 0 and the margin."""
    w, h, pad_l, pad_r, pad_y = 620, 190, 56, 12, 18
    finite = [p for p in points if p.get("lower") is not None and p.get("upper") is not None]
    if len(points) < 2:
        return '<p class="empty">The chart appears after two evaluations.</p>'
    t0, t1 = points[0]["at_ms"], points[-1]["at_ms"]
    span_t = max(t1 - t0, 1)
    vals = [0.0, margin] + [p["effect"] for p in points if p.get("effect") is not None]
    for p in finite:
        vals += [p["lower"], p["upper"]]
    lo, hi = min(vals), max(vals)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    padv = 0.06 * (hi - lo)
    lo, hi = lo - padv, hi + padv

    def x(t: int) -> float:
        return pad_l + (w - pad_l - pad_r) * (t - t0) / span_t

    def y(v: float) -> float:
        return pad_y + (h - 2 * pad_y) * (hi - v) / (hi - lo)

    out = [
        f'<svg role="img" aria-label="{_e(label)}" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg"><title>{_e(label)}</title>',
        f'<rect x="{pad_l}" y="{pad_y}" width="{w - pad_l - pad_r}" height="{h - 2 * pad_y}" '
        'fill="#fff" stroke="#d9dee5"/>',
    ]
    if len(finite) >= 2:
        upper = " ".join(f"{x(p['at_ms']):.1f},{y(p['upper']):.1f}" for p in finite)
        lower = " ".join(f"{x(p['at_ms']):.1f},{y(p['lower']):.1f}" for p in reversed(finite))
        out.append(f'<polygon points="{upper} {lower}" fill="#cfe2ff" stroke="#9ec5fe"/>')
    for v, name, color in ((0.0, "0", "#57606a"), (margin, "margin", "#cf222e")):
        if name == "margin" and margin == 0:
            continue
        out.append(
            f'<line x1="{pad_l}" x2="{w - pad_r}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
            f'stroke="{color}" stroke-dasharray="5 3"/>'
            f'<text x="{w - pad_r - 2}" y="{y(v) - 3:.1f}" text-anchor="end">{name}</text>'
        )
    line = " ".join(
        f"{x(p['at_ms']):.1f},{y(p['effect']):.1f}" for p in points if p.get("effect") is not None
    )
    out.append(f'<polyline points="{line}" fill="none" stroke="#0969da" stroke-width="2"/>')
    for v in (lo + padv, (lo + hi) / 2, hi - padv):
        out.append(f'<text x="{pad_l - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    for t, anchor in ((t0, "start"), (t1, "end")):
        out.append(
            f'<text x="{x(t):.1f}" y="{h - 3}" text-anchor="{anchor}">{_e(_clock(t))}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


# -- sections -----------------------------------------------------------------------------
def _key_metric(task: str, metrics: Json) -> tuple[str, bool] | None:
    if task == "ranking":  # NDCG at the smallest configured k (names carry the k)
        ndcg = sorted((n for n in metrics if n.startswith("ndcg_at_")), key=_cutoff)
        return (ndcg[0], False) if ndcg else ("mrr", False) if "mrr" in metrics else None
    for name, higher_worse in KEY_METRIC.get(task, KEY_METRIC["binary"]):
        if name in metrics:
            return name, higher_worse
    return None


def _cutoff(name: str) -> int:
    tail = name.rpartition("_")[2]
    return int(tail) if tail.isdigit() else 0


def _metrics_table(r: Json, min_n: int, objectives: Objectives) -> str:
    """The window's metrics; a value past an SLO objective on it is highlighted, a row
    with fewer samples than ``min_n`` muted with the reason (too few to read)."""
    base = _key(r["model"], r["version"], r["window"], r["slice"])
    rows = []
    for name, m in r["metrics"].items():
        k = _key("metric", base, name)
        ci = "—"
        if m["ci_lower"] is not None and m["ci_upper"] is not None:
            ci = f"[{_fmt(m['ci_lower'])}, {_fmt(m['ci_upper'])}]"
        low = m["n"] is not None and m["n"] < min_n
        breach = _breaches(objectives, r, name, m["value"])
        note = f"n={m['n']:,} below {min_n:,}: too few to read" if low else ""
        note = breach or note
        rows.append(
            f'<tr class="{"below" if low else ""}"><td>{_e(name)}</td>'
            f"{_num(k + '|value', m['value'], cls='n breach' if breach else 'n')}"
            f'<td class="n" data-k="{_e(k)}|ci" data-v="{_e(_pair(m))}">{_e(ci)}</td>'
            f'{_num(k + "|n", m["n"])}<td class="muted">{_e(m["interval_method"])}</td>'
            f'<td class="reason">{_e(note)}</td></tr>'
        )
    head = ("metric", "value", "interval", "n", "interval method", "")
    return _table(head, rows, (1, 2, 3))


# (model, window, slice, metric) -> [(SLO name, objective, direction)]
Objectives = Mapping[tuple[str, str, str, str], Sequence[tuple[str, float, str]]]


def _objectives(slos: Json | None) -> dict[tuple[str, str, str, str], list[tuple[str, float, str]]]:
    out: dict[tuple[str, str, str, str], list[tuple[str, float, str]]] = {}
    for s in (slos or {}).get("slos") or []:
        key = (s["model"], s["window"], s["slice"], s["metric"])
        item = (s["name"], float(s["objective"]), s["direction"])
        if item not in out.setdefault(key, []):
            out[key].append(item)
    return out


def _breaches(objectives: Objectives, r: Json, metric: str, value: Any) -> str:
    """Why ``value`` breaks an SLO on this metric of ``r``'s window and slice ("")."""
    if value is None:
        return ""
    for name, objective, direction in objectives.get(
        (r["model"], r["window"], r["slice"], metric), ()
    ):
        if (value < objective) if direction == "above" else (value > objective):
            side = "below" if direction == "above" else "above"
            return f"{side} SLO {name} objective {objective:g}"
    return ""


def _pair(m: Json) -> str:
    lo, hi = m["ci_lower"], m["ci_upper"]
    return f"{lo!r},{hi!r}" if lo is not None and hi is not None else ""


def _confusion(r: Json) -> str:
    cm = r.get("confusion_matrix")
    if not cm:
        return ""
    classes = cm["classes"]
    rows = [
        f"<tr><th>{_e(c)}</th>" + "".join(f'<td class="n">{v:,}</td>' for v in row) + "</tr>"
        for c, row in zip(classes, cm["counts"], strict=True)
    ]
    head = "".join(f'<th class="n">{_e(c)}</th>' for c in classes)
    return (
        "<h4>Confusion matrix (rows: true class, columns: predicted)</h4>"
        f'<table class="narrow"><thead><tr><th></th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _slice_table(task: str, slices: Sequence[Json], overall: Json | None = None) -> str:
    """Per-slice rows, the worst slice (by the task's key metric) first; a slice value
    whose interval excludes the overall value is marked worse (red) or better (blue)."""
    if not slices:
        return ""
    names: list[str] = []
    for r in slices:
        for n in r["metrics"]:
            if n not in names:
                names.append(n)
    key = _key_metric(task, {n: 1 for n in names})

    def badness(r: Json) -> tuple[int, float]:
        if key is None or key[0] not in r["metrics"] or r["metrics"][key[0]]["value"] is None:
            return (1, 0.0)
        v = float(r["metrics"][key[0]]["value"])
        return (0, -v if key[1] else v)

    ordered = sorted(slices, key=lambda r: (badness(r), r["slice"]))
    cols = ([key[0]] if key else []) + [n for n in names if not key or n != key[0]]
    cols = cols[: _SLICE_COLUMNS + 1]
    rows = []
    for r in ordered:
        base = _key(r["model"], r["version"], r["window"], r["slice"])
        cells = [f"<td>{_e(r['slice'])}</td>", _num(_key("result", base, "labeled"), r["labeled"])]
        cells.append(
            _num(
                _key("result", base, "label_coverage"),
                r["label_coverage"],
                _pct(r["label_coverage"]),
            )
        )
        for n in cols:
            m = r["metrics"].get(n)
            if m is None:
                cells.append('<td class="n">—</td>')
                continue
            k = _key("metric", base, n, "value")
            ci = ""
            if m["ci_lower"] is not None and m["ci_upper"] is not None:
                ci = f" [{_fmt(m['ci_lower'])}, {_fmt(m['ci_upper'])}]"
            cls = "n" + _outside(m, overall, n, key)
            cells.append(_num(k, m["value"], _fmt(m["value"]) + ci, cls))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    title = "Slices, worst first" + (f" (by {key[0]})" if key else "")
    head = ("slice", "labeled", "coverage", *cols)
    return f"<h4>{_e(title)}</h4>" + _table(head, rows, range(1, len(head)))


def _outside(m: Json, overall: Json | None, name: str, key: tuple[str, bool] | None) -> str:
    """ " worse" / " better" when the overall value lies outside this slice's interval."""
    if overall is None or m["ci_lower"] is None or m["ci_upper"] is None:
        return ""
    ref = (overall["metrics"].get(name) or {}).get("value")
    if ref is None or m["ci_lower"] <= ref <= m["ci_upper"]:
        return ""
    higher_worse = key[1] if key is not None and key[0] == name else _higher_worse(name)
    above = m["ci_lower"] > ref
    return " worse" if above == higher_worse else " better"


def _higher_worse(name: str) -> bool:
    return name in _LOSSES or name.startswith(("ece", "mce", "log_loss", "brier", "fpr", "fnr"))


_LOSSES = frozenset({"error_rate", "mae", "mse", "rmse", "mape", "smape", "male", "huber",
                     "log_loss", "brier", "ece", "ece_debiased", "mce", "fpr", "fnr"})  # fmt: skip


def _window_card(
    task: str,
    window: str,
    results: Sequence[Json],
    min_n: int = 0,
    objectives: Objectives | None = None,
) -> str:
    overall = next((r for r in results if r["slice"] == "all"), None)
    slices = [r for r in results if r["slice"] != "all"]
    if overall is None and not slices:
        return (
            f'<div class="card"><h4>window {_e(window)}</h4>'
            '<p class="empty">No data in this window yet.</p></div>'
        )
    head = overall or slices[0]
    base = _key(head["model"], head["version"], head["window"], head["slice"])
    facts = (
        f'<div class="facts"><span>{_e(head["start"])} → {_e(head["end"])}</span>'
        f'<span>predictions <b data-k="{_e(_key("result", base, "predictions"))}" '
        f'data-v="{head["predictions"]}">{head["predictions"]:,}</b></span>'
        f'<span>labeled <b data-k="{_e(_key("result", base, "labeled"))}" '
        f'data-v="{head["labeled"]}">{head["labeled"]:,}</b></span>'
        f'<span>label coverage <b data-k="{_e(_key("result", base, "label_coverage"))}" '
        f'data-v="{_e(_v(head["label_coverage"]))}">'
        f"{_e(_pct(head['label_coverage']))}</b></span></div>"
    )
    body = ""
    if overall is not None:
        chart = ""
        if overall.get("reliability"):
            label = f"Reliability diagram {overall['model']} {overall['version']} {window}"
            chart = (
                "<div><h4>Reliability</h4>"
                + _reliability_svg(overall["reliability"], label)
                + "</div>"
            )
        excluded = overall.get("excluded_rows")
        note = ""
        if excluded:
            note = (
                '<p class="reason">excluded rows: '
                + _e(", ".join(f"{k} {v:,}" for k, v in excluded.items()))
                + "</p>"
            )
        table = _metrics_table(overall, min_n, objectives or {})
        body += f'<div class="grid"><div>{table}{note}{_confusion(overall)}</div>{chart}</div>'
    body += _slice_table(task, slices, overall)
    return f'<div class="card"><h4>window {_e(window)}</h4>{facts}{body}</div>'


def _models_section(
    models: Sequence[Json], results: Sequence[Json], objectives: Objectives | None = None
) -> str:
    by_model: dict[str, list[Json]] = {}
    for r in results:
        by_model.setdefault(r["model"], []).append(r)
    layout = list(models)
    known = {m["name"] for m in layout}
    for name in by_model:  # a model only the data names (replay of an older config)
        if name not in known:
            windows = list(dict.fromkeys(r["window"] for r in by_model[name]))
            layout.append({"name": name, "task": "binary", "windows": windows})
    out = []
    for m in layout:
        rs = by_model.get(m["name"], [])
        versions = sorted({r["version"] for r in rs})
        parts = [
            f'<section id="model-{_e(m["name"])}" data-model="{_e(m["name"])}">'
            f'<h2>Model {_e(m["name"])} <span class="muted">({_e(m["task"])})</span></h2>'
        ]
        if not versions:
            parts.append(
                '<p class="empty">No predictions seen yet. Windows: '
                + ", ".join(_e(w) for w in m["windows"])
                + ".</p>"
            )
        windows = list(m["windows"]) + [
            w for w in dict.fromkeys(r["window"] for r in rs) if w not in m["windows"]
        ]
        for v in versions:
            parts.append(f'<h3 data-version="{_e(v)}">version {_e(v)}</h3>')
            for w in windows:
                wr = [r for r in rs if r["version"] == v and r["window"] == w]
                parts.append(
                    _window_card(m["task"], w, wr, int(m.get("min_samples") or 0), objectives)
                )
        parts.append("</section>")
        out.append("".join(parts))
    return "".join(out)


def _drift_section(drift: Sequence[Json]) -> str:
    if not drift:
        return ""
    cards = []
    for d in drift:
        feats = sorted(
            d["features"],
            key=lambda f: (f["effect"] is None, -(f["effect"] or 0.0), f["feature"]),
        )
        rows = []
        for f in feats:
            k = _key("drift", d["model"], d["version"], d["window"], f["feature"])
            state = _badge("detected") if f["detected"] else _badge("ok", "no")
            rows.append(
                f"<tr><td>{_e(f['feature'])}</td><td>{_e(f['kind'])}</td><td>{_e(f['test'])}</td>"
                f"{_num(k + '|effect', f['effect'])}"
                f"{_num(k + '|effect_threshold', f['effect_threshold'])}"
                f"{_num(k + '|p_adjusted', f['p_adjusted'])}{_num(k + '|psi', f['psi'])}"
                f"{_num(k + '|samples', f['samples'])}<td>{state}</td>"
                f'<td class="reason">{_e(f["reason"] or "")}</td></tr>'
            )
        lp = d.get("label_prior")
        prior = ""
        if lp is not None:
            prior = (
                '<p class="reason">label prior shift: '
                + ("detected" if lp["detected"] else "not detected")
                + f" (p = {_fmt(lp['p_value'])}, JS distance {_fmt(lp['js_distance'])})</p>"
            )
        flag = _badge("detected", "drift") if d["any_detected"] else _badge("ok", "no drift")
        ref = d.get("reference")
        against = (
            "reference <b>training profile</b>"
            if ref is None
            else f"reference <b>{_e(ref['start'])} → {_e(ref['end'])}</b>"
        )
        cards.append(
            f'<div class="card"><h4>{_e(d["model"])} / {_e(d["version"])} / window '
            f"{_e(d['window'])} {flag}</h4>"
            f'<div class="facts"><span>{_e(d["start"])} → {_e(d["end"])}</span>'
            f"<span>{against}</span>"
            f"<span>features tested <b>{d['tested']}</b></span><span>alpha <b>{d['alpha']}</b> "
            f"({_e(d['correction'])})</span></div>"
            + _table(
                (
                    "feature",
                    "kind",
                    "test",
                    "effect",
                    "threshold",
                    "p adj.",
                    "PSI",
                    "n",
                    "drift",
                    "reason",
                ),
                rows,
                (3, 4, 5, 6, 7),
            )
            + prior
            + "</div>"
        )
    return '<section id="drift"><h2>Drift, ranked by effect</h2>' + "".join(cards) + "</section>"


def _comparisons_section(comparisons: Sequence[Json], history: Mapping[str, Sequence[Json]]) -> str:
    if not comparisons:
        return ""
    cards = []
    for c in comparisons:
        k = _key("comparison", c["name"])
        cs = c.get("confidence_sequence") or {}
        level = cs.get("level")
        rows = (
            f"<tr><td>effect (treatment − control {_e(c['loss'])})</td>"
            f"{_num(k + '|effect', c.get('effect'))}</tr>"
            f"<tr><td>confidence sequence"
            f"{f' ({_fmt(100 * level)}%)' if level is not None else ''}</td>"
            f'<td class="n" data-k="{_e(k)}|cs" '
            f'data-v="{_e(_cs_pair(cs))}">[{_fmt(cs.get("lower"))}, {_fmt(cs.get("upper"))}]'
            "</td></tr>"
            f"<tr><td>p-value (always valid)</td>{_num(k + '|p_value', c.get('p_value'))}</tr>"
            f"<tr><td>labeled samples control / treatment</td>"
            f'<td class="n">{_fmt(c["samples"]["control"])} / '
            f"{_fmt(c['samples']['treatment'])}</td></tr>"
        )
        label = f"Confidence sequence of {c['name']}"
        chart = _cs_svg(history.get(c["name"], ()), float(c.get("margin") or 0.0), label)
        since = f" since {_e(c['since'])}" if c.get("since") else ""
        cards.append(
            f'<div class="card" data-comparison="{_e(c["name"])}">'
            f"<h4>{_e(c['name'])}: {_e(c['model'])} {_e(c['control'])} → {_e(c['treatment'])} "
            f'({_e(c["mode"])}) <span data-k="{_e(k)}|decision" data-v="{_e(c["decision"])}">'
            f"{_badge(c['decision'])}</span>{since}</h4>"
            f'<p class="reason">{_e(c["reason"])}</p>'
            f'<div class="grid2"><div>{_table(("", "value"), [rows], (1,))}</div>'
            f'<div>{chart}<p class="reason">line: effect; band: the always-valid confidence '
            "sequence at each look; dashed: 0 and the margin</p></div></div></div>"
        )
    return '<section id="comparisons"><h2>Comparisons</h2>' + "".join(cards) + "</section>"


def _cs_pair(cs: Json) -> str:
    lo, hi = cs.get("lower"), cs.get("upper")
    return f"{lo!r},{hi!r}" if lo is not None and hi is not None else ""


_SLO_ORDER = {"firing": 0, "pending": 1, "resolved": 2, "inactive": 3}


def _slo_section(slos: Json | None, configured: int | None = None) -> str:
    """Every SLO instance, firing first; the wording says whether none is configured or
    the configured ones have no data yet."""
    if slos is None:
        return ""
    items = sorted(slos.get("slos") or [], key=lambda s: _SLO_ORDER.get(s["state"], 4))
    if not items:
        text = (
            "No SLOs configured: <code>[[slos]]</code> in the configuration pages on any "
            "metric (docs/alerting.md)."
            if not configured
            else f"No data yet for the {configured} configured SLO(s)."
        )
        return f'<section id="slos"><h2>SLOs</h2><p class="empty">{text}</p></section>'
    rows = []
    for s in items:
        k = _key("slo", s["name"], s["version"], s["slice"])
        interval = s.get("interval") or {}
        cause = (s.get("cause") or {}).get("text") if s["state"] == "firing" else None
        reason = _e(s.get("reason") or "")
        if cause:
            reason = f'<span class="cause">{_e(cause)}</span><br>{reason}'
        rows.append(
            f'<tr class="{_e(s["state"])}"><td>{_e(s["name"])}</td><td>{_e(s["model"])} / '
            f"{_e(s['version'])} / "
            f"{_e(s['window'])} / {_e(s['slice'])}</td><td>{_e(s['metric'])} "
            f"{_e(s['direction'])} {_fmt(s['objective'])}</td>{_num(k + '|value', s['value'])}"
            f'<td class="n">[{_fmt(interval.get("lower"))}, {_fmt(interval.get("upper"))}]</td>'
            f'{_num(k + "|n", s["n"])}<td data-k="{_e(k)}|state" data-v="{_e(s["state"])}">'
            f'{_badge(s["state"])}</td><td class="reason">{reason}</td></tr>'
        )
    head = (
        "SLO",
        "model / version / window / slice",
        "objective",
        "value",
        "interval",
        "n",
        "state",
        "reason",
    )
    return '<section id="slos"><h2>SLOs</h2>' + _table(head, rows, (3, 4, 5)) + "</section>"


def _overview_section(overview: Json | None) -> str:
    """Every model version's state, the worst first, each with its problems and the
    slices behind an SLO breach or a rollback."""
    if overview is None:
        return ""
    cells = overview.get("cells") or []
    bad = [c for c in cells if c["state"] not in ("ok", "provisional")]
    out = ['<section id="overview"><h2>Overview</h2>']
    if not bad:
        out.append(
            f'<p class="muted">{len(cells)} model version(s), none with a problem '
            f"({overview.get('slos_configured', 0)} SLO(s), "
            f"{overview.get('comparisons_configured', 0)} comparison(s) configured).</p>"
        )
    out.append('<div class="cells">')
    for c in cells:
        k = _key("cell", c["model"], c["version"])
        items = []
        for p in c["problems"]:
            cause = f'<br><span class="cause">{_e(p["cause"])}</span>' if p.get("cause") else ""
            items.append(f"<li>{_e(p['text'])}{cause}</li>")
        cov = c.get("label_coverage")
        facts = (
            f'<span class="muted">{_fmt(c["predictions"])} predictions, coverage '
            f"{_pct(cov) if cov is not None else '—'}</span>"
        )
        out.append(
            f'<div class="cell {_e(c["state"])}" data-k="{_e(k)}|state" '
            f'data-v="{_e(c["state"])}"><h4>{_e(c["model"])} {_e(c["version"] or "")} '
            f"{_badge(c['state'], c['title'])}</h4>{facts}"
            + (f"<ul>{''.join(items)}</ul>" if items else "")
            + "</div>"
        )
    out.append("</div></section>")
    return "".join(out)


def _trends_section(models: Sequence[Json], trends: Json | None, slos: Json | None) -> str:
    """Per model version, its key metrics over time (``trend_chart.py``)."""
    if not trends or not trends.get("series"):
        return ""
    objectives = _objectives(slos)
    spans = trends.get("timeline") or []
    tasks = {m["name"]: m["task"] for m in models}
    series = _shown(trends["series"], objectives, tasks)
    firsts: dict[str, list[tuple[str, int]]] = {}
    for sr in series:
        if sr.get("first_seen"):
            pair = (sr["version"], parse_ms(sr["first_seen"]))
            if pair not in firsts.setdefault(sr["model"], []):
                firsts[sr["model"]].append(pair)
    out = ['<section id="trends"><h2>Trends</h2>']
    order = [m["name"] for m in models]
    ordered = sorted(
        series, key=lambda x: (order.index(x["model"]) if x["model"] in order else 99,
                               x["version"])
    )  # fmt: skip
    current = None
    for sr in ordered:
        head = (sr["model"], sr["version"])
        if head != current:
            if current is not None:
                out.append("</div>")
            out.append(f'<h3>{_e(sr["model"])} {_e(sr["version"])}</h3><div class="trends">')
            current = head
        lines = [
            (name, objective)
            for window in {w for (m, w, sl, me) in objectives if m == sr["model"]}
            for name, objective, _ in objectives.get((sr["model"], window, "all", sr["metric"]), ())
        ]
        mine = [
            x for x in spans
            if x["model"] == sr["model"] and x["version"] in (sr["version"], "all")
        ]  # fmt: skip
        # a version first seen after the model's oldest row: a deploy marker
        seen = firsts.get(sr["model"], [])
        oldest = min((t for _, t in seen), default=0)
        deploys = [(v, t) for v, t in seen if t > oldest]
        out.append(f"<div>{trend_svg(sr, lines, mine, deploys)}</div>")
    out.append(
        '</div><p class="reason">line: value per point (the time tiers\' rows); band: its '
        "interval; dashed red: SLO objective; red shade: SLO firing; orange strip: drift; "
        "purple line: comparison decision; grey dashes: a version first seen; bars below: "
        "label coverage, pale and dashed while labels are still expected (provisional)"
        "</p></section>"
    )
    return "".join(out)


def _shown(
    series: Sequence[Json], objectives: Objectives, tasks: Mapping[str, str], k: int = 2
) -> list[Json]:
    """Per model version, the series of the metrics its SLOs watch, then its task's key
    metric: at most ``k`` (a report's history holds every metric)."""
    by: dict[tuple[str, str], dict[str, Json]] = {}
    for sr in series:
        by.setdefault((sr["model"], sr["version"]), {})[sr["metric"]] = sr
    out = []
    for (model, _), found in by.items():
        watched = [me for (mo, _, sl, me) in objectives if mo == model and sl == "all"]
        key = _key_metric(tasks.get(model, "binary"), found)
        picks = list(dict.fromkeys([*watched, *([key[0]] if key else [])]))
        out += [found[me] for me in picks if me in found][:k]
    return out


def _ops_section(status: Json | None, ops: Json | None, now: float) -> str:
    parts = ['<section id="operations"><h2>Operational health</h2>']
    if status is not None:
        ready = status.get("ready")
        reasons = status.get("not_ready_reasons") or []
        lag = status.get("consumer_lag") or []
        total = sum(int(x["lag"]) for x in lag)
        ck = status.get("last_checkpoint_at")
        age = None if ck is None else now - float(ck)
        parts.append(
            '<div class="facts">'
            f"<span>ready {_badge('ok', 'ready') if ready else _badge('bad', 'not ready')}</span>"
            f"<span>consuming <b>{_fmt(bool(status.get('consuming')))}</b></span>"
            f"<span>partitions <b>{_fmt(status.get('assigned_partitions'))}</b></span>"
            f'<span>consumer lag <b data-k="ops|lag_total" data-v="{total}">{total:,}</b></span>'
            f"<span>last checkpoint <b>{_e(_ago(age))}</b></span>"
            f"<span>checkpoint failures <b>{_fmt(status.get('checkpoint_failures'))}</b></span>"
            "</div>"
        )
        for r in reasons:
            parts.append(f'<p class="reason">not ready: {_e(r)}</p>')
        for name in ("source_error", "last_checkpoint_error", "last_evaluation_error"):
            if status.get(name):
                parts.append(f'<p class="reason">{_e(name)}: {_e(status[name])}</p>')
        budget = status.get("series_budget") or {}
        if budget.get("withheld_series"):
            shown = ", ".join("/".join(k) for k in budget["withheld_results"][:5])
            more = len(budget["withheld_results"]) - 5
            parts.append(
                f'<p class="reason">/metrics withholds <b data-k="ops|series_withheld" '
                f'data-v="{budget["withheld_series"]}">{budget["withheld_series"]:,}</b> series '
                f"of {len(budget['withheld_results']):,} window results to stay within "
                f"[http] max_series = {budget['max_series']:,} (lowest traffic first: "
                f"{_e(shown)}{f' and {more:,} more' if more > 0 else ''}); the API has them</p>"
            )
        if lag:
            rows = [
                f'<tr><td>{_e(x["topic"])}</td><td class="n">{x["partition"]}</td>'
                f"{_num(_key('lag', x['topic'], x['partition']), x['lag'])}</tr>"
                for x in lag
            ]
            parts.append(
                "<h4>Consumer lag</h4>" + _table(("topic", "partition", "lag"), rows, (1, 2), True)
            )
    if ops is not None:
        parts.append(
            '<div class="facts">'
            f"<span>pending predictions <b>{_fmt(ops['pending_predictions'])}</b></span>"
            f"<span>orphan labels <b>{_fmt(ops['orphan_labels'])}</b></span>"
            + "".join(f"<span>join {_e(k)} <b>{_fmt(v)}</b></span>" for k, v in ops["join"].items())
            + "</div>"
        )
        invalid = sorted(ops["invalid_records"], key=lambda x: -x["count"])
        if invalid:
            rows = [
                f"<tr><td>{_e(x['reason'])}</td><td>{_e(x['topic'])}</td>"
                f"{_num(_key('reject', x['topic'], x['reason']), x['count'])}</tr>"
                for x in invalid
            ]
            parts.append(
                "<h4>Rejected records by reason</h4>"
                + _table(("reason", "topic", "count"), rows, (2,), True)
            )
        else:
            parts.append('<p class="muted">No rejected records.</p>')
        records = [
            f"<tr><td>{_e(x['topic'])}</td><td>{_e(x['outcome'])}</td>"
            f"{_num(_key('records', x['topic'], x['outcome']), x['count'])}</tr>"
            for x in ops["records"]
        ]
        if records:
            parts.append(
                "<h4>Records</h4>" + _table(("topic", "outcome", "count"), records, (2,), True)
            )
        if ops.get("plugin_errors"):
            parts.append(
                '<p class="reason">plugin errors: '
                + _e(", ".join(f"{k} {v}" for k, v in ops["plugin_errors"].items()))
                + "</p>"
            )
    if status is None and ops is None:
        return ""
    parts.append("</section>")
    return "".join(parts)


def _page(
    title: str,
    subtitle: str,
    body: str,
    nav: Sequence[tuple[str, str]],
    refresh_s: int | None,
    footer: str,
) -> bytes:
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    links = "".join(f'<a href="#{_e(a)}">{_e(t)}</a>' for a, t in nav)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{refresh}<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f'<header><h1>{_e(title)}</h1><span class="meta">{subtitle}</span></header>'
        f"<nav>{links}</nav><main>{body}<footer>{footer}</footer></main></body></html>\n"
    ).encode()


def _nav(models: Sequence[Json], has: Mapping[str, bool]) -> list[tuple[str, str]]:
    names = (("overview", "Overview"), ("slos", "SLOs"), ("timeline", "Timeline"),
             ("comparisons", "Comparisons"), ("trends", "Trends"), ("drift", "Drift"))  # fmt: skip
    nav = [(s, t) for s, t in names if has.get(s)]
    nav += [(f"model-{m['name']}", m["name"]) for m in models]
    if has.get("operations"):
        nav.append(("operations", "Operations"))
    return nav


def _timeline_section(timeline: Sequence[Json], all_window: Json | None) -> str:
    """Replay: when each SLO instance fired and resolved over replayed time, and why; and
    what the window ``all`` holds."""
    parts = []
    if timeline:
        rows = [
            f"<tr><td>{_e(t['slo'])}</td><td>{_e(t['model'])} / {_e(t['version'])}</td>"
            f"<td>{_e(t['fired_at'])}</td><td>{_e(t['resolved_at'] or 'still firing')}</td>"
            f'<td class="cause">{_e(t.get("cause") or "")}</td></tr>'
            for t in timeline
        ]
        parts.append(
            "<h3>SLO timeline over replayed time</h3>"
            + _table(("SLO", "model / version", "fired", "resolved", "cause"), rows)
        )
    if all_window is not None:
        left = all_window.get("left_out") or 0
        held, accepted = all_window.get("predictions"), all_window.get("accepted_predictions")
        parts.append(
            f'<p class="{"reason" if left else "muted"}">window <b>all</b> holds '
            f"{_fmt(held)} of {_fmt(accepted)} accepted predictions"
            + (f"; left out: {_fmt(left)} ({_e(all_window.get('why') or '')})" if left else "")
            + ".</p>"
        )
    if not parts:
        return ""
    return '<section id="timeline"><h2>Timeline</h2>' + "".join(parts) + "</section>"


def _worst(overview: Json | None) -> str:
    """The header's badge: the worst state of any model version."""
    if overview is None:
        return ""
    state = overview["state"]
    text = overview["title"]
    if overview.get("problems", 0) > 1:
        text = f"{text} (+{overview['problems'] - 1} more)"
    return _badge(state, text) + " · "


def render_status_page(
    status: Json,
    comparisons: Json,
    slos: Json | None,
    history: Mapping[str, Sequence[Json]],
    models: Sequence[Json],
    refresh_s: int | None = 10,
    now: float | None = None,
    overview: Json | None = None,
    trends: Json | None = None,
) -> bytes:
    """The daemon's page from what its API serves: ``status`` = /api/v1/status,
    ``comparisons`` = /api/v1/comparisons, ``slos`` = /api/v1/slos, ``history`` from
    ``report.history_json``, ``models`` from ``report.layout_json``, ``overview`` from
    ``overview.overview_json`` and ``trends`` = {"series": [``report.series_json``],
    "timeline": ``report.timeline_json``}. Problems first: the overview, the SLOs (firing
    first), the comparisons and the trends come before the windows' details."""
    now = time.time() if now is None else now
    snap = status.get("snapshot") or {}
    comps = comparisons.get("comparisons") or []
    configured = (overview or {}).get("slos_configured")
    sections = {
        "overview": _overview_section(overview),
        "slos": _slo_section(slos, configured),
        "comparisons": _comparisons_section(comps, history),
        "trends": _trends_section(models, trends, slos),
        "drift": _drift_section(snap.get("drift") or []),
    }
    ops = _ops_section(status, status.get("operations"), now)
    body = (
        "".join(sections.values())
        + _models_section(models, snap.get("results") or [], _objectives(slos))
        + ops
    )
    evaluated = snap.get("evaluated_at") or "not yet evaluated"
    ready = _badge("ok", "ready") if status.get("ready") else _badge("bad", "not ready")
    sub = (
        f"{_worst(overview)}evaluated {_e(evaluated)} · {ready} · refreshes every {refresh_s}s"
        if refresh_s
        else ""
    )
    foot = (
        "Numbers are those of <code>/api/v1/status</code>, <code>/api/v1/comparisons</code> and "
        "<code>/api/v1/slos</code>; intervals are at the configured confidence level. "
        f"Rendered {_e(_clock(int(now * 1000)))} UTC."
    )
    has = {k: bool(v) for k, v in sections.items()} | {"operations": bool(ops)}
    nav = _nav(models, has)
    return _page("model-monitor", sub, body, nav, refresh_s, foot)


def render_report(report: Json) -> bytes:
    """The HTML report from a JSON report — the replay's (``monitor replay --report``) or
    a scheduled one (``[[schedules]]`` job ``report``): the same views, no refresh, one
    self-contained file."""
    models = report.get("models") or []
    overview = report.get("overview")
    slos = {"slos": report["slos"]} if "slos" in report else None
    sections = {
        "overview": _overview_section(overview),
        "slos": _slo_section(slos, (overview or {}).get("slos_configured")),
        "timeline": _timeline_section(report.get("slo_timeline") or [], report.get("all_window")),
        "comparisons": _comparisons_section(
            report.get("comparisons") or [], report.get("comparison_history") or {}
        ),
        "trends": _trends_section(
            models,
            {"series": report.get("history") or [], "timeline": report.get("timeline")},
            slos,
        ),
        "drift": _drift_section(report.get("drift") or []),
    }
    ops = _ops_section(None, report.get("operations"), time.time())
    body = (
        "".join(sections.values())
        + _models_section(models, report.get("results") or [], _objectives(slos))
        + ops
    )
    inputs = report.get("inputs") or {}
    period = report.get("period")  # a scheduled report ([[schedules]] job "report")
    source = (
        f"{_e(period['label'])}: {_e(period['start'])} – {_e(period['end'])}"
        if period
        else f"replay of {_e(inputs.get('predictions', '?'))} + {_e(inputs.get('labels', '?'))}"
        f" · data end {_e(report.get('data_end') or '—')}"
    )
    sub = f"{_worst(overview)}{source}"
    foot = (
        "Numbers are those of the scheduled report's JSON file beside this one."
        if period
        else "Numbers are those of the replay's JSON report (<code>monitor replay --report</code>)."
    )
    has = {k: bool(v) for k, v in sections.items()} | {"operations": bool(ops)}
    nav = _nav(models, has)
    title = "model-monitor report" if period else "model-monitor replay report"
    return _page(title, sub, body, nav, None, foot)
