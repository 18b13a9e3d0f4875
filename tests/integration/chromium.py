"""Real headless Chromium (Debian ``chromium``) for the status page and HTML report tests,
and a stdlib parser for the numbers a page carries (``data-k`` / ``data-v``)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import subprocess
import time
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from conftest import require_binary

__all__ = ["ARTIFACTS", "Chromium", "PageValues", "expected_values", "parse_page"]

REPO = Path(__file__).resolve().parents[2]
# Screenshots are kept here as test artefacts (git-ignored); CI can upload the directory.
ARTIFACTS = Path(os.environ.get("MONITOR_TEST_ARTIFACTS", REPO / "test-artifacts"))


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe
    (``--remote-debugging-pipe``: NUL-separated JSON on fds 3 and 4, stdlib only).
    JavaScript is disabled in the page (``Emulation.setScriptExecutionDisabled``): the
    page must be complete without it. Use as a context manager."""

    def __init__(self, profile: Path) -> None:
        self.binary = require_binary("chromium", hint="apt-get install chromium fonts-dejavu-core")
        self.profile = profile
        self._buf = b""
        self._id = 0

    def __enter__(self) -> Chromium:
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()

        def child_fds() -> None:  # the protocol's fixed descriptors: 3 in, 4 out
            a, b = os.dup(cmd_r), os.dup(out_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--no-first-run", "--disable-extensions", "--disable-background-networking",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "about:blank"],
            pass_fds=(3, 4),
            preexec_fn=child_fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(cmd_r)
        os.close(out_w)
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self._call("Emulation.setScriptExecutionDisabled", {"value": True}, page=True)
        self._call("Page.enable", {}, page=True)
        self._call("Network.enable", {}, page=True)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, EOFError, RuntimeError):
            self._call("Browser.close", {})
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._cmd_w)
        os.close(self._out_r)

    # protocol
    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._out_r], [], [], 1.0)
            if not ready:
                assert time.monotonic() < deadline, "chromium did not answer within 60s"
                continue
            chunk = os.read(self._out_r, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed its pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def _call(
        self,
        method: str,
        params: Mapping[str, Any],
        page: bool = False,
        events: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": dict(params)}
        if page:
            msg["sessionId"] = self._session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read()
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            if events is not None:
                events.append(m)

    # what tests use
    def open(self, url: str, headers: Mapping[str, str] | None = None) -> int:
        """Load ``url`` (with extra request ``headers``) and wait for its load event;
        returns the status of the document's response."""
        self._call("Network.setExtraHTTPHeaders", {"headers": dict(headers or {})}, page=True)
        events: list[dict[str, Any]] = []
        self._call("Page.navigate", {"url": url}, page=True, events=events)
        while not any(e.get("method") == "Page.loadEventFired" for e in events):
            events.append(self._read())
        statuses = [
            e["params"]["response"]["status"]
            for e in events
            if e.get("method") == "Network.responseReceived" and e["params"]["type"] == "Document"
        ]
        return int(statuses[-1]) if statuses else 0

    def evaluate(self, expression: str) -> Any:
        """Evaluate in the page (DevTools evaluation runs even with page scripts off)."""
        r = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                       page=True)  # fmt: skip
        return r["result"].get("value")

    def dom(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML"))

    def scripts_disabled(self) -> bool:
        """Proof that JavaScript is off: an inline script that would set the title."""
        self.open("data:text/html,<title>off</title><script>document.title='on'</script>")
        return self.evaluate("document.title") == "off"

    def screenshot(self, path: Path, width: int = 1280) -> Path:
        """The whole page, kept as a test artefact."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        metrics = {"width": width, "height": min(height, 12_000), "deviceScaleFactor": 1,
                   "mobile": False}  # fmt: skip
        self._call("Emulation.setDeviceMetricsOverride", metrics, page=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        shot = self._call("Page.captureScreenshot", {"format": "png"}, page=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        top = {"x": 0, "y": 0, "width": width, "height": min(height, 1100), "scale": 1}
        shot = self._call("Page.captureScreenshot", {"format": "png", "clip": top}, page=True)
        path.with_name(path.stem + "-top.png").write_bytes(base64.b64decode(shot["data"]))
        print(f"screenshots: {path} and its first screen {path.stem}-top.png")
        return path


class PageValues(HTMLParser):
    """Every ``data-k``/``data-v`` pair, the models, versions and window headings, and
    the number of table rows."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.values: dict[str, str] = {}
        self.texts: dict[str, str] = {}
        self._text_key: str | None = None
        self._text: list[str] = []
        self.models: list[str] = []
        self.versions: dict[str, list[str]] = {}
        self.windows: dict[tuple[str, str], list[str]] = {}
        self.table_rows = 0
        self.scripts = 0
        self.refresh: str | None = None
        self._model = ""
        self._version = ""
        self._h4: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if "data-k" in a:
            key = a["data-k"] or ""
            assert key not in self.values or self.values[key] == a.get("data-v"), key
            self.values[key] = a.get("data-v") or ""
            self._text_key, self._text = key, []
        if "data-model" in a:
            self._model = a["data-model"] or ""
            self.models.append(self._model)
            self.versions[self._model] = []
        if "data-version" in a:
            self._version = a["data-version"] or ""
            self.versions[self._model].append(self._version)
        if tag == "h4" and self._version:
            self._h4 = []
        if tag == "tr":
            self.table_rows += 1
        if tag == "script":
            self.scripts += 1
        if tag == "meta" and (a.get("http-equiv") or "").lower() == "refresh":
            self.refresh = a.get("content")

    def handle_data(self, data: str) -> None:
        if self._text_key is not None:
            self._text.append(data)
        if self._h4 is not None:
            self._h4.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._text_key is not None and tag in ("td", "b", "span"):
            self.texts[self._text_key] = "".join(self._text).strip()
            self._text_key = None
        if tag == "h4" and self._h4 is not None:
            text = "".join(self._h4).strip()
            if text.startswith("window "):
                key = (self._model, self._version)
                self.windows.setdefault(key, []).append(text.removeprefix("window "))
            self._h4 = None
        if tag == "section":
            self._version = ""


def parse_page(html: str) -> PageValues:
    p = PageValues()
    p.feed(html)
    p.close()
    return p


def _v(x: Any) -> str:
    return "" if x is None else repr(float(x)) if isinstance(x, float) else str(x)


def expected_values(
    results: Sequence[Mapping[str, Any]],
    comparisons: Sequence[Mapping[str, Any]] = (),
    drift: Sequence[Mapping[str, Any]] = (),
    slos: Sequence[Mapping[str, Any]] = (),
) -> dict[str, str]:
    """What the page must carry, straight from the API's (or report's) JSON."""
    out: dict[str, str] = {}
    for r in results:
        base = "|".join((r["model"], r["version"], r["window"], r["slice"]))
        for f in ("labeled", "label_coverage"):
            out[f"result|{base}|{f}"] = _v(r[f])
        if r["slice"] == "all":
            out[f"result|{base}|predictions"] = _v(r["predictions"])
            for name, m in r["metrics"].items():
                out[f"metric|{base}|{name}|value"] = _v(m["value"])
                out[f"metric|{base}|{name}|n"] = _v(m["n"])
                if m["ci_lower"] is not None and m["ci_upper"] is not None:
                    out[f"metric|{base}|{name}|ci"] = f"{m['ci_lower']!r},{m['ci_upper']!r}"
    for c in comparisons:
        out[f"comparison|{c['name']}|decision"] = c["decision"]
        if "effect" in c:
            out[f"comparison|{c['name']}|effect"] = _v(c["effect"])
            cs = c["confidence_sequence"]
            if cs["lower"] is not None and cs["upper"] is not None:
                out[f"comparison|{c['name']}|cs"] = f"{cs['lower']!r},{cs['upper']!r}"
    for d in drift:
        for f in d["features"]:
            k = "|".join(("drift", d["model"], d["version"], d["window"], f["feature"]))
            out[f"{k}|effect"] = _v(f["effect"])
            out[f"{k}|p_adjusted"] = _v(f["p_adjusted"])
    for s in slos:
        k = "|".join(("slo", s["name"], s["version"], s["slice"]))
        out[f"{k}|value"] = _v(s["value"])
        out[f"{k}|state"] = s["state"]
    return out
