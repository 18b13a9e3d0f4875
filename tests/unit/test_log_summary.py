"""kafka-python's slow event-loop warnings become one line a minute (count + worst)."""

from __future__ import annotations

import io
import logging

from monitor.logsetup import SlowTaskSummary


def _slow(elapsed: float) -> str:
    return (
        f"Task <Task fetch state=RUNNING> ran for {elapsed:.3f}s (>0.100s threshold). It is "
        "blocking the event loop -- likely a tight sync loop inside a coroutine. Other "
        "pollers will time out."
    )


def test_first_in_full_then_one_summary_per_interval_then_the_rest_at_exit() -> None:
    now = [0.0]
    summary = SlowTaskSummary(every=60.0, clock=lambda: now[0])
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(summary)
    log = logging.getLogger("kafka.net.selector")
    log.addHandler(handler)
    log.propagate = False
    try:
        for i, elapsed in enumerate([0.12, 0.15, 0.31, 0.11, 0.2, 0.13]):
            now[0] = i * 15.0  # 0, 15, ..., 75 s
            log.warning(_slow(elapsed))
        log.warning("an unrelated kafka warning")
        summary.flush()  # what atexit does
    finally:
        log.removeHandler(handler)
        log.propagate = True
    lines = out.getvalue().splitlines()
    assert len(lines) == 4, lines
    assert lines[0].startswith("Task <Task fetch") and "summarised every 60s" in lines[0]
    # 0.15, 0.31, 0.11, 0.2 counted; the 4th (at 60 s after the first) reports them
    assert lines[1].startswith("kafka-python: 4 more event-loop step(s) over the 0.100s")
    assert "worst 0.310s" in lines[1]
    assert lines[2] == "an unrelated kafka warning"
    assert lines[3].startswith("kafka-python: 1 more") and "worst 0.130s" in lines[3]


def test_other_loggers_and_levels_pass() -> None:
    summary = SlowTaskSummary()
    rec = logging.LogRecord("monitor", logging.WARNING, __file__, 1, _slow(0.5), None, None)
    assert summary.filter(rec)
    rec = logging.LogRecord("kafka.net", logging.INFO, __file__, 1, _slow(0.5), None, None)
    assert summary.filter(rec)
