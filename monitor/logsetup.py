"""Logging for the ``monitor`` command: text or JSON lines on stderr, secrets masked.

Masking happens in the formatter, on the final line (message, arguments and traceback
alike), so no code path can log a credential by accident: URL user-info
(``https://user:pass@host`` -> ``https://***@host``), secret-named query parameters
(``?token=…``) and every secret value the configuration holds (passwords, webhook
secrets, secret-like ``extra_consumer_config`` values) are replaced by ``***``
(``monitor/redact.py``). kafka-python's protocol loggers (``kafka.conn``,
``kafka.protocol``) print request objects, SASL authentication bytes included, at DEBUG:
they stay at INFO or above unless ``--kafka-log-level`` asks for more.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Literal

import orjson

from .redact import mask

__all__ = ["LEVELS", "configure_logging"]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return mask(super().format(record))


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
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    third_party = level if level == "DEBUG" else "ERROR" if quiet_third_party else "WARNING"
    if kafka_level is not None:
        logging.getLogger("kafka").setLevel(kafka_level)
    else:
        logging.getLogger("kafka").setLevel(third_party)
        for name in ("kafka.conn", "kafka.protocol", "kafka.client_async", "kafka.admin.client"):
            logging.getLogger(name).setLevel(max(logging.INFO, logging.getLevelName(level)))
