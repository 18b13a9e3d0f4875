"""The Grafana dashboard against the real thing: every panel query returns data.

A tansu broker, the daemon as a subprocess (a binary model with slices, drift against a
reference and a canary comparison, a multiclass, a regression and a ranking model, an SLO
that fires
with a webhook receiver, 1 s evaluation) and a real
Prometheus scraping it every second. Traffic keeps flowing while the checks run, so rate()
panels see increases. Then each PromQL target of deploy/grafana/model-monitor.json, with
the dashboard variables substituted by values Prometheus really has (found the way
Grafana's label_values() finds them) and $__rate_interval / $__range by durations, must
return at least one series with a finite value.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import orjson
import pytest

from monitor.config import BINARY_METRICS
from monitor.drift.reference import ReferenceProfile
from monitor.localbroker import LocalBroker
from monitor.synthetic import binary_traffic

from .daemon_harness import DaemonProcess, base_config, encode, make_producer, produce, write_config
from .prometheus_harness import PrometheusServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy/grafana/model-monitor.json"
WINDOWS = ({"size": "1h"}, {"size": "30m", "delay": "5m"})
DURATIONS = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m"}


class _Webhook(BaseHTTPRequestHandler):
    """An alert receiver that accepts everything (counts what it got)."""

    received: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).received.append(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[str]:
    _Webhook.received.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Webhook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/alerts"
    finally:
        server.shutdown()
        server.server_close()


def _dashboard_targets() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for p in [panel, *panel.get("panels", [])]:
            out += [(p["title"], t["expr"]) for t in p.get("targets", [])]
    return out


def _variable_queries() -> dict[str, str]:
    dash = json.loads(DASHBOARD.read_text())
    return {
        v["name"]: v["query"]["query"] for v in dash["templating"]["list"] if v["type"] == "query"
    }


def _variable_regex(name: str) -> str:
    """A variable's value filter (Grafana: /regex/, the first group is the value)."""
    dash = json.loads(DASHBOARD.read_text())
    (var,) = [v for v in dash["templating"]["list"] if v["name"] == name]
    return str(var.get("regex", "")).strip("/")


def _substitute(expr: str, values: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in values, f"no value for ${name} in {expr}"
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def _label_values(prom: PrometheusServer, query: str, values: dict[str, str]) -> list[str]:
    """Grafana's label_values(selector, label) through Prometheus's series API."""
    m = re.fullmatch(r"label_values\((.+), (\w+)\)", _substitute(query, values))
    assert m, query
    selector, label = m.groups()
    series = prom.api("series", **{"match[]": selector})
    return sorted({s[label] for s in series if label in s})


def _reference(path: Path) -> Path:
    rng = np.random.default_rng(8)
    profile = ReferenceProfile.from_columns(
        numeric={"amount": rng.lognormal(3, 1, 5000), "x": rng.normal(0, 1, 5000)},
        categorical={"country": list(rng.choice(["US", "DE", "BR", "IN"], 5000))},
        score=rng.random(5000),
        labels=[str(v) for v in (rng.random(5000) < 0.2).astype(int)],
    )
    path.write_bytes(orjson.dumps(profile.to_json()))
    return path


def _history(now_ms: int) -> list[tuple[str, tuple[bytes | None, bytes | None]]]:
    """20 minutes of past traffic: v1 (4/5) and a worse canary v2 (1/5), labels, and
    rejected records."""
    start = now_ms - 20 * 60_000
    v1 = binary_traffic(2000, seed=3, start_ms=start, rate_per_s=1.75, delay_mean_s=30.0)
    v2 = binary_traffic(500, seed=4, start_ms=start, rate_per_s=0.44, version="v2",
                        id_prefix="c", separation=1.0)  # fmt: skip
    preds = v1.predictions + v2.predictions
    labels = [lab for lab in v1.labels + v2.labels if int(lab["ts"]) < now_ms]  # type: ignore[call-overload]
    msgs = [("predictions", (str(p["id"]).encode(), encode(p))) for p in preds]
    msgs += [("labels", (str(lab["id"]).encode(), encode(lab))) for lab in labels]
    msgs += [("predictions", (b"k", b"not json")), ("labels", (b"k", b'{"id": 1}'))]
    rng = np.random.default_rng(5)
    for i in range(400):  # the multiclass and regression models' rows
        ts = start + i * 3000
        msgs += [(topic, (rec["id"].encode(), encode(rec)))
                 for topic, rec in _task_records(rng, f"h{i}", ts)]  # fmt: skip
    return msgs


def _task_records(rng: np.random.Generator, pid: str, ts: int) -> list[tuple[str, dict[str, Any]]]:
    """One multiclass (``triage``), one regression (``eta``) and one ranking (``search``)
    prediction, each with its label 2 s later in event time."""
    truth = int(rng.integers(0, 3))
    p = rng.dirichlet([1.0, 1.0, 1.0]) * 0.5
    p[truth] += 0.5
    target = float(rng.gamma(4.0, 5.0))
    guess = target + float(rng.normal(0, 3.0))
    return [
        ("predictions", {"id": f"m{pid}", "ts": ts, "model": "triage", "version": "v1",
                         "scores": {c: round(float(v), 4) for c, v in zip("abc", p, strict=True)}}),
        ("labels", {"id": f"m{pid}", "ts": ts + 2000, "label": "abc"[truth]}),
        ("predictions", {"id": f"r{pid}", "ts": ts, "model": "eta", "version": "v1",
                         "prediction": round(guess, 3), "lower": round(guess - 5, 3),
                         "upper": round(guess + 5, 3)}),
        ("labels", {"id": f"r{pid}", "ts": ts + 2000, "label": round(target, 3)}),
        ("predictions", {"id": f"s{pid}", "ts": ts, "model": "search", "version": "v1",
                         "items": [{"item": f"d{j}", "score": round(float(x), 2)}
                                   for j, x in enumerate(rng.random(6))]}),
        ("labels", {"id": f"s{pid}", "ts": ts + 2000,
                    "relevance": {f"d{j}": int(rng.integers(0, 3)) for j in range(3)}}),
    ]  # fmt: skip


class _LiveTraffic(threading.Thread):
    """Predictions with their labels (2 s later in event time) and one rejected record,
    every half second, until stopped: rate() panels need increases while Prometheus
    scrapes."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.stop_event = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        producer = make_producer(self.bootstrap)
        rng = np.random.default_rng(11)
        try:
            for tick in itertools.count():
                if self.stop_event.is_set():
                    break
                now = int(time.time() * 1000)
                for i in range(10):
                    version = "v2" if i % 5 == 0 else "v1"
                    y = int(rng.random() < 0.2)
                    score = float(np.clip(rng.normal(0.7 if y else 0.3, 0.2), 0.0, 1.0))
                    country = ["US", "DE", "BR", "IN"][i % 4]
                    pid = f"live-{tick}-{i}"
                    pred = {"id": pid, "ts": now, "model": "fraud", "version": version,
                            "score": round(score, 4),
                            "features": {"amount": float(rng.lognormal(3, 1)),
                                         "x": float(rng.normal()), "country": country},
                            "segments": {"country": country}}  # fmt: skip
                    producer.send("predictions", key=pid.encode(), value=encode(pred))
                    label = {"id": pid, "ts": now + 2000, "label": y}
                    producer.send("labels", key=pid.encode(), value=encode(label))
                for topic, rec in _task_records(rng, f"live-{tick}", now):
                    producer.send(topic, key=rec["id"].encode(), value=encode(rec))
                producer.send("predictions", key=b"bad", value=b"{broken")
                producer.flush(timeout=10)
                self.sent += 25
                self.stop_event.wait(0.5)
        except BaseException as err:  # reported by the test, not swallowed
            self.error = err
        finally:
            producer.close(timeout=5)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=15)


def test_every_dashboard_query_returns_data(
    broker: LocalBroker, tmp_path: Path, webhook: str
) -> None:
    started = time.monotonic()
    broker.create_topics(["predictions", "labels"])
    config = base_config(
        broker.bootstrap,
        tmp_path / "state",
        windows=WINDOWS,
        state={"checkpoint_interval": "1s"},
        model={
            "drift": {"reference": str(_reference(tmp_path / "baseline.json")),
                      "min_samples": 100},
            "slices": [{"dimensions": ["country"], "top_k": 5, "min_samples": 20}],
            "estimation": {"max_ece": 0.2},
            "metrics": list(BINARY_METRICS),  # the catalog and the opt-in credit statistics
        },
    )  # fmt: skip
    config["models"] += [
        {"name": "triage", "task": "multiclass", "classes": ["a", "b", "c"],
         "windows": list(WINDOWS), "estimation": {"max_ece": 0.2}},
        {"name": "eta", "task": "regression", "windows": list(WINDOWS), "mase_scale": 2.0},
        {"name": "search", "task": "ranking", "k": [5, 10], "windows": list(WINDOWS)},
    ]  # fmt: skip
    config["comparisons"] = [
        {"name": "canary", "model": "fraud", "control": "v1", "treatment": "v2",
         "min_samples": 50, "traffic_split": [4, 1]}
    ]  # fmt: skip
    # An SLO that is breached (recall cannot reach 0.99 here), delivered to a webhook.
    config["slos"] = [
        {"name": "fraud-recall", "model": "fraud", "metric": "recall", "window": "1h",
         "objective": 0.99, "direction": "above", "confidence": "point", "min_samples": 50}
    ]  # fmt: skip
    config["alerting"] = {"webhook_url": webhook, "resend_interval": "2s"}
    daemon = DaemonProcess(write_config(tmp_path / "monitor.toml", config), tmp_path / "d.log")
    prom: PrometheusServer | None = None
    live = _LiveTraffic(broker.bootstrap)
    try:
        daemon.start()
        daemon.wait_ready()
        assert daemon.url is not None
        prom = PrometheusServer(tmp_path / "prometheus", [daemon.url]).start()
        history = _history(int(time.time() * 1000))
        produce(broker.bootstrap, history)
        live.start()
        prom.wait_for_target_up(timeout=30)
        context = lambda: f"{daemon.log_tail(20)}\n{prom.log_tail(20)}"  # noqa: E731

        # The variables, as Grafana's label_values() would list them.
        queries = _variable_queries()
        assert set(queries) >= {
            "model",
            "version",
            "window",
            "slice",
            "comparison",
            "mc_model",
            "reg_model",
            "rank_model",
            "k",
            "job",
            "instance",
        }
        values: dict[str, str] = {"datasource": "prometheus", **DURATIONS}
        prom.wait_until(
            lambda: len(_label_values(prom, queries["version"], {"model": "fraud"})) == 2,
            40,
            lambda: (
                f"versions: {_label_values(prom, queries['version'], {'model': 'fraud'})}"
                + context()
            ),
        )
        models = _label_values(prom, queries["model"], values)
        assert models == ["eta", "fraud", "search", "triage"], models
        values["model"] = "fraud"
        assert _label_values(prom, queries["mc_model"], values) == ["triage"]
        assert _label_values(prom, queries["reg_model"], values) == ["eta"]
        assert _label_values(prom, queries["rank_model"], values) == ["search"]
        values.update(mc_model="triage", reg_model="eta", rank_model="search")
        pattern = _variable_regex("k")
        cutoffs = sorted(
            int(m.group(1))
            for v in _label_values(prom, queries["k"], values)
            if (m := re.fullmatch(pattern, v))
        )
        assert cutoffs == [5, 10], cutoffs
        values["k"] = str(cutoffs[0])
        (job,) = _label_values(prom, queries["job"], values)
        values["job"] = job
        (instance,) = _label_values(prom, queries["instance"], values)
        values["instance"] = instance
        versions = _label_values(prom, queries["version"], values)
        assert versions == ["v1", "v2"], versions
        windows = _label_values(prom, queries["window"], values)
        assert windows == sorted(["1h", "30m_delay5m"]), windows
        comparisons = _label_values(prom, queries["comparison"], values)
        assert comparisons == ["canary"], comparisons

        # Every combination a user can select: each version alone and the "All" regex,
        # each window, the overall slice and a real slice.
        combos: list[dict[str, str]] = []
        for window in windows:
            values["window"] = window
            slices = _label_values(prom, queries["slice"], values)
            assert "all" in slices and any(s.startswith("country=") for s in slices), slices
            chosen = ["all", next(s for s in slices if s.startswith("country="))]
            for version, slice_ in itertools.product([*versions, ".*"], chosen):
                combos.append({**values, "window": window, "version": version,
                               "slice": slice_, "comparison": "canary"})  # fmt: skip
        exprs = {
            _substitute(expr, combo): title
            for combo in combos
            for title, expr in _dashboard_targets()
        }
        assert any("mlmon_slo_breached" in e for e in exprs), "the SLO panel is missing"

        def finite(expr: str) -> bool:
            return any(math.isfinite(float(s["value"][1])) for s in prom.query(expr))

        estimate_bound = re.compile(r"^mlmon_estimated_\w+_ci_(?:lower|upper)(\{[^}]*\})$")

        def withheld_by_rule(expr: str) -> bool:
            """An estimate's interval is withheld while the estimate is not reliable (too few
            labelled rows to recalibrate it; docs/statistics.md): then the panel's bound is
            rightly empty, as long as the reliability series says so and the point
            estimate itself is there."""
            drift = re.match(r'^mlmon_drift_\w+\{.*version=~"([^"]*)".*window="([^"]*)"', expr)
            if drift is not None:
                # drift tests windows on a grid in time (docs/drift.md): until one whole
                # window of the version's traffic has passed none is tested, and a window
                # with too few of the version's rows tests no feature
                code, body = daemon.get("/api/v1/drift")
                version, window = re.compile(drift.group(1)), drift.group(2)
                return code == 200 and not any(
                    f["p_adjusted"] is not None
                    for d in json.loads(body)["drift"]
                    if d["window"] == window and version.fullmatch(d["version"])
                    for f in d["features"]
                )
            m = estimate_bound.match(expr)
            if m is None:
                return False
            point = expr.split("_ci_")[0] + m.group(1)
            reliable = prom.query(f"mlmon_estimate_reliable{m.group(1)}")
            return (
                finite(point)
                and bool(reliable)
                and all(float(s["value"][1]) == 0 for s in reliable)
            )

        # Some panels need a few scrapes (rates) or a few evaluations (drift, SLO firing):
        # wait for all of them together, then report every one that is still empty.
        missing: list[str] = list(exprs)

        def all_have_data() -> bool:
            nonlocal missing
            assert live.error is None, f"live traffic failed: {live.error!r}"
            missing = [e for e in missing if not finite(e) and not withheld_by_rule(e)]
            return not missing

        prom.wait_until(
            all_have_data,
            45,
            lambda: (
                "panel queries without a finite series:\n"
                + "\n".join(f"  [{exprs[e]}] {e}" for e in missing)
                + "\n"
                + context()
            ),
            interval=1.0,
        )
        # What the panels show is the daemon's own numbers, not just something.
        m = daemon.scrape()
        for version in versions:
            sel = f'model="fraud",version="{version}",window="1h",slice="all"'
            (acc,) = prom.query(f"mlmon_accuracy{{{sel}}}")
            lower = float(prom.query(f"mlmon_accuracy_ci_lower{{{sel}}}")[0]["value"][1])
            upper = float(prom.query(f"mlmon_accuracy_ci_upper{{{sel}}}")[0]["value"][1])
            assert 0 <= lower <= float(acc["value"][1]) <= upper <= 1
            assert m.get("mlmon_window_samples", model="fraud", version=version, window="1h",
                         slice="all")  # fmt: skip
        # multiclass CBPE in the daemon: the top-label estimate beside the realized accuracy
        est = m.find("mlmon_estimated_accuracy", model="triage", window="1h", slice="all")
        assert est and all(0 < s.value < 1 for s in est), est
        assert m.find("mlmon_estimate_reliable", model="triage", window="1h", slice="all")
        breached = prom.query('mlmon_slo_breached{slo="fraud-recall"}')
        assert breached and max(float(s["value"][1]) for s in breached) == 1.0, breached
        assert _Webhook.received, "the breached SLO was never delivered to the webhook"
        assert len(exprs) >= 50
        assert time.monotonic() - started < 90, "dashboard acceptance test got too slow"
    finally:
        live.stop()
        if prom is not None:
            prom.stop()
        daemon.close()
