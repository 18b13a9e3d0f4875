"""Logging for the ``monitor`` command: text or JSON lines on stderr, secrets masked.

Masking happens in the formatter, on the final line (message, arguments and traceback
alike), so no code path can log a credential by accident: URL user-info
(``https://user:pass@host`` -> ``https://***@host``) and every secret value the
configuration holds (passwords, webhook secrets, secret-like ``extra_consumer_config``
values) are replaced by ``***``. kafka-python's protocol loggers (``kafka.conn``,
``kafka.protocol``) print request objects, SASL authentication bytes included, at DEBUG:
they stay at INFO or above unless ``--kafka-log-level`` asks for more.

A command's fatal error (an invalid configuration, an unreadable input) goes through
:func:`fatal`: indented text lines for a person, or one JSON object under
``--log-format json``, so a log pipeline that parses every line never meets plain text.
kafka-python warns once per event-loop step that took longer than its threshold ("Task …
ran for 0.1xx s … blocking the event loop"); on a loaded machine that is most of the log.
:class:`SlowTaskSummary` shows the first one, then one line per minute with the count and
the worst step.
"""

from __future__ import annotations

import atexit
import logging
import re
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

import orjson

__all__ = [
    "LEVELS",
    "URL_USERINFO",
    "SlowTaskSummary",
    "configure_logging",
    "fatal",
    "mask",
    "register_secrets",
]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# credentials inside a URL (also masked in the configuration by monitor/config.py)
URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_secrets: set[str] = set()
_lock = threading.Lock()
_format: list[str] = ["text"]  # the configured format, for fatal()


def register_secrets(values: Any) -> None:
    """Mask these exact values in every later log line (short ones would mask noise)."""
    with _lock:
        for v in values:
            if isinstance(v, str) and len(v.strip()) >= 4:
                _secrets.add(v.strip())


def mask(text: str) -> str:
    text = URL_USERINFO.sub(r"\1***@", text)
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for s in secrets:
        if s in text:
            text = text.replace(s, "***")
    return text


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return mask(super().format(record))


def _iso_now() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (ISO 8601 UTC), level, logger, message[, exc]."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": mask(record.getMessage()),
        }
        if record.exc_info:
            out["exc"] = mask(self.formatException(record.exc_info))
        return orjson.dumps(out).decode()


def fatal(message: str, details: Sequence[str] = (), **fields: Any) -> None:
    """A command's fatal error on stderr: ``message`` and its ``details`` as text lines,
    or, under ``--log-format json``, one object (level ERROR, logger "monitor") holding
    ``message`` and the structured ``fields`` (e.g. ``problems``)."""
    if _format[0] == "json":
        out = {"ts": _iso_now(), "level": "ERROR", "logger": "monitor", "message": message}
        out.update(fields)
        line = mask(orjson.dumps(out).decode())
    else:
        line = mask("\n".join([message, *details]))
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


_SLOW_TASK = re.compile(r"^Task .* ran for ([0-9.]+)s \(>([0-9.]+)s threshold\)", re.S)


class SlowTaskSummary(logging.Filter):
    """kafka-python's slow event-loop step warnings, summarised: the first passes as is,
    the next ones are counted and reported once per ``every`` seconds (count, worst step,
    threshold); what is left is reported at exit. Other records pass untouched."""

    def __init__(self, every: float = 60.0, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.every, self._clock = every, clock
        self._lock = threading.Lock()
        self._seen = False
        self._count = 0
        self._worst = 0.0
        self._threshold = 0.0
        self._since = clock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kafka") or record.levelno != logging.WARNING:
            return True
        m = _SLOW_TASK.match(record.getMessage())
        if m is None:
            return True
        elapsed, threshold = float(m.group(1)), float(m.group(2))
        with self._lock:
            if not self._seen:  # the first one in full, with what follows
                self._seen, self._since = True, self._clock()
                record.msg = (
                    f"{record.getMessage()} (kafka-python's I/O thread was starved of CPU; "
                    f"further such warnings are summarised every {self.every:.0f}s)"
                )
                record.args = None
                return True
            self._count += 1
            self._worst = max(self._worst, elapsed)
            self._threshold = threshold
            if self._clock() - self._since < self.every:
                return False
            summary = self._take()
        record.msg, record.args = summary, None
        return True

    def _take(self) -> str:
        summary = (
            f"kafka-python: {self._count} more event-loop step(s) over the "
            f"{self._threshold:.3f}s threshold in the last {self._clock() - self._since:.0f}s "
            f"(worst {self._worst:.3f}s): the client's I/O thread competed for CPU"
        )
        self._count, self._worst, self._since = 0, 0.0, self._clock()
        return summary

    def flush(self) -> None:
        """Report what was counted since the last summary (at exit)."""
        with self._lock:
            if not self._count:
                return
            summary = self._take()
        logging.getLogger("kafka.net.selector").warning(summary)


def configure_logging(
    level: str = "INFO",
    fmt: Literal["text", "json"] = "text",
    kafka_level: str | None = None,
    quiet_third_party: bool = False,
) -> None:
    """Root handler on stderr. Third-party chatter stays at WARNING (kafka-python logs
    every connection at INFO), ERROR with ``quiet_third_party``; the kafka protocol
    loggers never go below INFO unless ``kafka_level`` says so explicitly."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        formatter: logging.Formatter = _JsonFormatter()
        formatter.converter = time.gmtime
    else:
        formatter = _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(formatter)
    summary = SlowTaskSummary()
    handler.addFilter(summary)
    atexit.register(summary.flush)
    _format[0] = fmt
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    third_party = level if level == "DEBUG" else "ERROR" if quiet_third_party else "WARNING"
    # APScheduler says "Adding job tentatively", "Running job" at INFO: the monitor logs
    # each scheduled run itself (monitor/schedule/)
    logging.getLogger("apscheduler").setLevel(third_party)
    if kafka_level is not None:
        logging.getLogger("kafka").setLevel(kafka_level)
    else:
        logging.getLogger("kafka").setLevel(third_party)
        for name in ("kafka.conn", "kafka.protocol", "kafka.client_async", "kafka.admin.client"):
            logging.getLogger(name).setLevel(max(logging.INFO, logging.getLevelName(level)))
