"""Work around a thread race in kafka-python 3's lazily compiled protocol decoders, group
joins whose answer it drops (:func:`await_join`), an idempotent producer that never
sends again after a broker stall (:func:`producer_settings`), and connections that look
live while the broker answers nothing (:func:`heartbeat_silence`).

kafka-python 3 compiles a decoder per (message, version) on first use. For the top-level
response class it briefly swaps ``StructField._data_class`` from a weak proxy to the real
class and swaps it back afterwards, with no lock. When two threads decode the same response
type for the first time at once (the consumer, the dead-letter producer and the admin
client each run their own network thread), one of them can compile while the other has
already restored the proxy. The decoder it caches then calls ``object.__new__`` on the
proxy and fails for every later response of that type: the client can never bootstrap
again ("object.__new__(X): X is not a type object (weakref.CallableProxyType)").
tests/unit/test_kafka_compat.py reproduces the race and shows the lock prevents it.

A second race of the same kind: ``Message[version]`` creates a versioned wrapper class on
first use and caches it in ``Message._VERSIONS``; creating it re-runs the message's
``__init_subclass__``, which registers a *weak proxy* to the wrapper as the response class
of its API key. When two threads create the wrapper of the same version at once, the
cache keeps one and the registry may keep the other, which is then garbage collected:
every later response of that key fails with "ReferenceError: weakly-referenced object no
longer exists" and the client never bootstraps (seen in CI on a daemon restart).

``install()`` serialises compilation with one lock, and wrapper creation with another. The
compiled functions and the wrappers are cached, so the first lock is taken once per
(message, version, flags); the second (re-entrant: a wrapper's lookup recurses to its
message) is an uncontended acquire per lookup.
"""

from __future__ import annotations

import functools
import importlib
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka.structs import MemberState

__all__ = [
    "await_join",
    "heartbeat_silence",
    "install",
    "metadata_fetched_at",
    "producer_settings",
    "request_metadata",
    "topic_metadata",
]

_LOCK = threading.Lock()
_VERSIONS_LOCK = threading.RLock()
_MARK = "_mlmon_serialised"


def producer_settings(linger_ms: int = 0, give_up_s: float | None = None) -> dict[str, Any]:
    """What every kafka-python producer of the daemon is built with, beside its ``acks``.

    Idempotence off. kafka-python 3 turns it on by default, and once a batch had expired
    (``delivery_timeout_ms``: a broker that stopped answering for two minutes) its
    idempotent producer never delivered again, although the broker was back: every later
    send timed out. Measured on a partitioned instance with tansu stopped for 200 s: the
    state and statistics writes and the exporter lease's renewals kept failing after the
    broker resumed, the instance lost its group membership every 14-15 s (its consumer
    loop waited for writes that could not succeed) and restored all its partitions each
    time, growing 4 MB/s; without idempotence it exported again within two seconds of
    the broker resuming, and its memory fell back. The daemon's writes need no
    idempotence: a state or statistics generation is whole, checksummed and ranked (a
    chunk written twice is the same value under the same key), the lease is decided by
    log order from what each writer read back, and a dead letter written twice is a
    duplicate, never a loss.

    ``give_up_s``: the writer stops waiting for an acknowledgement after this long (a
    failed write is retried as a new one), so the producer drops what it still holds
    then, rather than keep two minutes of writes nobody waits for (over the stall above:
    137 MB of unsent statistics and state chunks held, 14 MB with this)."""
    out: dict[str, Any] = {"enable_idempotence": False, "linger_ms": linger_ms}
    if give_up_s is not None:
        request_ms = max(1000, round(give_up_s * 1000))
        out.update(request_timeout_ms=request_ms, delivery_timeout_ms=request_ms + linger_ms)
    return out


def install() -> bool:
    """Serialise kafka-python's decoder compilation and versioned-class creation;
    idempotent.

    Returns False when the installed kafka-python has neither lazily compiled decoders
    nor lazily created versioned classes (an older or a fixed release): nothing to guard.
    """
    decoders = _guard("kafka.protocol.schemas.fields.struct", "StructField",
                      "compiled_decode_from", _LOCK)  # fmt: skip
    versions = _guard("kafka.protocol.api_message", "VersionSubscriptable", "__getitem__",
                      _VERSIONS_LOCK)  # fmt: skip
    return decoders or versions


def _guard(module: str, owner: str, method: str, lock: Any) -> bool:
    """Wrap ``module.owner.method`` so calls hold ``lock``; False if there is none."""
    try:
        cls = getattr(importlib.import_module(module), owner)
    except (ImportError, AttributeError):
        return False
    inner = cls.__dict__.get(method)
    if inner is None:
        return False
    if not getattr(inner, _MARK, False):
        setattr(cls, method, _serialised(inner, lock))
    return True


def _serialised(inner: Callable[..., Any], lock: Any) -> Callable[..., Any]:
    @functools.wraps(inner)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return inner(self, *args, **kwargs)

    setattr(guarded, _MARK, True)
    return guarded


def topic_metadata(consumer: Any, topic: str) -> tuple[str | None, int | None]:
    """(topic id, partition count) of ``topic`` from a kafka-python client's cached
    cluster metadata — no request, so it can be asked on every poll. kafka-python has
    no public accessor for topic ids; None where the metadata does not say (yet), or
    the broker gives no ids (an all-zero id)."""
    cluster = consumer._client.cluster
    tid = cluster.topic_id(topic)
    parts = cluster.partitions_for_topic(topic)
    return (str(tid) if tid and int(tid) else None), (len(parts) if parts else None)


def metadata_fetched_at(consumer: Any) -> float:
    """When the client's cluster metadata was last refreshed (``time.monotonic()``)."""
    return float(consumer._client.cluster._last_successful_refresh_ms) / 1000


def request_metadata(consumer: Any) -> None:
    """Ask kafka-python for fresh cluster metadata at its next poll."""
    consumer._client.cluster.request_update()


def await_join(consumer: Any, timeout_ms: int) -> bool:
    """Wait up to ``timeout_ms`` for a group join that is due or in flight, before a poll.

    kafka-python 3 reads a join's answer only when the join task finishes inside the
    coordinator's wait for it; a task found finished afterwards is dropped and a new
    JoinGroup sent. A join takes seconds (a broker delays a group's first rebalance by
    3 s; a rebalance waits for every member), so with polls shorter than that the answer
    usually came between waits, and each dropped answer cost another join: with 1 ms
    polls a recreated topic's new partitions were taken 8 to 28 s after the recreation
    (over 60 s on a loaded machine; 7 s with this wait, 5 of them the metadata's age).
    Waiting here lets the answer arrive inside the wait.

    A join started by a metadata change is awaited only while
    ``ConsumerCoordinator.need_rejoin()`` holds, and that compares the metadata with the
    snapshot the leader took *when it assigned*: a wait that ran out between the
    assignment and the SyncGroup answer left the join in flight with ``need_rejoin()``
    already false, awaited by no later poll (the member "rebalancing" for good, every
    commit refused; seen in CI). Requesting a rejoin makes the coordinator await it.
    True when a join was awaited; False with nothing to await or no coordinator known
    (a broker away: the poll's own timeout applies)."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or coordinator.coordinator_unknown():
        return False
    in_flight = getattr(coordinator, "_join_task", None) is not None
    if not coordinator.need_rejoin():
        if not in_flight:
            return False
        coordinator.request_rejoin()  # orphaned: no poll would await it
    coordinator.poll(timeout_ms=timeout_ms)
    return True


def heartbeat_silence(consumer: Any) -> float | None:
    """Seconds since the group coordinator last answered this member's heartbeat (or the
    member joined), while the member is in a stable group; ``None`` otherwise (joining,
    rebalancing, left: heartbeats are not due then).

    A broker that stops answering without closing its connections (a stopped process, a
    black-holed network) leaves kafka-python's ``connection-count`` above zero. Its
    heartbeat thread sends a heartbeat only after the previous one was answered or
    failed, so this age grows by the second through such a stall (measured against a
    stopped broker: 34 s after 34 s stopped, the member still "stable"). The public
    ``last-heartbeat-seconds-ago`` metric counts from the last *send* and from before a
    rebalance, so it would also grow through a long join with a broker answering."""
    coordinator = getattr(consumer, "_coordinator", None)
    heartbeat = getattr(coordinator, "heartbeat", None)
    times = [getattr(heartbeat, name, None) for name in ("last_receive", "last_reset")]
    if None in times or getattr(coordinator, "state", None) != MemberState.STABLE:
        return None  # (a kafka-python without these: readiness by connection count alone)
    return time.monotonic() - max(times)
