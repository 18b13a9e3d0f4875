"""[[schedules]] with the real daemon, its wall clock set by libfaketime (the monotonic
clock untouched, as a real clock step or a restart days later would leave it).

- a report job at its cron time writes the report once; a restart at the scheduled minute
  does not write it again; after downtime within misfire_grace it catches up once, after
  downtime beyond it the run is counted missed and nothing is written;
- rotate_reference swaps the drift reference only after validation (a schedule demanding
  more samples than the period holds is rejected, the reference unchanged), and drift
  results then name the new reference's period, across a restart too;
- with two instances in partitioned mode exactly one (the exporter-lease holder) runs
  each job at each fire time.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.drift.reference import ReferenceProfile
from monitor.localbroker import LocalBroker

from .daemon_harness import DaemonProcess, base_config, encode, produce, wait_until, write_config
from .test_alerting_e2e import Hook

pytestmark = pytest.mark.integration

GRACE = "10m"


def _day() -> datetime:
    """07:00 UTC of a day well after today (the daemon's clock is moved there)."""
    today = datetime.now(UTC).replace(hour=7, minute=0, second=0, microsecond=0)
    return today + timedelta(days=3)


def _clock(libfaketime: str, at: datetime) -> dict[str, str]:
    """The environment that starts the daemon's wall clock at ``at`` (then it runs)."""
    offset = round(at.timestamp() - time.time())
    return {
        "LD_PRELOAD": libfaketime,
        "FAKETIME": f"{offset:+d}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def _status(d: DaemonProcess) -> dict[str, Any]:
    code, body = d.get("/api/v1/status")
    assert code in (200, 503), body[:300]
    return json.loads(body)


def _schedule(d: DaemonProcess, name: str) -> dict[str, Any]:
    (found,) = [s for s in _status(d)["schedules"] if s["name"] == name]
    return found


def _runs(d: DaemonProcess, job: str) -> dict[str, float]:
    return d.scrape().by_label("mlmon_schedule_runs_total", "outcome", job=job)


def _pairs(n: int, start_ms: int, span_ms: int, x_mean: float, seed: int, prefix: str) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        pid = f"{prefix}{i}"
        x = float(rng.normal(x_mean, 1.0))
        y = int(rng.random() < 0.3)
        ts = start_ms + i * span_ms // n
        pred = {"id": pid, "ts": ts, "model": "fraud", "version": "v1",
                "score": round(float(1 / (1 + np.exp(-(2 * y - 1 + 0.3 * x)))), 4),
                "features": {"x": round(x, 4)}}  # fmt: skip
        out.append(("predictions", (pid.encode(), encode(pred))))
        out.append(("labels", (pid.encode(), encode({"id": pid, "ts": ts + 500, "label": y}))))
    return out


def _reports(directory: Path) -> list[Path]:
    return sorted(directory.glob("daily-*.json"))


def test_report_runs_once_per_fire_time_across_restarts_and_downtime(
    broker: LocalBroker, tmp_path: Path, libfaketime: str
) -> None:
    broker.create_topics(["predictions", "labels"])
    reports = tmp_path / "reports"
    cfg = base_config(broker.bootstrap, tmp_path / "state", windows=({"size": "1h"},))
    cfg["schedules"] = [
        {"name": "daily", "job": "report", "cron": "0 7 * * *", "timezone": "UTC",
         "misfire_grace": GRACE, "period": "1d", "directory": str(reports), "keep": 10},
    ]  # fmt: skip
    path = write_config(tmp_path / "monitor.toml", cfg)
    day = _day()
    daemon = DaemonProcess(
        path, tmp_path / "d.log", env=_clock(libfaketime, day - timedelta(seconds=60))
    )
    try:
        # 1. started a minute before 07:00 with traffic of the last hour: one report at 07:00
        daemon.start()
        daemon.wait_ready()
        assert _schedule(daemon, "daily")["next_run"] == day.isoformat(), daemon.log_tail()
        start_ms = int((day - timedelta(minutes=50)).timestamp() * 1000)
        produce(broker.bootstrap, _pairs(300, start_ms, 1_800_000, 0.0, 1, "a"))
        daemon.wait_consumed({"predictions": 300, "labels": 300})
        # the job writes the JSON, then its HTML view: wait for both
        wait_until(lambda: any(p.with_suffix(".html").exists() for p in _reports(reports)),
                   120, daemon.log_tail)  # fmt: skip
        (first,) = _reports(reports)
        report = orjson.loads(first.read_bytes())
        period = {k: datetime.fromisoformat(report["period"][k]) for k in ("start", "end")}
        assert report["period"]["label"] == "last 1d"
        assert period["end"] - period["start"] == timedelta(days=1)
        assert day <= period["end"] < day + timedelta(seconds=30), report["period"]
        (result,) = [r for r in report["results"] if r["slice"] == "all"]
        assert result["window"] == "last_1d" and result["labeled"] == 300, result
        html = first.with_suffix(".html").read_bytes()
        assert html.startswith(b"<!DOCTYPE html>") and b"last 1d: " in html
        wait_until(lambda: _runs(daemon, "daily").get("ok") == 1, 30, daemon.log_tail)
        state = _schedule(daemon, "daily")
        assert state["last_run"] == day.isoformat() and state["last_outcome"] == "ok"
        assert daemon.terminate() == 0

        # 2. restarted within the scheduled minute: the run is not repeated
        daemon.env = _clock(libfaketime, day + timedelta(seconds=20))
        daemon.start()
        daemon.wait_ready()
        state = _schedule(daemon, "daily")
        assert state["last_run"] == day.isoformat(), state
        assert state["next_run"] == (day + timedelta(days=1)).isoformat(), state
        time.sleep(5)  # what a repeat would need: the scheduler starts before readiness
        assert len(_reports(reports)) == 1
        assert _runs(daemon, "daily") == {"ok": 1}  # the count survived the restart
        assert daemon.terminate() == 0

        # 3. down over the next 07:00, back 5 minutes later (< misfire_grace): one catch-up
        daemon.env = _clock(libfaketime, day + timedelta(days=1, minutes=5))
        daemon.start()
        wait_until(lambda: len(_reports(reports)) >= 2, 60, daemon.log_tail)
        wait_until(lambda: _runs(daemon, "daily").get("ok") == 2, 30, daemon.log_tail)
        assert _schedule(daemon, "daily")["last_run"] == (day + timedelta(days=1)).isoformat()
        time.sleep(3)
        assert len(_reports(reports)) == 2  # coalesced: once
        assert daemon.terminate() == 0

        # 4. down over the next one, back 30 minutes late (> misfire_grace): missed
        daemon.env = _clock(libfaketime, day + timedelta(days=2, minutes=30))
        daemon.start()
        wait_until(lambda: _runs(daemon, "daily").get("missed") == 1, 60, daemon.log_tail)
        state = _schedule(daemon, "daily")
        assert state["last_outcome"] == "missed"
        assert state["last_run"] == (day + timedelta(days=2)).isoformat()
        assert state["next_run"] == (day + timedelta(days=3)).isoformat()
        assert len(_reports(reports)) == 2
        assert _runs(daemon, "daily") == {"ok": 2, "missed": 1}
        assert daemon.terminate() == 0
    finally:
        daemon.close()


def _drift(d: DaemonProcess) -> dict[str, Any] | None:
    """The drift result of window 1h, once an evaluation has one."""
    code, body = d.get("/api/v1/drift")
    assert code == 200
    found = [x for x in json.loads(body)["drift"] if x["window"] == "1h"]
    assert len(found) <= 1, found
    return found[0] if found else None


def _drift_of(d: DaemonProcess, samples: int) -> dict[str, Any]:
    """The drift result once it has tested ``samples`` values."""
    seen: list[Any] = []

    def tested() -> bool:
        seen[:] = [_drift(d)]
        return seen[0] is not None and seen[0]["features"][0]["samples"] == samples

    wait_until(tested, 30, lambda: f"{seen}\n{d.log_tail()}")
    return seen[0]


def test_rotate_reference_validates_before_swapping_and_drift_names_the_period(
    broker: LocalBroker, tmp_path: Path, libfaketime: str
) -> None:
    broker.create_topics(["predictions", "labels"])
    rng = np.random.default_rng(5)
    baseline = ReferenceProfile.from_columns(numeric={"x": rng.normal(0.0, 1.0, 20_000)}, bins=20)
    ref_path = tmp_path / "baseline.json"
    ref_path.write_bytes(orjson.dumps(baseline.to_json()))
    state_dir = tmp_path / "state"
    cfg = base_config(broker.bootstrap, state_dir, windows=({"size": "1h"},),
                      model={"drift": {"reference": str(ref_path), "features": ["x"]}})  # fmt: skip
    common = {"job": "rotate_reference", "timezone": "UTC", "misfire_grace": GRACE, "period": "1h"}
    cfg["schedules"] = [
        # demands more than the hour holds: validation keeps the training reference
        {"name": "strict", "cron": "0 7 * * *", "min_samples": 100_000, **common},
        {"name": "rotate", "cron": "1 7 * * *", "min_samples": 500, **common},
    ]
    path = write_config(tmp_path / "monitor.toml", cfg)
    day = _day()
    daemon = DaemonProcess(
        path, tmp_path / "d.log", env=_clock(libfaketime, day - timedelta(seconds=45))
    )
    current = state_dir / "references" / "fraud.json"
    previous = state_dir / "references" / "fraud.previous.json"
    try:
        daemon.start()
        daemon.wait_ready()
        # the last 50 minutes' input has moved by two SDs from the training data
        start_ms = int((day - timedelta(minutes=50)).timestamp() * 1000)
        produce(broker.bootstrap, _pairs(1000, start_ms, 2_400_000, 2.0, 2, "a"))
        daemon.wait_consumed({"predictions": 1000, "labels": 1000})

        wait_until(lambda: _runs(daemon, "strict").get("rejected") == 1, 90, daemon.log_tail)
        assert not current.exists() and not previous.exists()
        assert "fewer than min_samples = 100000" in _schedule(daemon, "strict")["last_detail"]
        # from 07:00 drift tests the whole hour 06:00-07:00 (its grid), which holds the
        # input: drift against the training profile, which is still the reference
        drift = _drift_of(daemon, 1000)
        assert drift["any_detected"] and drift["reference"] is None, drift

        wait_until(lambda: _runs(daemon, "rotate").get("ok") == 1, 90, daemon.log_tail)
        assert previous.read_bytes() == ref_path.read_bytes()  # kept for rollback
        rotated = orjson.loads(current.read_bytes())
        start = day + timedelta(minutes=1) - timedelta(hours=1)

        def named_period() -> bool:
            found = _drift(daemon)
            ref = found and found["reference"]
            return bool(ref) and ref["start"].startswith(start.strftime("%Y-%m-%dT%H:%M"))

        wait_until(named_period, 30, daemon.log_tail)
        drift = _drift_of(daemon, 1000)
        assert drift["reference"]["end"].startswith(
            (day + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M")
        )
        # the hour tested now is the reference's own traffic: no drift
        assert not drift["any_detected"], drift
        assert (
            rotated["n"] == 1000 and rotated["period_ms"][1] - rotated["period_ms"][0] == 3_600_000
        )
        assert daemon.terminate() == 0

        # a restart keeps the rotated reference (from the state dir) and its drift cells
        daemon.env = _clock(libfaketime, day + timedelta(minutes=2))
        daemon.start()
        daemon.wait_ready()
        wait_until(named_period, 30, daemon.log_tail)
        assert not _drift_of(daemon, 1000)["any_detected"]  # cells kept, not reset
        assert _runs(daemon, "rotate") == {"ok": 1}
        assert daemon.terminate() == 0
    finally:
        daemon.close()


def test_partitioned_instances_run_each_job_once(broker: LocalBroker, tmp_path: Path) -> None:
    """Every minute both instances' schedulers fire; only the exporter-lease holder runs
    the report and the summary, the other counts the run skipped."""
    broker.create_topics(["predictions", "labels"], partitions=2)
    hook = Hook()  # records each JSON body posted to it
    daemons = []
    try:
        for name in ("a", "b"):
            cfg = base_config(
                broker.bootstrap,
                tmp_path / f"state-{name}",
                windows=({"size": "1h"},),
                state={"single_instance": False},
            )
            cfg["scale"] = {"mode": "partitioned", "stats_interval": "1s"}
            cfg["schedules"] = [
                {"name": "minutely", "job": "report", "cron": "* * * * *",
                 "directory": str(tmp_path / f"reports-{name}"), "webhook_url": hook.url},
                {"name": "summary", "job": "summary", "cron": "* * * * *", "webhook_url": hook.url},
            ]  # fmt: skip
            d = DaemonProcess(
                write_config(tmp_path / f"{name}.toml", cfg), tmp_path / f"{name}.log"
            )
            daemons.append(d.start())
        for d in daemons:
            d.wait_ready(90)

        def exporters() -> list[int]:
            return [i for i, d in enumerate(daemons) if d.scrape().get("mlmon_exporter") == 1.0]

        wait_until(
            lambda: len(exporters()) == 1, 60, lambda: "\n".join(d.log_tail() for d in daemons)
        )
        # the next fire time after one instance holds the lease, and what it leaves
        fire = max(datetime.fromisoformat(_schedule(d, "minutely")["next_run"]) for d in daemons)

        def handled(d: DaemonProcess, name: str) -> bool:
            last = _schedule(d, name)["last_run"]
            return last is not None and datetime.fromisoformat(last) >= fire

        wait_until(lambda: all(handled(d, n) for d in daemons for n in ("minutely", "summary")),
                   90, lambda: "\n".join(d.log_tail() for d in daemons))  # fmt: skip
        holder = exporters()
        assert len(holder) == 1
        for name in ("minutely", "summary"):
            outcomes = sorted(_schedule(d, name)["last_outcome"] for d in daemons)
            assert outcomes == ["ok", "skipped"], (name, outcomes)
            (ran,) = [
                i for i, d in enumerate(daemons) if _schedule(d, name)["last_outcome"] == "ok"
            ]
            assert ran == holder[0], (name, ran, holder)
        written = [p for n in ("a", "b") for p in (tmp_path / f"reports-{n}").glob("*.json")]
        at = fire.strftime("%Y%m%dT%H%M")
        assert len([p for p in written if at in p.name]) == 1, written
        texts = [p["text"] for p in hook.notifications]
        assert sum("summary" in t and "report" not in t for t in texts) >= 1
        stamp = fire.strftime("%Y-%m-%dT%H:%M")
        assert (
            len(
                [
                    p
                    for p in hook.notifications
                    if "period" in p and p["period"]["end"].startswith(stamp)
                ]
            )
            == 1
        )
    finally:
        for d in daemons:
            d.close()
        hook.close()
