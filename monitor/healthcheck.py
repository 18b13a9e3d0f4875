"""The container's health probe: ``GET /healthz`` on the port the configuration serves.

``python -m monitor.healthcheck [CONFIG]`` exits 0 when ``/healthz`` answers 200 and 1
otherwise. The address comes from the same places the daemon reads it — the TOML file's
``[http]`` section, then the ``MONITOR_HTTP__*`` environment overrides — so a config that
moves the port moves the probe with it. Only the standard library is imported (tomllib,
urllib): the probe runs every 30 s and must not pay for the daemon's imports.
"""

from __future__ import annotations

import os
import ssl
import sys
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["healthz_url", "main"]

DEFAULT_CONFIG = Path("/etc/model-monitor/config.toml")
_WILDCARD = {"", "0.0.0.0", "::", "[::]"}


def healthz_url(config: Path, env: dict[str, str] | None = None) -> str:
    """Where the daemon configured by ``config`` (and ``env``) serves /healthz."""
    env = dict(os.environ) if env is None else env
    http: dict[str, Any] = {}
    if config.is_file():
        http = tomllib.loads(config.read_text("utf-8")).get("http", {})
    host = str(env.get("MONITOR_HTTP__HOST", http.get("host", "127.0.0.1")))
    port = int(env.get("MONITOR_HTTP__PORT", http.get("port", 9108)))
    tls = env.get("MONITOR_HTTP__TLS_CERTFILE", http.get("tls_certfile"))
    if host in _WILDCARD:
        host = "127.0.0.1"  # listening everywhere: loopback reaches it
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}/healthz"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    url = healthz_url(Path(args[0]) if args else DEFAULT_CONFIG)
    # the daemon's own certificate is usually not valid for 127.0.0.1: liveness only
    context = ssl._create_unverified_context() if url.startswith("https") else None
    try:
        with urllib.request.urlopen(url, timeout=4, context=context) as resp:
            return 0 if resp.status == 200 else 1
    except Exception as err:
        print(f"healthcheck: {url}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
