"""Alert delivery: Alertmanager v2 and a signed generic webhook, off the evaluation path.

Design, and why:

- **Never block evaluation.** ``Dispatcher.sync`` only updates dictionaries under a lock
  that is never held during I/O, so it is O(alerts) and returns at once whatever the
  receivers do. Each receiver has its own worker thread, so a slow or dead receiver
  delays nobody else.
- **Bounded memory.** Each receiver has a queue keyed by alert identity (the label set).
  Alertmanager deduplicates by labels too, so only the newest version of an alert needs
  sending: enqueueing an alert already queued replaces it (coalescing). When more than
  ``max_queue`` distinct alerts wait, the oldest is dropped and counted.
- **Retries.** A failed send (connection error, timeout, non-2xx answer) puts the batch
  back (unless a newer version of an alert was queued meanwhile) and waits with
  exponential backoff and jitter (``retry_initial`` doubling up to ``retry_max``; the
  wait is drawn from [backoff/2, backoff] so receivers coming back are not hit in
  lockstep).
- **Re-sends.** Alertmanager forgets a firing alert at its ``endsAt``; Prometheus solves
  this by re-sending active alerts, and so do we: every ``resend_interval`` each firing
  alert is queued again with ``endsAt = now + 4 × resend_interval``. If the monitor dies,
  its alerts resolve by themselves a few intervals later instead of firing forever; if
  Alertmanager restarts (it does not persist alerts), the next re-send restores them.
- **Resolution** is sent once, with ``endsAt`` = the moment it was observed.
- **One sender.** Several instances of one deployment (``scale.mode = "partitioned"``)
  evaluate the same SLOs; only the holder of the exporter lease may send (``holding``).
  An instance that does not hold it sends nothing, and one that loses it drops its
  firing set and its queues at once — a paused exporter that resumes must not re-send
  its old firing alerts over the new exporter's resolution. The lease is asked again
  after the connection to the receiver is up (TCP and TLS handshakes done) and right
  before the request's bytes are written in one piece, so a process paused (SIGSTOP, a
  VM freeze) with a batch in hand finds, when it resumes, that its lease ran out
  meanwhile and writes nothing: only a pause within those few instructions between
  the check and the write can still let one request out.

The stdlib ``urllib`` suffices for two JSON POSTs; no HTTP client dependency is added.
Credentials in a receiver URL (``https://user:pass@host/...``) are sent as a basic-auth
header, and every error message is masked (``monitor/redact.py``) before it is kept for
``/api/v1/slos`` or logged: ``last_error`` never carries a password or a ``?token=``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import http.client
import logging
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

from ..redact import mask
from .alerts import Alert

__all__ = [
    "SIGNATURE_HEADER",
    "AlertmanagerNotifier",
    "DeliveryError",
    "DeliveryStats",
    "Dispatcher",
    "Guard",
    "NotHolding",
    "Notifier",
    "ReceiverStats",
    "WebhookNotifier",
    "alertmanager_payload",
    "post_json",
    "rfc3339",
    "sign",
    "webhook_payload",
]

log = logging.getLogger("monitor.alerting")

SIGNATURE_HEADER = "X-Monitor-Signature"
ENDS_AFTER_RESENDS = 4  # a firing alert's endsAt horizon, in resend intervals
_BATCH = 500  # alerts per request at most


class DeliveryError(Exception):
    """A send that did not reach the receiver (the message says how)."""


class NotHolding(Exception):
    """The send was called off before any byte of it was written: this instance no
    longer holds the exporter lease (not a delivery failure: nothing to retry)."""


Guard = Callable[[], bool]  # whether this instance may still send, asked last


class Notifier(Protocol):
    """One receiver: sends a batch of alerts or raises. ``horizon_s`` is how far in the
    future a firing alert's ``endsAt`` should be; ``guard`` is asked once the connection
    is up, right before the request is written (False: raise ``NotHolding``)."""

    name: str

    def send(
        self, alerts: Sequence[Alert], now: float, horizon_s: float, guard: Guard | None = None
    ) -> None: ...


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ends_at(alert: Alert, now: float, horizon_s: float) -> float:
    return alert.ends_at if alert.ends_at is not None else now + horizon_s


def alertmanager_payload(
    alerts: Sequence[Alert], now: float, horizon_s: float
) -> list[dict[str, Any]]:
    """The body of ``POST /api/v2/alerts`` (a list of postable alerts)."""
    out = []
    for a in alerts:
        item: dict[str, Any] = {
            "labels": dict(a.labels),
            "annotations": dict(a.annotations),
            "startsAt": rfc3339(a.starts_at),
            "endsAt": rfc3339(_ends_at(a, now, horizon_s)),
        }
        if a.generator_url:
            item["generatorURL"] = a.generator_url
        out.append(item)
    return out


def webhook_payload(alerts: Sequence[Alert], now: float, horizon_s: float) -> dict[str, Any]:
    """The generic webhook body: like Alertmanager's webhook format (status per alert and
    for the batch), so existing receivers can read it."""
    items = []
    for a in alerts:
        items.append(
            {
                "status": "firing" if a.firing else "resolved",
                "labels": dict(a.labels),
                "annotations": dict(a.annotations),
                "startsAt": rfc3339(a.starts_at),
                "endsAt": rfc3339(_ends_at(a, now, horizon_s)),
                "generatorURL": a.generator_url,
                "fingerprint": a.fingerprint,
            }
        )
    return {
        "version": "1",
        "sender": "model-monitor",
        "status": "firing" if any(a.firing for a in alerts) else "resolved",
        "sentAt": rfc3339(now),
        "alerts": items,
    }


def sign(secret: str | bytes, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of the raw body>``: the X-Monitor-Signature value."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def split_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without its user-info, and the basic-auth header it stood for (urllib
    would not send it, and it must never appear in an error message)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, {}
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    creds = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    header = {"Authorization": "Basic " + base64.b64encode(creds.encode()).decode()}
    return urllib.parse.urlunsplit(parts._replace(netloc=hostport)), header


class _Fenced:
    """An ``http.client`` connection that holds the request back until ``getresponse``:
    it connects, asks ``guard``, and only then writes the whole request with one
    ``sendall`` (``http.client`` writes headers and body apart, and a pause between the
    two would still deliver the request when the process resumes)."""

    sock: Any

    def __init__(self, *args: Any, guard: Guard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self._guard = guard
        self._held: list[bytes] = []
        self._connecting = False

    def connect(self) -> None:
        self._connecting = True  # a proxy's CONNECT is written at once
        try:
            super().connect()  # type: ignore[misc]
        finally:
            self._connecting = False

    def send(self, data: Any) -> None:
        if self._connecting:
            super().send(data)  # type: ignore[misc]
        else:
            self._held.append(bytes(data))

    def getresponse(self) -> http.client.HTTPResponse:
        if self.sock is None:
            self.connect()  # type: ignore[attr-defined]
        if not self._guard():
            self.close()  # type: ignore[attr-defined]
            raise NotHolding("the exporter lease ran out before the request was written")
        data, self._held = b"".join(self._held), []
        self.sock.sendall(data)
        return super().getresponse()  # type: ignore[misc,no-any-return]


class _FencedHTTP(_Fenced, http.client.HTTPConnection):
    pass


class _FencedHTTPS(_Fenced, http.client.HTTPSConnection):
    pass


class _FencedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self._guard = guard

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_FencedHTTP, guard=self._guard), req)  # type: ignore[arg-type]


class _FencedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self._guard = guard

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_FencedHTTPS, guard=self._guard), req)  # type: ignore[arg-type]


def _always() -> bool:
    return True


def post_json(
    url: str, body: bytes, headers: dict[str, str], timeout: float, guard: Guard | None = None
) -> None:
    """POST the JSON ``body``; ``guard`` is asked once the connection is up, right before
    the first byte (False: ``NotHolding``, nothing written). Failures raise
    ``DeliveryError`` with credentials masked."""
    target, auth = split_userinfo(url)
    shown = mask(target)  # what an error may say about the receiver
    request = urllib.request.Request(
        target,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "model-monitor",
            **auth,
            **headers,
        },
    )
    g = guard or _always
    opener = urllib.request.build_opener(_FencedHTTPHandler(g), _FencedHTTPSHandler(g))
    try:
        with opener.open(request, timeout=timeout) as resp:
            resp.read(65536)
    except urllib.error.HTTPError as err:
        detail = err.read(300).decode("utf-8", "replace").strip()
        raise DeliveryError(mask(f"{shown} answered {err.code}: {detail}")) from None
    except (OSError, ValueError) as err:  # URLError, timeouts, refused, reset
        raise DeliveryError(mask(f"{shown}: {err}")) from None


class AlertmanagerNotifier:
    """Alertmanager API v2: ``POST {url}/api/v2/alerts`` with a JSON list."""

    name = "alertmanager"

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        parts = urllib.parse.urlsplit(url)  # the API path goes before any query
        self.url = urllib.parse.urlunsplit(
            parts._replace(path=parts.path.rstrip("/") + "/api/v2/alerts")
        )
        self.timeout = timeout

    def send(
        self, alerts: Sequence[Alert], now: float, horizon_s: float, guard: Guard | None = None
    ) -> None:
        body = orjson.dumps(alertmanager_payload(alerts, now, horizon_s))
        post_json(self.url, body, {}, self.timeout, guard)


class WebhookNotifier:
    """Any HTTP endpoint; the body is signed with HMAC-SHA256 when a secret is set, so
    the receiver can check it came from this monitor and was not altered."""

    name = "webhook"

    def __init__(self, url: str, secret: str | None = None, timeout: float = 5.0) -> None:
        self.url = url
        self._secret = secret
        self.timeout = timeout

    def send(
        self, alerts: Sequence[Alert], now: float, horizon_s: float, guard: Guard | None = None
    ) -> None:
        body = orjson.dumps(webhook_payload(alerts, now, horizon_s))
        headers = {SIGNATURE_HEADER: sign(self._secret, body)} if self._secret else {}
        post_json(self.url, body, headers, self.timeout, guard)


@dataclass(frozen=True, slots=True)
class ReceiverStats:
    receiver: str
    sent: int  # alerts delivered (a re-send counts again)
    failed: int  # alerts in failed attempts (each retry counts again)
    dropped: int  # alerts dropped from a full queue
    queued: int  # alerts waiting now
    last_error: str | None
    last_success_at: float | None


@dataclass(frozen=True, slots=True)
class DeliveryStats:
    receivers: tuple[ReceiverStats, ...] = ()

    @property
    def queued(self) -> int:
        return sum(r.queued for r in self.receivers)


Key = tuple[tuple[str, str], ...]


class _Receiver:
    """One notifier's queue, counters, backoff and worker thread."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier
        self.queue: OrderedDict[Key, Alert] = OrderedDict()
        self.sent = self.failed = self.dropped = 0
        self.attempt = 0  # consecutive failures
        self.next_attempt = 0.0  # monotonic
        self.next_resend = 0.0  # monotonic
        self.resend_offset = 0  # rotation of re-sends (see Dispatcher._resend)
        self.last_error: str | None = None
        self.last_success_at: float | None = None
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None


class Dispatcher:
    """Keeps the set of firing alerts per source and delivers changes to every receiver.

    Sources (``"slo"``, ``"checkpoint"``, ``"drift"``, ``"comparison"``) each own a set of
    alerts: ``sync(source, firing, resolved)`` declares the complete current firing set
    of that source. New alerts are queued at once; alerts that left the set are resolved;
    the rest are re-sent every ``resend_interval``.
    """

    def __init__(
        self,
        notifiers: Sequence[Notifier],
        *,
        resend_interval: float = 60.0,
        max_queue: int = 1000,
        retry_initial: float = 1.0,
        retry_max: float = 60.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.resend_interval = resend_interval
        self.horizon_s = ENDS_AFTER_RESENDS * resend_interval
        self.max_queue = max_queue
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self._clock = clock
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._active: dict[str, dict[Key, Alert]] = {}
        self._receivers = [_Receiver(n) for n in notifiers]
        self._stopping = threading.Event()
        self._flush_deadline = 0.0
        # whether this instance may send now (the exporter lease); None: always
        self.holding: Callable[[], bool] | None = None

    @property
    def receivers(self) -> tuple[str, ...]:
        return tuple(r.notifier.name for r in self._receivers)

    # -- producers (the evaluation thread, the consumer thread) -------------------------
    def _may_send(self) -> bool:
        """Whether this instance sends; when it may not, everything it would have sent
        (firing sets, queues) is dropped: another instance is the sender now."""
        if self.holding is None or self.holding():
            return True
        with self._lock:
            dropped = sum(len(a) for a in self._active.values())
            dropped += sum(len(r.queue) for r in self._receivers)
            self._active.clear()
            for r in self._receivers:
                r.queue.clear()
        if dropped:
            log.info("not the exporter (lease not held): %d firing or queued alert(s) left "
                     "to the instance that holds it", dropped)  # fmt: skip
        return False

    def sync(self, source: str, firing: Sequence[Alert], resolved: Sequence[Alert] = ()) -> None:
        """Declare ``source``'s firing alerts now; O(alerts), never blocks on I/O."""
        if not self._may_send():
            return
        now = self._clock()
        with self._lock:
            prev = self._active.get(source, {})
            current = {a.key: a for a in firing if a.firing}
            out: list[Alert] = []
            explicit = set()
            for a in resolved:
                old = prev.get(a.key)
                start = old.starts_at if old is not None else a.starts_at
                out.append(replace(a, starts_at=start, ends_at=a.ends_at or now))
                explicit.add(a.key)
            for key, old in prev.items():
                if key not in current and key not in explicit:
                    out.append(old.resolved(now))
            for key, a in current.items():
                old = prev.get(key)
                if old is None:
                    out.append(a)
                else:  # keep the original start; content (values) refreshes on re-send
                    current[key] = replace(a, starts_at=old.starts_at)
            self._active[source] = current
            for r in self._receivers:
                for a in out:
                    self._enqueue(r, a)
        if out:
            for r in self._receivers:
                r.wake.set()

    def active(self) -> tuple[Alert, ...]:
        with self._lock:
            return tuple(a for alerts in self._active.values() for a in alerts.values())

    def pending(self, receiver: str) -> tuple[Alert, ...]:
        """The alerts waiting for ``receiver``, oldest first."""
        with self._lock:
            for r in self._receivers:
                if r.notifier.name == receiver:
                    return tuple(r.queue.values())
        raise KeyError(receiver)

    def _enqueue(self, r: _Receiver, alert: Alert, front: bool = False) -> None:
        """Caller holds the lock. Coalesce by identity; drop the oldest when full."""
        if alert.key in r.queue:
            if front:
                return  # a newer version is already waiting
            del r.queue[alert.key]
        r.queue[alert.key] = alert
        if front:
            r.queue.move_to_end(alert.key, last=False)
        while len(r.queue) > self.max_queue:
            r.queue.popitem(last=False)
            r.dropped += 1

    def _resend(self, r: _Receiver) -> None:
        """Caller holds the lock. Queue every firing alert again. With more firing alerts
        than ``max_queue`` the start rotates each time, so the ones dropped this round are
        the ones kept next round and every alert is delivered within a few intervals."""
        alerts = [a for source in self._active.values() for a in source.values()]
        n = len(alerts)
        if not n:
            return
        k = r.resend_offset % n
        for a in alerts[k:] + alerts[:k]:
            self._enqueue(r, a)
        r.resend_offset = (k - min(n, self.max_queue)) % n

    # -- observation ------------------------------------------------------------------
    def stats(self) -> DeliveryStats:
        with self._lock:
            return DeliveryStats(
                tuple(
                    ReceiverStats(
                        r.notifier.name,
                        r.sent,
                        r.failed,
                        r.dropped,
                        len(r.queue),
                        r.last_error,
                        r.last_success_at,
                    )
                    for r in self._receivers
                )
            )

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        for r in self._receivers:
            if r.thread is None:
                r.next_resend = self._monotonic() + self.resend_interval
                r.thread = threading.Thread(
                    target=self._work, args=(r,), name=f"alerts-{r.notifier.name}", daemon=True
                )
                r.thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Try to deliver what is queued (one more attempt per receiver, within
        ``timeout`` seconds), then stop. True if every queue was emptied."""
        self._flush_deadline = self._monotonic() + timeout
        self._stopping.set()
        for r in self._receivers:
            r.wake.set()
        for r in self._receivers:
            if r.thread is not None:
                r.thread.join(max(0.0, self._flush_deadline - self._monotonic()))
        with self._lock:
            return all(not r.queue for r in self._receivers)

    # -- the worker -------------------------------------------------------------------
    def _work(self, r: _Receiver) -> None:
        final_attempt_done = False
        while True:
            r.wake.clear()  # before looking, so a sync() from now on wakes the wait below
            stopping = self._stopping.is_set()
            now_m = self._monotonic()
            batch: list[Alert] = []
            sending = self._may_send()
            with self._lock:
                if sending and not stopping and now_m >= r.next_resend:
                    self._resend(r)
                    r.next_resend = now_m + self.resend_interval
                due = now_m >= r.next_attempt or (stopping and not final_attempt_done)
                if r.queue and due:
                    for _ in range(min(_BATCH, len(r.queue))):
                        _, a = r.queue.popitem(last=False)
                        batch.append(a)
                waits = [r.next_resend - now_m]
                if r.queue:
                    waits.append(r.next_attempt - now_m)
            if batch:
                self._deliver(r, batch)
                if stopping:
                    final_attempt_done = True
                continue
            if stopping:
                return
            r.wake.wait(max(0.01, min(waits)))
            if self._stopping.is_set() and self._monotonic() > self._flush_deadline:
                return

    def _deliver(self, r: _Receiver, batch: list[Alert]) -> None:
        if not self._may_send():  # the lease ran out since the batch was taken
            return
        now = self._clock()
        try:
            r.notifier.send(batch, now, self.horizon_s, self.holding)
        except NotHolding:  # lost while connecting (or paused): nothing was written
            if self._may_send():  # (held again already: the batch waits for the next try)
                with self._lock:
                    for a in reversed(batch):
                        self._enqueue(r, a, front=True)
            return
        except Exception as err:
            with self._lock:
                r.failed += len(batch)
                r.attempt += 1
                backoff = min(self.retry_max, self.retry_initial * 2 ** (r.attempt - 1))
                r.next_attempt = self._monotonic() + backoff * (0.5 + 0.5 * self._rng.random())
                r.last_error = mask(str(err))  # a notifier's own error may carry a URL
                for a in reversed(batch):
                    self._enqueue(r, a, front=True)
            if r.attempt == 1 or r.attempt % 10 == 0:
                log.warning(
                    "alert delivery to %s failed (attempt %d, retry in %.1fs): %s",
                    r.notifier.name,
                    r.attempt,
                    backoff,
                    err,
                )
            return
        with self._lock:
            r.sent += len(batch)
            if r.attempt:
                log.info("alert delivery to %s recovered", r.notifier.name)
            r.attempt = 0
            r.next_attempt = 0.0
            r.last_error = None
            r.last_success_at = now
