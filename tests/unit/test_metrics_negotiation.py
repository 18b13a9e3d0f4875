"""/metrics answers in the format the scraper's Accept header asks for (prometheus-client's
``choose_encoder``), and ``mlmon_build_info`` names the build."""

from __future__ import annotations

import zlib

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from monitor.engine.snapshot import Snapshot, WindowResult
from monitor.export.exposition import Exposition
from monitor.export.http import Request
from monitor.export.published import Published
from monitor.version import _git_head, build

# what Prometheus 2.x/3.x sends by default
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


def _exposition() -> Exposition:
    result = WindowResult("fraud", "v1", "1h", "all", 0, 1000, 50, 40, ())
    pub = Published(snapshot=Snapshot(1000, (result,)))
    return Exposition(lambda: pub, CollectorRegistry(auto_describe=False))


def _get(exp: Exposition, **headers: str) -> tuple[str, bytes, dict[str, str]]:
    resp = exp.route(Request("GET", "/metrics", "", headers))
    body = resp.body
    extra = dict(resp.headers)
    if extra.get("Content-Encoding") == "gzip":
        body = zlib.decompress(body, 31)
    return resp.content_type, body, extra


@pytest.mark.parametrize("gzip", [False, True])
def test_openmetrics_when_asked(gzip: bool) -> None:
    exp = _exposition()
    enc = {"accept-encoding": "gzip"} if gzip else {}
    ctype, body, headers = _get(exp, accept=PROMETHEUS_ACCEPT, **enc)
    assert ctype.startswith("application/openmetrics-text; version=1.0.0"), ctype
    assert "Accept" in headers["Vary"]
    text = body.decode()
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    fams = {f.name: f for f in openmetrics_families(text)}  # the strict parser accepts it
    assert fams["mlmon_window_samples"].samples[0].value == 40
    # counters are OpenMetrics counters: family without _total, sample with it
    assert fams["mlmon_checkpoint_failures"].type == "counter"
    assert fams["mlmon_checkpoint_failures"].samples[0].name == "mlmon_checkpoint_failures_total"


@pytest.mark.parametrize("accept", ["", "text/plain;version=0.0.4", "*/*"])
def test_text_format_otherwise(accept: str) -> None:
    ctype, body, _ = _get(_exposition(), accept=accept)
    assert ctype == "text/plain; version=0.0.4; charset=utf-8"
    text = body.decode()
    assert "# EOF" not in text
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"mlmon_window_samples", "mlmon_checkpoint_failures", "mlmon_build_info"} <= names


def test_build_info_names_version_revision_and_branch(monkeypatch: pytest.MonkeyPatch) -> None:
    build.cache_clear()
    monkeypatch.setenv("MONITOR_BUILD_REVISION", "0123abc")
    monkeypatch.setenv("MONITOR_BUILD_BRANCH", "release-1")
    try:
        _, body, _ = _get(_exposition())
    finally:
        build.cache_clear()
    fams = text_string_to_metric_families(body.decode())
    (fam,) = [f for f in fams if f.name == "mlmon_build_info"]
    labels = fam.samples[0].labels
    assert labels["revision"] == "0123abc" and labels["branch"] == "release-1"
    assert labels["version"] and labels["python"].count(".") == 2


def test_revision_from_a_git_checkout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An editable install reads the checkout's HEAD: a branch ref, a packed ref, a
    worktree's .git file, a detached HEAD."""
    sha1, sha2 = "a" * 40, "b" * 40
    repo = tmp_path / "repo"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads" / "main").write_text(sha1 + "\n")
    assert _git_head(repo) == (sha1, "main")
    (repo / ".git" / "refs" / "heads" / "main").unlink()
    (repo / ".git" / "packed-refs").write_text(f"# pack-refs\n{sha2} refs/heads/main\n")
    assert _git_head(repo) == (sha2, "main")
    wt_git = repo / ".git" / "worktrees" / "wt"
    wt_git.mkdir(parents=True)
    (wt_git / "commondir").write_text("../..\n")
    (wt_git / "HEAD").write_text("ref: refs/heads/main\n")
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".git").write_text(f"gitdir: {wt_git}\n")
    assert _git_head(wt) == (sha2, "main")
    (wt_git / "HEAD").write_text(sha1 + "\n")
    assert _git_head(wt) == (sha1, "")
    assert _git_head(tmp_path) is None
