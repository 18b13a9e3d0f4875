"""Alert delivery against real local HTTP receivers (stdlib http.server), no mocks.

Covers the webhook HMAC signature (checked with hmac/hashlib independently), the
Alertmanager v2 body, the bounded queue dropping the oldest alert under a dead receiver,
retries with exponential backoff against a receiver answering 503 then 200, a slow
receiver that never blocks ``sync``, periodic re-sends and resolutions.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from monitor.alerting.alerts import Alert
from monitor.alerting.delivery import (
    SIGNATURE_HEADER,
    AlertmanagerNotifier,
    Dispatcher,
    NotHolding,
    WebhookNotifier,
)


@dataclass
class Received:
    at: float
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A real HTTP server on a free loopback port that records every POST."""

    statuses: list[int] = field(default_factory=list)  # answers in turn, then 200
    delay: float = 0.0
    requests: list[Received] = field(default_factory=list)
    in_request: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                rec.in_request.set()
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                rec.requests.append(
                    Received(time.monotonic(), self.path, dict(self.headers.items()), body)
                )
                if rec.delay:
                    time.sleep(rec.delay)
                code = rec.statuses.pop(0) if rec.statuses else 200
                try:
                    self.send_response(code)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the client gave up (timeout)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def dead_url() -> str:
    """A loopback port nobody listens on: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def alert(i: int, **labels: str) -> Alert:
    return Alert.make(
        {"alertname": "ModelSloBreached", "slo": f"slo-{i}", "severity": "page", **labels},
        {"summary": f"slo {i} is broken", "runbook_url": "https://rb"},
        starts_at=1_700_000_000.0 + i,
        generator_url="http://monitor:9108/api/v1/slos",
    )


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_webhook_is_signed_with_hmac_sha256(receiver: Receiver) -> None:
    secret = "s3cr3t-key"
    d = Dispatcher([WebhookNotifier(receiver.url + "/hook", secret, timeout=2)])
    d.start()
    try:
        d.sync("slo", [alert(1)])
        wait_for(lambda: len(receiver.requests) == 1)
        d.sync("slo", [])  # resolved
        wait_for(lambda: len(receiver.requests) == 2)
    finally:
        d.stop(2)
    for req in receiver.requests:
        expected = hmac.new(secret.encode(), req.body, hashlib.sha256).hexdigest()
        assert req.headers[SIGNATURE_HEADER] == f"sha256={expected}"
        assert req.headers["Content-Type"] == "application/json"
        assert req.path == "/hook"
    firing, resolved = (r.json() for r in receiver.requests)
    assert firing["status"] == "firing" and firing["alerts"][0]["status"] == "firing"
    item = firing["alerts"][0]
    assert item["labels"] == {"alertname": "ModelSloBreached", "slo": "slo-1", "severity": "page"}
    assert item["annotations"] == {"summary": "slo 1 is broken", "runbook_url": "https://rb"}
    assert parse_time(item["startsAt"]) == pytest.approx(1_700_000_001.0)
    assert parse_time(item["endsAt"]) > time.time() + 60  # a horizon of re-send intervals
    assert item["generatorURL"] == "http://monitor:9108/api/v1/slos"
    assert resolved["status"] == "resolved"
    gone = resolved["alerts"][0]
    assert gone["status"] == "resolved" and gone["labels"] == item["labels"]
    assert parse_time(gone["startsAt"]) == pytest.approx(1_700_000_001.0)
    assert parse_time(gone["endsAt"]) <= time.time()
    # a tampered body does not verify
    forged = receiver.requests[0].body.replace(b"slo-1", b"slo-2")
    assert not hmac.compare_digest(
        "sha256=" + hmac.new(secret.encode(), forged, hashlib.sha256).hexdigest(),
        receiver.requests[0].headers[SIGNATURE_HEADER],
    )


def test_webhook_without_secret_is_not_signed(receiver: Receiver) -> None:
    d = Dispatcher([WebhookNotifier(receiver.url)])
    d.start()
    try:
        d.sync("slo", [alert(1)])
        wait_for(lambda: len(receiver.requests) == 1)
    finally:
        d.stop(2)
    assert SIGNATURE_HEADER not in receiver.requests[0].headers


def test_alertmanager_body_is_a_list_of_postable_alerts(receiver: Receiver) -> None:
    d = Dispatcher([AlertmanagerNotifier(receiver.url + "/", timeout=2)], resend_interval=30)
    d.start()
    try:
        d.sync("slo", [alert(1), alert(2)])
        wait_for(lambda: len(receiver.requests) >= 1)
    finally:
        d.stop(2)
    req = receiver.requests[0]
    assert req.path == "/api/v2/alerts"
    body = req.json()
    assert isinstance(body, list) and len(body) == 2
    assert set(body[0]) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
    ends = parse_time(body[0]["endsAt"])
    assert time.time() + 100 < ends <= time.time() + 4 * 30 + 1  # 4 re-send intervals
    assert d.stats().receivers[0].sent == 2


def test_bounded_queue_drops_the_oldest_under_a_dead_receiver() -> None:
    d = Dispatcher(
        [AlertmanagerNotifier(dead_url(), timeout=1)],
        max_queue=3,
        retry_initial=0.05,
        retry_max=0.2,
    )
    d.start()
    try:
        d.sync("slo", [alert(i) for i in range(4)])  # 4 new alerts, room for 3: drop one
        d.sync("slo", [alert(i) for i in range(7)])  # 3 more new ones: drop three more
        d.sync("slo", [alert(i) for i in range(7)])  # nothing new: coalesced, no drop
        wait_for(lambda: d.stats().receivers[0].failed >= 6)  # some retries happened
        stats = d.stats().receivers[0]
        assert stats.dropped == 4 and stats.queued <= 3 and stats.sent == 0
        assert "127.0.0.1" in (stats.last_error or "")
        wait_for(lambda: len(d.pending("alertmanager")) == 3)
        kept = {dict(a.labels)["slo"] for a in d.pending("alertmanager")}
        assert kept == {"slo-4", "slo-5", "slo-6"}  # the newest survive
    finally:
        assert d.stop(0.5) is False  # undeliverable: stop says so, within the bound


def test_retries_with_backoff_until_the_receiver_recovers(receiver: Receiver) -> None:
    receiver.statuses = [503, 503]
    d = Dispatcher(
        [AlertmanagerNotifier(receiver.url, timeout=2)],
        retry_initial=0.2,
        retry_max=5.0,
        rng=random.Random(7),
    )
    d.start()
    try:
        d.sync("slo", [alert(1)])
        wait_for(lambda: d.stats().receivers[0].sent == 1)
    finally:
        d.stop(2)
    times = [r.at for r in receiver.requests]
    assert len(times) == 3
    # waits drawn from [backoff/2, backoff]: 0.2 s then 0.4 s
    assert 0.1 <= times[1] - times[0] <= 0.2 + 0.5  # (slack for a loaded machine)
    assert 0.2 <= times[2] - times[1] <= 0.4 + 0.5
    stats = d.stats().receivers[0]
    assert (stats.sent, stats.failed, stats.dropped, stats.queued) == (1, 2, 0, 0)
    assert stats.last_error is None and stats.last_success_at is not None


def test_a_slow_receiver_never_blocks_sync(receiver: Receiver) -> None:
    """While one send hangs in the receiver, thousands of syncs complete: none waits for
    it. Judged by the send's outcome, not a wall-clock budget (a loaded machine stretches
    every sync alike): had any sync waited for the send, the send would have ended (timed
    out) before the syncs did."""
    receiver.delay = 120.0  # hangs past the client timeout and the whole loop
    d = Dispatcher([WebhookNotifier(receiver.url, timeout=60)], retry_initial=5, max_queue=50)
    d.start()
    try:
        d.sync("slo", [alert(0)])
        assert receiver.in_request.wait(5)  # a send is stuck in the receiver now
        t0 = time.monotonic()
        for i in range(2000):
            d.sync("slo", [alert(j) for j in range(i % 100)])
        looped = time.monotonic() - t0
        stats = d.stats().receivers[0]
        assert looped < 60, f"the syncs took {looped:.1f}s: past the client timeout"
        assert (stats.sent, stats.failed) == (0, 0), "a sync waited for the hung send"
        assert stats.queued <= 50  # the queue stays bounded meanwhile
    finally:
        t0 = time.monotonic()
        d.stop(0.5)
        assert time.monotonic() - t0 < 10  # waiting for the send would take its 60 s


def test_a_hung_receiver_times_out_and_says_so(receiver: Receiver) -> None:
    receiver.delay = 1.5  # well past the client timeout
    d = Dispatcher([WebhookNotifier(receiver.url, timeout=0.3)], retry_initial=5, max_queue=50)
    d.start()
    try:
        d.sync("slo", [alert(0)])
        wait_for(lambda: d.stats().receivers[0].failed >= 1)
        assert "timed out" in (d.stats().receivers[0].last_error or "")
    finally:
        d.stop(0.5)


def test_firing_alerts_are_resent_and_keep_their_start(receiver: Receiver) -> None:
    d = Dispatcher([AlertmanagerNotifier(receiver.url)], resend_interval=0.3)
    started = time.monotonic()
    d.start()
    try:
        first = alert(1)
        d.sync("slo", [first])
        # the next pass renders the same alert with a newer start and fresher text
        later = Alert.make(dict(first.labels), {"summary": "still broken"}, starts_at=9e9)
        d.sync("slo", [later])
        wait_for(lambda: len(receiver.requests) >= 4, timeout=5)
    finally:
        d.stop(2)
    bodies = [r.json() for r in receiver.requests]
    assert all(len(b) == 1 for b in bodies)
    assert all(parse_time(b[0]["startsAt"]) == pytest.approx(first.starts_at) for b in bodies)
    assert bodies[-1][0]["annotations"] == {"summary": "still broken"}  # refreshed on re-send
    # Paced, not flooded: the two syncs send at most two requests, every later one is a
    # re-send, and the k-th re-send is decided no sooner than k intervals after start()
    # and received after that. (Gaps between receipts carry the machine's scheduling
    # jitter, so they are not compared one by one.)
    for i, r in enumerate(receiver.requests):
        assert r.at - started >= (i - 1) * 0.3, (i, r.at - started)


def test_sources_are_independent_and_resolution_is_sent_once(receiver: Receiver) -> None:
    d = Dispatcher([AlertmanagerNotifier(receiver.url)], resend_interval=60)
    d.start()
    try:
        ckpt = Alert.make({"alertname": "MonitorCheckpointFailing"}, {}, starts_at=5.0)
        d.sync("checkpoint", [ckpt])
        d.sync("slo", [alert(1)])
        wait_for(lambda: sum(len(r.json()) for r in receiver.requests) == 2)
        d.sync("slo", [])  # resolves slo-1, leaves the checkpoint alert alone
        wait_for(lambda: sum(len(r.json()) for r in receiver.requests) == 3)
        assert [a.name for a in d.active()] == ["MonitorCheckpointFailing"]
        d.sync("slo", [])  # nothing changes: nothing sent
        time.sleep(0.2)
        assert sum(len(r.json()) for r in receiver.requests) == 3
    finally:
        d.stop(2)
    last = receiver.requests[-1].json()[0]
    assert last["labels"]["slo"] == "slo-1" and parse_time(last["endsAt"]) <= time.time()


def test_more_firing_alerts_than_max_queue_are_all_delivered_in_turn(
    receiver: Receiver,
) -> None:
    """Re-sends rotate, so a queue smaller than the set of firing alerts starves nobody."""
    d = Dispatcher([AlertmanagerNotifier(receiver.url)], resend_interval=0.2, max_queue=2)
    d.start()
    try:
        d.sync("slo", [alert(i) for i in range(5)])

        def seen() -> set[str]:
            return {a["labels"]["slo"] for r in list(receiver.requests) for a in r.json()}

        wait_for(lambda: len(seen()) == 5, timeout=5)
        assert all(len(r.json()) <= 2 for r in receiver.requests)
        assert d.stats().receivers[0].dropped >= 3
    finally:
        d.stop(1)


def test_only_the_lease_holder_sends_and_losing_it_drops_the_firing_set(
    receiver: Receiver,
) -> None:
    """Reported: an exporter paused past its lease kept re-sending its firing set after
    it resumed, over the new exporter's resolution. Without the lease nothing is sent
    and the firing set is dropped, so regaining the lease starts from a clean slate."""
    holds = threading.Event()
    holds.set()
    d = Dispatcher(
        [AlertmanagerNotifier(receiver.url, timeout=2)], resend_interval=0.2, retry_initial=0.05
    )
    d.holding = holds.is_set
    d.start()
    try:
        d.sync("slo", [alert(1), alert(2)])
        wait_for(lambda: len(receiver.requests) >= 2)  # sent, then re-sent
        holds.clear()  # the lease runs out
        time.sleep(0.3)  # a worker round at least
        sent = len(receiver.requests)
        time.sleep(1.0)  # five re-send intervals
        assert len(receiver.requests) == sent
        assert d.active() == () and d.pending("alertmanager") == ()
        d.sync("slo", [alert(3)])  # a non-holder's sync is ignored
        time.sleep(0.3)
        assert len(receiver.requests) == sent and d.active() == ()
        holds.set()  # the lease again: the next sync's firing set is new, sent at once
        d.sync("slo", [alert(1)])
        wait_for(lambda: len(receiver.requests) > sent)
        labels = [a["labels"]["slo"] for a in receiver.requests[sent].json()]
        assert labels == ["slo-1"]
    finally:
        d.stop(2)


def test_the_lease_is_asked_once_connected_and_nothing_is_written_without_it() -> None:
    """A process paused with a batch in hand (SIGSTOP, a VM freeze) must not deliver it
    when it resumes after its lease ran out: the lease is asked after the connection is
    up and before any byte of the request is written."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(5)
        seen: list[bytes] = []
        conns: list[socket.socket] = []

        def lease_gone() -> bool:
            conn, _ = server.accept()  # the handshake is done: the connection is queued
            conn.settimeout(0.3)
            try:
                seen.append(conn.recv(1024))
            except TimeoutError:
                seen.append(b"(nothing yet)")
            conns.append(conn)
            return False

        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        for notifier in (AlertmanagerNotifier(url, timeout=2), WebhookNotifier(url, "k", 2)):
            with pytest.raises(NotHolding):
                notifier.send([alert(1)], time.time(), 60.0, guard=lease_gone)
        assert seen == [b"(nothing yet)"] * 2
        for conn in conns:  # closed by the client with nothing written
            conn.settimeout(2)
            assert conn.recv(1024) == b""
            conn.close()


def test_a_lease_lost_while_connecting_sends_nothing_and_drops_the_firing_set(
    receiver: Receiver,
) -> None:
    """The worker took the batch while it held the lease; the lease runs out before the
    request is written: nothing reaches the receiver, it is not a failure (no retry,
    ``failed`` stays 0) and the firing set is dropped, so nothing is re-sent later."""
    holds = threading.Event()
    holds.set()

    class LosesTheLeaseWhileConnecting:
        name = "alertmanager"

        def __init__(self) -> None:
            self.real = AlertmanagerNotifier(receiver.url, timeout=2)
            self.calls = 0

        def send(
            self,
            alerts: Sequence[Alert],
            now: float,
            horizon_s: float,
            guard: Callable[[], bool] | None = None,
        ) -> None:
            self.calls += 1
            holds.clear()  # the lease runs out between the worker's check and the write
            self.real.send(alerts, now, horizon_s, guard)

    notifier = LosesTheLeaseWhileConnecting()
    d = Dispatcher([notifier], resend_interval=0.1, retry_initial=0.05)
    d.holding = holds.is_set
    d.start()
    try:
        d.sync("slo", [alert(1), alert(2)])
        wait_for(lambda: notifier.calls == 1)
        time.sleep(0.5)  # five re-send intervals
        assert notifier.calls == 1 and receiver.requests == []
        stats = d.stats().receivers[0]
        assert (stats.sent, stats.failed, stats.last_error) == (0, 0, None)
        assert d.active() == () and d.pending("alertmanager") == ()
    finally:
        d.stop(1)
