"""10,000 distinct `version` values (a build id per deploy, or an upstream bug) through the
real daemon and a real broker: the live versions stay capped by `max_versions`, the rest
is rejected with its reason and counted, memory stays bounded, the daemon stays ready and
stops cleanly."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker

from .daemon_harness import (
    DaemonProcess,
    base_config,
    encode,
    make_producer,
    peak_rss_mb,
    produce,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N_VERSIONS = 10_000
CAP = 20
GRACE_S = 20


def test_ten_thousand_versions_are_capped_counted_and_harmless(
    broker: LocalBroker, tmp_path: Path
) -> None:
    broker.create_topics(["predictions", "labels"])
    cfg = write_config(
        tmp_path / "monitor.toml",
        base_config(
            broker.bootstrap,
            tmp_path / "state",
            windows=[{"size": "1h"}, {"size": "1d"}],
            model={"max_versions": CAP},
            state={"shutdown_grace": f"{GRACE_S}s", "checkpoint_interval": "2s"},
        ),
    )
    now = int(time.time() * 1000)
    preds = [
        {"id": f"p{i}", "ts": now - 60_000 + i, "model": "fraud", "version": f"build-{i}",
         "score": (i % 97) / 97}
        for i in range(N_VERSIONS)
    ]  # fmt: skip
    labels = [{"id": f"p{i}", "ts": now, "label": i % 2} for i in range(N_VERSIONS)]
    daemon = DaemonProcess(cfg, tmp_path / "daemon.log")
    not_ready: list[tuple[float, int]] = []
    stop = threading.Event()

    def probe() -> None:  # /readyz must stay 200 the whole time
        while not stop.is_set():
            try:
                code, _ = daemon.get("/readyz", timeout=5)
            except OSError:
                code = 0
            if code != 200:
                not_ready.append((time.time(), code))
            stop.wait(0.5)

    try:
        daemon.start()
        daemon.wait_ready()
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        producer = make_producer(broker.bootstrap)
        try:
            msgs = [("predictions", (p["id"].encode(), encode(p))) for p in preds]
            msgs += [("labels", (lab["id"].encode(), encode(lab))) for lab in labels]
            produce(broker.bootstrap, msgs, producer)  # type: ignore[arg-type]
        finally:
            producer.close(timeout=10)
        m, _ = daemon.wait_consumed({"predictions": N_VERSIONS, "labels": N_VERSIONS}, 120)
        time.sleep(3)  # a few more evaluations and a checkpoint with everything in
        stop.set()
        prober.join(10)
        ctx = daemon.log_tail()
        rejected = N_VERSIONS - CAP
        assert m.get("mlmon_versions_rejected_total", model="fraud") == rejected, ctx
        assert m.total("mlmon_invalid_records_total", reason="version_limit") == rejected, ctx
        assert m.total("mlmon_records_total", topic="predictions", outcome="accepted") == CAP
        versions = {s.labels["version"] for s in m.find("mlmon_window_predictions")}
        assert versions == {f"build-{i}" for i in range(CAP)}, ctx
        # the labels of rejected predictions wait as orphans (their prediction never
        # counted); the admitted ones joined
        assert m.total("mlmon_labeled_predictions_total") == CAP, ctx
        assert not not_ready, f"/readyz was not 200 at {not_ready[:5]}\n{ctx}"
        peak = peak_rss_mb(daemon.pid)
        assert peak < 400, f"peak RSS {peak:.0f} MB\n{ctx}"
        print(f"version flood: peak RSS {peak:.0f} MB")
        code = daemon.terminate(timeout=GRACE_S)
        assert code == 0, daemon.log_tail()
        # the log says why, once per doubling — not once per rejected record
        log = (tmp_path / "daemon.log").read_text()
        lines = [x for x in log.splitlines() if "max_versions" in x]
        assert 1 <= len(lines) <= rejected.bit_length() + 1, lines[:20]
    finally:
        stop.set()
        daemon.close()
