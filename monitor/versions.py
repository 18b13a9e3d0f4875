"""``monitor versions list|retire``: see and retire a model's versions by name pattern.

Why: a model has at most ``max_versions`` live versions; a flood of junk versions (a
build id per request, a producer bug) fills the slots and a real new version — a
canary — is then rejected until the junk retires by itself (``version_idle_ttl``, seven
days by default). An operator retires the junk at once:

    monitor versions list -c config.toml [--model fraud]
    monitor versions retire -c config.toml --model fraud --pattern 'build-*'

A retired version stops counting against ``max_versions``; its history stays in the
windows until it ages out, and it comes back as a new version if it sends again.

How the command reaches the state, safely:

- **the daemon runs** (it holds ``<state dir>/lock``): through its API,
  ``GET /api/v1/versions`` and ``POST /api/v1/versions/retire?model=&pattern=`` — an
  *action*, answered only with basic auth configured (the command sends the
  configuration's credentials) and the ``X-Monitor-Request`` header; the retirement is
  in the next checkpoint. In ``scale.mode = "partitioned"`` an instance retires in the
  partitions it owns: give each instance's address with ``--url``;
- **the daemon is stopped**: the command takes the state directory's lock itself (so no
  daemon can start meanwhile), loads the checkpoint through the usual validated path,
  retires, and writes a new checkpoint (the previous one kept as the fallback).
"""

from __future__ import annotations

import base64
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Protocol

from .engine.groups import VersionInfo
from .export.http import Request, Response, Route, json_response

if TYPE_CHECKING:
    import argparse
    import threading

    from .config import Settings
    from .engine.core import Engine

__all__ = ["api_routes", "retire", "run_command", "version_table"]


class _Daemon(Protocol):
    """What of a daemon (``app.Daemon`` or its partitioned kind) versions needs: the
    daemon imports this module, so it is named by what it does, not imported."""

    settings: Settings
    lock: threading.RLock

    def engines(self) -> list[Engine]: ...

    def checkpoint(self, sink: Any, source: Any) -> bool: ...


def version_table(engines: Sequence[Engine]) -> list[VersionInfo]:
    """Every version of every model across ``engines`` (one, or a partitioned
    instance's partitions): live where live anywhere, counts summed."""
    merged: dict[tuple[str, str], VersionInfo] = {}
    for engine in engines:
        for v in engine.registry.versions():
            old = merged.get((v.model, v.version))
            if old is not None:
                v = VersionInfo(
                    v.model, v.version, v.live or old.live, max(v.last_seen_ms, old.last_seen_ms),
                    v.labeled + old.labeled, v.errors + old.errors,
                )  # fmt: skip
            merged[v.model, v.version] = v
    return [merged[k] for k in sorted(merged)]


def retire(engines: Sequence[Engine], model: str, pattern: str) -> list[str]:
    """Retire ``model``'s live versions matching ``pattern`` in every engine."""
    done: set[str] = set()
    for engine in engines:
        m = engine.registry.model_index[model]
        done.update(engine.registry.retire(m, pattern))
    return sorted(done)


def _listing(engines: Sequence[Engine], max_versions: dict[str, int]) -> dict[str, Any]:
    table = version_table(engines)
    blocked = sorted({b for e in engines for b in e.registry.blocked()})
    return {
        "models": [
            {
                "model": name,
                "max_versions": cap,
                "live": sum(1 for v in table if v.model == name and v.live),
                "versions": [asdict(v) for v in table if v.model == name],
                "blocked": [{"version": v, "rejected": n} for m, v, n in blocked if m == name],
            }
            for name, cap in max_versions.items()
        ]
    }


def api_routes(daemon: _Daemon) -> tuple[dict[str, Route], dict[str, Route]]:
    """(``GET /api/v1/versions``, the ``POST /api/v1/versions/retire`` action)."""
    caps = {m.name: m.max_versions for m in daemon.settings.models}

    def listing(_: Request) -> Response:
        with daemon.lock:
            return json_response(_listing(daemon.engines(), caps))

    def retire_action(req: Request) -> Response:
        args = dict(urllib.parse.parse_qsl(req.query))
        model, pattern = args.get("model", ""), args.get("pattern", "")
        if model not in caps or not pattern:
            return json_response(
                {"error": f"give model (one of {sorted(caps)}) and a non-empty pattern"}, 400
            )
        with daemon.lock:
            done = retire(daemon.engines(), model, pattern)
        return json_response({"model": model, "pattern": pattern, "retired": done})

    return {"/api/v1/versions": listing}, {"/api/v1/versions/retire": retire_action}


# -- the command ----------------------------------------------------------------------------
def _api(url: str, settings: Settings, path: str, method: str = "GET") -> Any:
    headers = {"X-Monitor-Request": "versions"}
    creds = settings.http.credentials()
    if creds is not None:
        token = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    request = urllib.request.Request(url.rstrip("/") + path, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        detail = err.read(500).decode("utf-8", "replace").strip()
        raise RuntimeError(f"{url}{path} answered {err.code}: {detail}") from None


def _daemon_url(settings: Settings) -> str:
    h = settings.http
    host = "127.0.0.1" if h.host in ("0.0.0.0", "", "::") else h.host
    scheme = "https" if h.tls_certfile else "http"
    return f"{scheme}://{host}:{h.port}"


def _offline(settings: Settings, act: Callable[[_Daemon], Any]) -> Any:
    """Run ``act`` on the checkpoint of a stopped daemon, holding its state lock."""
    from .app import Daemon

    daemon = Daemon(settings)
    daemon.state_lock.acquire()  # StateDirBusy when a daemon started meanwhile
    try:
        daemon.restore()
        return act(daemon)
    finally:
        daemon.state_lock.release()


def _print_listing(listing: dict[str, Any], model: str | None) -> None:
    for m in listing["models"]:
        if model is not None and m["model"] != model:
            continue
        print(f"{m['model']}: {m['live']} live of max_versions={m['max_versions']}")
        for v in m["versions"]:
            state = "live   " if v["live"] else "retired"
            print(f"  {state} {v['version']}  labeled={v['labeled']}  errors={v['errors']}  "
                  f"last_seen_ms={v['last_seen_ms']}")  # fmt: skip
        for b in m["blocked"]:
            print(f"  BLOCKED {b['version']}  {b['rejected']} prediction(s) rejected in the "
                  "last hour (max_versions): retire versions to let it in")  # fmt: skip


def run_command(args: argparse.Namespace, settings: Settings) -> int:
    """``monitor versions list|retire``; exit 0, 1 (the daemon or the state said no)."""
    from .app import StartupError
    from .state.lock import StateDirBusy

    url: str | None = args.url
    caps = {m.name: m.max_versions for m in settings.models}
    if args.model is not None and args.model not in caps:
        print(f"monitor versions: no model {args.model!r} (configured: {sorted(caps)})",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        if url is None and settings.scale.mode != "partitioned":
            try:  # a stopped daemon: its checkpoint, under its lock
                if args.action == "list":
                    listing = _offline(settings, lambda d: _listing(d.engines(), caps))
                    _print_listing(listing, args.model)
                    return 0
                retired = _offline(settings, lambda d: _retire_offline(d, args))
                print(f"retired {len(retired)} version(s) of {args.model} in the checkpoint: "
                      f"{', '.join(retired) or '(none matched)'}")  # fmt: skip
                return 0
            except StateDirBusy:
                url = _daemon_url(settings)  # the daemon runs: its API
        target = url or _daemon_url(settings)
        if args.action == "list":
            _print_listing(_api(target, settings, "/api/v1/versions"), args.model)
            return 0
        query = urllib.parse.urlencode({"model": args.model, "pattern": args.pattern})
        done = _api(target, settings, f"/api/v1/versions/retire?{query}", "POST")
        print(f"retired {len(done['retired'])} version(s) of {args.model} at {target}: "
              f"{', '.join(done['retired']) or '(none matched)'}")  # fmt: skip
        return 0
    except (OSError, RuntimeError, ValueError, StartupError) as err:
        print(f"monitor versions: {err}", file=sys.stderr)
        return 1


def _retire_offline(daemon: _Daemon, args: argparse.Namespace) -> list[str]:
    done = retire(daemon.engines(), args.model, args.pattern)
    if done and not daemon.checkpoint(None, None):
        raise RuntimeError("the new checkpoint could not be written (see the log)")
    return done
