"""Scrape load from a separate process: ``python scrape_load.py URL THREADS``.

Each thread GETs URL in a loop until stdin closes; then one JSON line says how many
scrapes completed and which failed. Run in the test's own process, fifty threads reading
megabyte pages hold its GIL and delay the test's probe requests by themselves, so a
probe's measured latency would be the test's, not the server's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ScrapeLoad"]


@dataclass
class ScrapeLoad:
    """``with ScrapeLoad(url, 50) as load: ...``; afterwards ``scrapes`` and ``errors``."""

    url: str
    threads: int
    scrapes: int = 0
    errors: list[str] = field(default_factory=list)
    _proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ScrapeLoad:
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__)), self.url, str(self.threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        started = self._proc.stdout.readline()
        assert started.strip() == "started", f"scrape load did not start: {started!r}"
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        if exc_type is not None:  # the test failed already: stop the load, report nothing
            self._proc.kill()
            self._proc.communicate()
            return
        try:
            out, _ = self._proc.communicate(timeout=90)  # closes stdin: the signal to stop
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            raise AssertionError("the scrapers did not stop within 90 s") from None
        result = json.loads(out)
        self.scrapes, self.errors = int(result["scrapes"]), list(result["errors"])


def _main(url: str, threads: int) -> None:
    stop = threading.Event()
    lock = threading.Lock()
    scrapes = [0]
    errors: list[str] = []

    def scraper() -> None:
        while not stop.is_set():
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    r.read()
                with lock:
                    scrapes[0] += 1
            except OSError as err:
                with lock:
                    errors.append(repr(err))

    pool = [threading.Thread(target=scraper, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    print("started", flush=True)
    sys.stdin.read()  # until the parent closes it
    stop.set()
    for t in pool:
        t.join(timeout=60)
    print(json.dumps({"scrapes": scrapes[0], "errors": errors}), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1], int(sys.argv[2]))
