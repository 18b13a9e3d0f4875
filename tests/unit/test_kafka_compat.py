"""kafka-python 3 compiles protocol decoders lazily and, without a lock, two threads
decoding the same response type for the first time can cache a decoder that fails for
every later response (seen in CI: a daemon that could never bootstrap). The race window is
widened deterministically by slowing the code generator down. The same holds for its
versioned wrapper classes (a dead weak proxy in the response registry)."""

from __future__ import annotations

import ast
import gc
import io
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.api_message import VersionSubscriptable
from kafka.protocol.metadata.api_versions import ApiVersionsResponse
from kafka.protocol.schemas.fields.struct import StructField

import monitor
from monitor import kafka_compat

# an ApiVersions v4 response body: error 0, no api keys, throttle 0, no tagged fields
BODY = struct.pack(">hii", 0, 0, 0) + b"\x00" * 20


def _decode() -> Any:
    return ApiVersionsResponse[4].decode(io.BytesIO(BODY), version=4)


SECOND_COMPILING = threading.Event()
FIRST_DONE = threading.Event()


@pytest.fixture
def slow_codegen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Order the two threads so the first finishes compiling while the second is mid-way:
    the first waits (briefly: under the lock the second cannot get there) until the second
    has started, and the second waits until the first has decoded."""
    emit = StructField.emit_decode_from

    def ordered(self: StructField, ctx: Any, var_name: str, *args: Any, **kwargs: Any) -> Any:
        if var_name == "obj":
            if threading.current_thread().name == "first":
                SECOND_COMPILING.wait(0.5)
            elif threading.current_thread().name == "second":
                SECOND_COMPILING.set()
                FIRST_DONE.wait(5.0)
        return emit(self, ctx, var_name, *args, **kwargs)

    monkeypatch.setattr(StructField, "emit_decode_from", ordered)
    struct_field = ApiVersionsResponse._struct
    saved_cache = dict(struct_field._compiled_encoders)
    saved_class = struct_field._data_class
    yield
    struct_field._compiled_encoders.clear()
    struct_field._compiled_encoders.update(saved_cache)
    struct_field._data_class = saved_class


def _race() -> list[BaseException]:
    """Two threads decode a never-compiled response type at once; return their errors."""
    ApiVersionsResponse._struct._compiled_encoders.clear()
    SECOND_COMPILING.clear()
    FIRST_DONE.clear()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _decode()
        except Exception as exc:  # the race's symptom is any decode failure
            errors.append(exc)
        finally:
            if threading.current_thread().name == "first":
                FIRST_DONE.set()

    first = threading.Thread(target=run, name="first")
    second = threading.Thread(target=run, name="second")
    first.start()
    second.start()
    first.join()
    second.join()
    return errors


def _unguarded(monkeypatch: pytest.MonkeyPatch) -> None:
    inner = StructField.compiled_decode_from
    monkeypatch.setattr(StructField, "compiled_decode_from", getattr(inner, "__wrapped__", inner))


def test_the_race_poisons_the_decoder_without_the_lock(
    slow_codegen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shows the failure is real in the pinned kafka-python, so the next test means something."""
    _unguarded(monkeypatch)
    _race()
    with pytest.raises(TypeError, match="not a type object"):
        _decode()


def test_install_serialises_compilation(slow_codegen: None) -> None:
    assert kafka_compat.install()
    assert kafka_compat.install()  # idempotent
    errors = _race()
    assert errors == []
    decoded = _decode()
    assert decoded.error_code == 0
    assert type(decoded).__name__ == "ApiVersionsResponse"


# -- versioned wrapper classes -----------------------------------------------------------
# ``Message[v]`` creates and caches a wrapper class; creating it registers a weak proxy to
# it as the response class of the API key. Two threads creating the same wrapper at once:
# the cache keeps one, the registry may keep the other, which dies.
VERSION = 3
FIRST_REGISTERED = threading.Event()
SECOND_DONE = threading.Event()


@pytest.fixture
def slow_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Hold the first thread between registering its wrapper and caching it until the
    second thread has created its own (briefly: under the lock the second cannot)."""
    register = ResponseClassRegistry.register_response_class.__func__  # type: ignore[attr-defined]

    def ordered(cls: type, response_class: Any) -> None:
        register(cls, response_class)
        if threading.current_thread().name == "first":
            FIRST_REGISTERED.set()
            SECOND_DONE.wait(0.5)

    monkeypatch.setattr(ResponseClassRegistry, "register_response_class", classmethod(ordered))
    registry = ResponseClassRegistry._response_class_registry
    key = ApiVersionsResponse.API_KEY
    saved_entry = registry[key]
    saved_version = ApiVersionsResponse._VERSIONS.pop(VERSION, None)
    yield
    registry[key] = saved_entry
    ApiVersionsResponse._VERSIONS.pop(VERSION, None)
    if saved_version is not None:
        ApiVersionsResponse._VERSIONS[VERSION] = saved_version


def _version_race() -> None:
    """Two threads look up a never-created versioned class at once."""
    FIRST_REGISTERED.clear()
    SECOND_DONE.clear()

    def first() -> None:
        ApiVersionsResponse[VERSION]

    def second() -> None:
        FIRST_REGISTERED.wait(5.0)
        ApiVersionsResponse[VERSION]
        SECOND_DONE.set()

    threads = [threading.Thread(target=first, name="first"), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()


def _registered() -> Any:
    return ResponseClassRegistry._response_class_registry[ApiVersionsResponse.API_KEY]


def test_the_version_race_leaves_a_dead_response_class_without_the_lock(
    slow_registry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = VersionSubscriptable.__getitem__
    monkeypatch.setattr(VersionSubscriptable, "__getitem__", getattr(inner, "__wrapped__", inner))
    _version_race()
    with pytest.raises(ReferenceError, match="no longer exists"):
        _registered()[VERSION]


def test_install_serialises_versioned_class_creation(slow_registry: None) -> None:
    assert kafka_compat.install()
    _version_race()
    assert _registered()[VERSION] is ApiVersionsResponse[VERSION]


def _producer_calls() -> list[tuple[str, int, ast.Call]]:
    root = Path(monitor.__file__).parent
    out = []
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Call) and (
                getattr(node.func, "id", None) == "KafkaProducer"
                or getattr(node.func, "attr", None) == "KafkaProducer"
            ):
                out.append((str(f.relative_to(root)), node.lineno, node))
    return out


def test_every_kafka_python_producer_is_built_with_the_producer_settings() -> None:
    """A producer built with kafka-python's defaults is idempotent, and never delivers
    again after a broker stall outlasted one of its batches (``producer_settings``)."""
    calls = _producer_calls()
    assert len(calls) >= 4  # dead letters, state/stats store, exporter lease, demo
    for where, line, call in calls:
        spread = [kw.value for kw in call.keywords if kw.arg is None]
        assert any(
            isinstance(v, ast.Call) and getattr(v.func, "attr", None) == "producer_settings"
            for v in spread
        ), f"{where}:{line} builds a KafkaProducer without **kafka_compat.producer_settings()"
        named = {kw.arg for kw in call.keywords}
        assert "enable_idempotence" not in named, f"{where}:{line} sets idempotence itself"


@pytest.mark.parametrize("give_up_s", [None, 0.2, 2.0, 10.0])
def test_producer_settings_are_accepted_by_kafka_python(give_up_s: float | None) -> None:
    """kafka-python's accumulator refuses a delivery timeout below linger plus request
    timeout; the settings pass its own check, and a writer's give-up bounds how long an
    unacknowledged batch is kept."""
    from kafka.producer.record_accumulator import RecordAccumulator

    got = kafka_compat.producer_settings(linger_ms=5, give_up_s=give_up_s)
    assert got["enable_idempotence"] is False
    accumulator = RecordAccumulator(**got)  # raises KafkaConfigurationError if refused
    if give_up_s is not None:
        assert accumulator.delivery_timeout_ms <= max(1000, give_up_s * 1000) + 5


def test_heartbeat_silence_reads_the_installed_kafka_python() -> None:
    """The silence is read from kafka-python's coordinator internals: the installed
    version has them (a consumer built offline), a member that has not joined is never
    silent, a stable one is silent since its last answered heartbeat, and a client
    without these internals gives no silence rather than an error."""
    from kafka import KafkaConsumer
    from kafka.structs import MemberState

    consumer = KafkaConsumer(group_id="g", bootstrap_servers="127.0.0.1:1", api_version=(3, 9))
    try:
        coordinator = consumer._coordinator
        assert kafka_compat.heartbeat_silence(consumer) is None  # not joined
        coordinator.state = MemberState.STABLE
        coordinator.heartbeat.last_reset = time.monotonic() - 30.0
        coordinator.heartbeat.last_receive = time.monotonic() - 12.0
        assert kafka_compat.heartbeat_silence(consumer) == pytest.approx(12.0, abs=1.0)
        coordinator.heartbeat.last_receive = time.monotonic() - 0.5
        assert kafka_compat.heartbeat_silence(consumer) == pytest.approx(0.5, abs=1.0)
        coordinator.state = MemberState.REBALANCING
        assert kafka_compat.heartbeat_silence(consumer) is None
        coordinator.state = MemberState.STABLE
        del coordinator.heartbeat.last_receive
        assert kafka_compat.heartbeat_silence(consumer) is None
    finally:
        consumer.close()
