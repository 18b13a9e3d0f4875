"""The dead-letter file: capped and rotated, values of oversize records cut, and a disk
that stops taking writes (``RLIMIT_FSIZE`` in a child process: ``EFBIG``, as a full
disk's ``ENOSPC``) counted, never raised — the consumer loop must go on."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson

from monitor.engine.records import Rejection
from monitor.ingest.deadletter import MAX_VALUE_BYTES, FileDeadLetter

REPO = Path(__file__).resolve().parents[2]


def _rejections(n: int, size: int = 200, start: int = 0) -> list[Rejection]:
    return [
        Rejection("not_json", "bad", b"%06d" % i + b"x" * size, "predictions", 0, i)
        for i in range(start, start + n)
    ]


def _offsets(path: Path) -> list[int]:
    return [json.loads(line)["offset"] for line in path.read_bytes().splitlines()]


def test_the_file_is_capped_and_rotated(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere" / "dl.jsonl"
    sink = FileDeadLetter(path, max_bytes=8192, keep=2)
    for k in range(30):  # 600 entries of ~380 bytes: ~28 files' worth
        sink.write(_rejections(20, start=20 * k))
    sink.close()
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["dl.jsonl", "dl.jsonl.1", "dl.jsonl.2"], files
    for name in files:
        assert (path.parent / name).stat().st_size <= 8192, name
        assert (path.parent / name).stat().st_mode & 0o777 == 0o600
    # the newest entries are in the current file, the older ones behind in order
    newest, older, oldest = (_offsets(path.parent / n) for n in files)
    assert newest[-1] == 599 and oldest[-1] + 1 == older[0] and older[-1] + 1 == newest[0]
    assert sink.faults["dead_letter_rotated"] >= 25 and not sink.faults["dead_letter_lost"]


def test_an_oversize_value_is_cut_and_says_how_long_it_was(tmp_path: Path) -> None:
    sink = FileDeadLetter(tmp_path / "dl.jsonl")  # replay's: no cap
    raw = b"{" + b"7" * (2 << 20)
    sink.write([Rejection("oversize", "2 MB", raw, "predictions", 3, 42)])
    sink.close()
    (line,) = (tmp_path / "dl.jsonl").read_bytes().splitlines()
    entry = orjson.loads(line)
    assert entry["truncated_from"] == len(raw)
    assert base64.b64decode(entry["value_b64"]) == raw[:MAX_VALUE_BYTES]
    assert sink.faults["dead_letter_truncated"] == 1


def test_a_full_disk_is_counted_never_raised(tmp_path: Path) -> None:
    """In a child process whose files may not grow past 64 KiB: the writes past it fail
    (EFBIG), are counted and lost, and a later write that fits still succeeds."""
    script = textwrap.dedent(
        f"""
        import json, resource, sys
        sys.path.insert(0, {str(REPO / "tests" / "unit")!r})
        from test_dead_letter_file import _rejections
        from monitor.ingest.deadletter import FileDeadLetter
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        sink = FileDeadLetter({str(tmp_path / "dl.jsonl")!r}, max_bytes=1 << 30)
        for k in range(10):
            sink.write(_rejections(50, size=300, start=50 * k))  # ~26 KB each
        sink.flush()
        full = dict(sink.faults)
        error = sink.error
        sink.close()
        print(json.dumps({{"faults": full, "error": error}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["faults"]["dead_letter_write_failed"] >= 8, out
    assert out["faults"]["dead_letter_lost"] == 50 * 8, out  # two batches fit in 64 KiB
    assert "File too large" in out["error"], out
    kept = _offsets(tmp_path / "dl.jsonl")  # whole lines only: the partial one was cut off
    assert kept == list(range(100)), kept[-5:]
