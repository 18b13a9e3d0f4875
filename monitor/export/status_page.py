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


def _metrics_table(r: Json) -> str:
    base = _key(r["model"], r["version"], r["window"], r["slice"])
    rows = []
    for name, m in r["metrics"].items():
        k = _key("metric", base, name)
        ci = "—"
        if m["ci_lower"] is not None and m["ci_upper"] is not None:
            ci = f"[{_fmt(m['ci_lower'])}, {_fmt(m['ci_upper'])}]"
        rows.append(
            f"<tr><td>{_e(name)}</td>{_num(k + '|value', m['value'])}"
            f'<td class="n" data-k="{_e(k)}|ci" data-v="{_e(_pair(m))}">{_e(ci)}</td>'
            f'{_num(k + "|n", m["n"])}<td class="muted">{_e(m["interval_method"])}</td></tr>'
        )
    return _table(("metric", "value", "interval", "n", "interval method"), rows, (1, 2, 3))


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


def _slice_table(task: str, slices: Sequence[Json]) -> str:
    """Per-slice rows, the worst slice (by the task's key metric) first."""
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
            cells.append(_num(k, m["value"], _fmt(m["value"]) + ci))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    title = "Slices, worst first" + (f" (by {key[0]})" if key else "")
    head = ("slice", "labeled", "coverage", *cols)
    return f"<h4>{_e(title)}</h4>" + _table(head, rows, range(1, len(head)))


def _window_card(task: str, window: str, results: Sequence[Json]) -> str:
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
        body += (
            f'<div class="grid"><div>{_metrics_table(overall)}{note}{_confusion(overall)}</div>'
            f"{chart}</div>"
        )
    body += _slice_table(task, slices)
    return f'<div class="card"><h4>window {_e(window)}</h4>{facts}{body}</div>'


def _models_section(models: Sequence[Json], results: Sequence[Json]) -> str:
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
                parts.append(_window_card(m["task"], w, wr))
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
        cards.append(
            f'<div class="card"><h4>{_e(d["model"])} / {_e(d["version"])} / window '
            f"{_e(d['window'])} {flag}</h4>"
            f'<div class="facts"><span>{_e(d["start"])} → {_e(d["end"])}</span>'
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


def _slo_section(slos: Json | None) -> str:
    if slos is None:
        return ""
    items = slos.get("slos") or []
    if not items:
        return (
            '<section id="slos"><h2>SLOs</h2><p class="empty">No SLO instances yet.</p></section>'
        )
    rows = []
    for s in items:
        k = _key("slo", s["name"], s["version"], s["slice"])
        interval = s.get("interval") or {}
        rows.append(
            f"<tr><td>{_e(s['name'])}</td><td>{_e(s['model'])} / {_e(s['version'])} / "
            f"{_e(s['window'])} / {_e(s['slice'])}</td><td>{_e(s['metric'])} "
            f"{_e(s['direction'])} {_fmt(s['objective'])}</td>{_num(k + '|value', s['value'])}"
            f'<td class="n">[{_fmt(interval.get("lower"))}, {_fmt(interval.get("upper"))}]</td>'
            f'{_num(k + "|n", s["n"])}<td data-k="{_e(k)}|state" data-v="{_e(s["state"])}">'
            f'{_badge(s["state"])}</td><td class="reason">{_e(s.get("reason") or "")}</td></tr>'
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
    nav = [("operations", "Operations")] if has.get("operations") else []
    nav += [
        (s, t)
        for s, t in (("slos", "SLOs"), ("comparisons", "Comparisons"), ("drift", "Drift"))
        if has.get(s)
    ]
    nav += [(f"model-{m['name']}", m["name"]) for m in models]
    return nav


def render_status_page(
    status: Json,
    comparisons: Json,
    slos: Json | None,
    history: Mapping[str, Sequence[Json]],
    models: Sequence[Json],
    refresh_s: int | None = 10,
    now: float | None = None,
) -> bytes:
    """The daemon's page from what its API serves: ``status`` = /api/v1/status,
    ``comparisons`` = /api/v1/comparisons, ``slos`` = /api/v1/slos, ``history`` from
    ``report.history_json`` and ``models`` from ``report.layout_json``."""
    now = time.time() if now is None else now
    snap = status.get("snapshot") or {}
    comps = comparisons.get("comparisons") or []
    sections = {
        "operations": _ops_section(status, status.get("operations"), now),
        "slos": _slo_section(slos),
        "comparisons": _comparisons_section(comps, history),
        "drift": _drift_section(snap.get("drift") or []),
    }
    body = "".join(sections.values()) + _models_section(models, snap.get("results") or [])
    evaluated = snap.get("evaluated_at") or "not yet evaluated"
    ready = _badge("ok", "ready") if status.get("ready") else _badge("bad", "not ready")
    sub = f"evaluated {_e(evaluated)} · {ready} · refreshes every {refresh_s}s" if refresh_s else ""
    foot = (
        "Numbers are those of <code>/api/v1/status</code>, <code>/api/v1/comparisons</code> and "
        "<code>/api/v1/slos</code>; intervals are at the configured confidence level. "
        f"Rendered {_e(_clock(int(now * 1000)))} UTC."
    )
    nav = _nav(models, {k: bool(v) for k, v in sections.items()})
    return _page("model-monitor", sub, body, nav, refresh_s, foot)


def render_report(report: Json) -> bytes:
    """The replay's HTML report from its JSON report (``monitor replay --report``): the
    same views, no refresh, one self-contained file."""
    models = report.get("models") or []
    sections = {
        "operations": _ops_section(None, report.get("operations"), time.time()),
        "comparisons": _comparisons_section(
            report.get("comparisons") or [], report.get("comparison_history") or {}
        ),
        "drift": _drift_section(report.get("drift") or []),
    }
    body = "".join(sections.values()) + _models_section(models, report.get("results") or [])
    inputs = report.get("inputs") or {}
    period = report.get("period")  # a scheduled report ([[schedules]] job "report")
    sub = (
        f"{_e(period['label'])}: {_e(period['start'])} – {_e(period['end'])}"
        if period
        else f"replay of {_e(inputs.get('predictions', '?'))} + {_e(inputs.get('labels', '?'))}"
        f" · data end {_e(report.get('data_end') or '—')}"
    )
    foot = (
        "Numbers are those of the scheduled report's JSON file beside this one."
        if period
        else "Numbers are those of the replay's JSON report (<code>monitor replay --report</code>)."
    )
    nav = _nav(models, {k: bool(v) for k, v in sections.items()})
    title = "model-monitor report" if period else "model-monitor replay report"
    return _page(title, sub, body, nav, None, foot)
