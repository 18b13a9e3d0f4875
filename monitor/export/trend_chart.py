"""A metric over time as inline SVG: its history points with their interval band, the SLO
objective, firing spans, drift detections, comparison decisions, the first-seen time of
each version (deploy markers) and, under it, each point's label coverage (lighter while
the point is provisional: labels are still expected).

Templating over the JSON of ``/api/v1/history`` (``report.series_json``) and the
timeline (``report.timeline_json``); the shape follows NannyML's per-chunk performance
plot (value, band, threshold, alerts), with the time axis of the tiers' rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

__all__ = ["parse_ms", "trend_svg"]

Json = Mapping[str, Any]

W, H, PAD_L, PAD_R, TOP, PLOT, GAP, STRIP = 600, 262, 52, 14, 26, 150, 14, 34


def parse_ms(text: str) -> int:
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _e(x: Any) -> str:
    return escape(str(x), quote=True)


def _clock(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%m-%d %H:%M")


def trend_svg(
    series: Json,
    objectives: Sequence[tuple[str, float]] = (),
    spans: Sequence[Json] = (),
    deploys: Sequence[tuple[str, int]] = (),
) -> str:
    """One chart; ``objectives``: (SLO name, objective) lines; ``spans``: timeline spans
    of this model version; ``deploys``: (version, first seen ms) markers."""
    points = [(parse_ms(p["start"]), parse_ms(p["end"]), p) for p in series.get("points") or []]
    label = f"{series['metric']} of {series['model']} {series['version']} over time"
    if not points:
        return f'<p class="empty">No history of {_e(series["metric"])} yet.</p>'
    t0, t1 = points[0][0], points[-1][1]
    span_t = max(t1 - t0, 1)
    vals = [v for _, _, p in points for v in (p["value"], p["lower"], p["upper"]) if v is not None]
    vals += [o for _, o in objectives]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.05, hi + 0.05
    pad = 0.06 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    strip_top = TOP + PLOT + GAP

    def x(t: float) -> float:
        return PAD_L + (W - PAD_L - PAD_R) * (min(max(t, t0), t1) - t0) / span_t

    def y(v: float) -> float:
        return TOP + PLOT * (hi - v) / (hi - lo)

    key = "|".join((series["model"], series["version"], series["slice"], series["metric"]))
    out = [
        f'<svg role="img" aria-label="{_e(label)}" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" xmlns="http://www.w3.org/2000/svg" data-trend="{_e(key)}">'
        f"<title>{_e(label)}</title>",
        f'<rect x="{PAD_L}" y="{TOP}" width="{W - PAD_L - PAD_R}" height="{PLOT}" fill="#fff" '
        'stroke="#d9dee5"/>',
        f'<text x="{PAD_L}" y="{TOP - 8}" style="font-weight:600;fill:#1d2430">'
        f"{_e(series['metric'])} · slice {_e(series['slice'])}</text>",
    ]
    for s in spans:  # problem spans behind the data
        a = parse_ms(s["start"])
        b = parse_ms(s["end"]) if s.get("end") else t1
        if b < t0 or a > t1:
            continue
        kind = s["kind"]
        color = {"slo": "#cf222e", "drift": "#bf8700", "comparison": "#8250df"}.get(kind, "#888")
        title = f"{kind} {s['name']}: {s.get('detail') or ''} from {_clock(a)}"
        if kind == "comparison":
            right = x(a) > W - PAD_R - 80  # near the right edge: the label on the left
            tx, anchor = (x(a) - 3, "end") if right else (x(a) + 3, "start")
            out.append(
                f'<line class="decision" x1="{x(a):.1f}" x2="{x(a):.1f}" y1="{TOP}" '
                f'y2="{TOP + PLOT}" stroke="{color}" stroke-width="2"><title>{_e(title)}'
                f'</title></line><text x="{tx:.1f}" y="{TOP + 22}" fill="{color}" '
                f'text-anchor="{anchor}">{_e(s.get("detail"))}</text>'
            )
            continue
        band = (TOP, PLOT) if kind == "slo" else (TOP, 8)
        out.append(
            f'<rect class="{_e(kind)}-span" x="{x(a):.1f}" y="{band[0]}" '
            f'width="{max(x(b) - x(a), 2):.1f}" height="{band[1]}" fill="{color}" '
            f'fill-opacity="{0.12 if kind == "slo" else 0.6}"><title>{_e(title)}</title></rect>'
        )
    run: list[tuple[float, float, float]] = []
    bands = []
    for a, b, p in [*points, (0, 0, {"lower": None, "upper": None})]:
        if p["lower"] is not None and p["upper"] is not None:
            run.append(((x(a) + x(b)) / 2, y(p["upper"]), y(p["lower"])))
            continue
        if len(run) >= 2:
            upper = " ".join(f"{px:.1f},{u:.1f}" for px, u, _ in run)
            lower = " ".join(f"{px:.1f},{lw:.1f}" for px, _, lw in reversed(run))
            bands.append(f'<polygon class="band" points="{upper} {lower}" fill="#cfe2ff" '
                         'stroke="none"/>')  # fmt: skip
        run = []
    out += bands
    for name, objective in objectives:
        out.append(
            f'<line class="objective" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(objective):.1f}" '
            f'y2="{y(objective):.1f}" stroke="#cf222e" stroke-dasharray="6 3"/>'
            f'<text x="{W - PAD_R - 2}" y="{y(objective) - 3:.1f}" text-anchor="end" '
            f'fill="#cf222e">{_e(name)} {objective:g}</text>'
        )
    line = [
        f"{(x(a) + x(b)) / 2:.1f},{y(p['value']):.1f}"
        for a, b, p in points
        if p["value"] is not None
    ]
    if line:
        out.append(
            f'<polyline class="value" points="{" ".join(line)}" fill="none" stroke="#0969da" '
            'stroke-width="1.8"/>'
        )
    for version, at in deploys:
        if t0 < at <= t1:
            out.append(
                f'<line class="deploy" x1="{x(at):.1f}" x2="{x(at):.1f}" y1="{TOP}" '
                f'y2="{strip_top + STRIP}" stroke="#57606a" stroke-dasharray="2 2"/>'
                f'<text x="{x(at) + 3:.1f}" y="{TOP + PLOT - 4}">{_e(version)} first seen</text>'
            )
    # label coverage under the chart: a bar per point, hatched while provisional
    out.append(
        f'<rect x="{PAD_L}" y="{strip_top}" width="{W - PAD_L - PAD_R}" height="{STRIP}" '
        'fill="#fff" stroke="#d9dee5"/>'
        f'<text x="{PAD_L - 4}" y="{strip_top + STRIP / 2 + 4}" text-anchor="end">cover.</text>'
    )
    for a, b, p in points:
        cov = p.get("label_coverage")
        if cov is None:
            continue
        h = STRIP * min(max(cov, 0.0), 1.0)
        prov = bool(p.get("provisional"))
        look = (
            'fill="#cfe2ff" stroke="#0969da" stroke-dasharray="2 1"' if prov else 'fill="#0969da"'
        )
        out.append(
            f'<rect class="coverage{" provisional" if prov else ""}" '
            f'x="{x(a):.1f}" y="{strip_top + STRIP - h:.1f}" '
            f'width="{max(x(b) - x(a) - 0.5, 0.8):.1f}" height="{h:.1f}" {look} '
            f'fill-opacity="0.7"><title>{_clock(a)}: coverage {100 * cov:.0f}%'
            f"{' (provisional)' if p.get('provisional') else ''}</title></rect>"
        )
    for v in (lo + pad, (lo + hi) / 2, hi - pad):
        out.append(f'<text x="{PAD_L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    base = strip_top + STRIP + 14
    for t, anchor in ((t0, "start"), ((t0 + t1) / 2, "middle"), (t1, "end")):
        out.append(f'<text x="{x(t):.1f}" y="{base}" text-anchor="{anchor}">{_clock(t)}</text>')
    out.append("</svg>")
    return "".join(out)
