"""Replay input: chunked JSONL reading (plain and gzip), line numbers as offsets, blank
lines skipped, and a clear failure when the input gives nothing to report."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import settings_from_mapping
from monitor.ingest import files
from monitor.ingest.files import JsonlReader, interleave
from monitor.replay import ReplayError, replay
from monitor.synthetic import binary_traffic

LINES = st.lists(
    st.one_of(
        # (a plain file cannot start with gzip's magic: 0x8b is no UTF-8 lead byte)
        st.binary(min_size=1, max_size=40).filter(
            lambda b: b"\n" not in b and not b.startswith(b"\x1f")
        ),
        st.sampled_from([b"", b" ", b"\t\r", b"\r", b'{"a": 1}\r', b'{"id": "x"}']),
    ),
    max_size=60,
)


def _read_all(path: Path, batch_size: int) -> list[tuple[bytes, int]]:
    reader = JsonlReader(path, "t", batch_size=batch_size)
    out = []
    while not reader.done:
        batch = reader.next_batch()
        assert len(batch.values) <= batch_size
        for i, value in enumerate(batch.values):
            topic, partition, offset = batch.origin(i)
            assert (topic, partition) == ("t", 0)
            out.append((value, offset))
        if batch.values:
            assert batch.next_offsets == {"t:0": out[-1][1] + 1}
    return out


@settings(max_examples=60, deadline=None)
@given(lines=LINES, batch_size=st.integers(1, 9), chunk=st.integers(1, 64), newline=st.booleans())
def test_lines_and_numbers_as_readline_gives_them(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[bytes],
    batch_size: int,
    chunk: int,
    newline: bool,
) -> None:
    """Whatever the chunk size and batch size, every non-blank line comes out once, CR
    stripped, with its 0-based line number — plain and gzip alike."""
    data = b"\n".join(lines) + (b"\n" if newline and lines else b"")
    expected = []
    for n, line in enumerate(data.split(b"\n")[: len(lines)] if data else []):
        if line.strip(b" \t\r"):  # blank: JSON whitespace only (a VT or FF is a record)
            expected.append((line[:-1] if line.endswith(b"\r") else line, n))
    d = tmp_path_factory.mktemp("lines")
    plain, packed = d / "p.jsonl", d / "p.jsonl.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    old = files._CHUNK_BYTES
    files._CHUNK_BYTES = chunk
    try:
        assert _read_all(plain, batch_size) == expected
        assert _read_all(packed, batch_size) == expected
    finally:
        files._CHUNK_BYTES = old


def test_gzip_is_recognised_by_content_and_progress_counts_compressed_bytes(
    tmp_path: Path,
) -> None:
    data = b"".join(b'{"i": %d}\n' % i for i in range(50_000))
    path = tmp_path / "no-suffix"
    path.write_bytes(gzip.compress(data))
    reader = JsonlReader(path, "t", batch_size=10_000)
    assert reader.compressed
    seen = 0
    while not reader.done:
        seen += len(reader.next_batch().values)
        assert 0 <= reader.bytes_read <= reader.size
    assert seen == 50_000 and reader.fraction == 1.0


def _config(tmp_path: Path) -> object:
    return settings_from_mapping(
        {"state": {"dir": str(tmp_path / "state")},
         "models": [{"name": "fraud", "windows": [{"size": "1d"}]}]}
    )  # fmt: skip


def _traffic(tmp_path: Path) -> tuple[bytes, bytes]:
    t = binary_traffic(3000, seed=3, start_ms=1_700_000_000_000)
    return (
        b"".join(orjson.dumps(p) + b"\n" for p in t.predictions),
        b"".join(orjson.dumps(x) + b"\n" for x in t.labels),
    )


def test_gzip_replay_equals_plain_replay(tmp_path: Path) -> None:
    preds, labels = _traffic(tmp_path)
    (tmp_path / "p.jsonl").write_bytes(preds)
    (tmp_path / "l.jsonl").write_bytes(labels)
    (tmp_path / "p.jsonl.gz").write_bytes(gzip.compress(preds))
    (tmp_path / "l.jsonl.gz").write_bytes(gzip.compress(labels))
    s = _config(tmp_path)
    plain = replay(s, tmp_path / "p.jsonl", tmp_path / "l.jsonl", progress=None)
    packed = replay(s, tmp_path / "p.jsonl.gz", tmp_path / "l.jsonl.gz", progress=None)
    assert plain["results"] and plain["results"] == packed["results"]
    counts = [
        [(r["outcome"], r["count"]) for r in x["operations"]["records"]] for x in (plain, packed)
    ]
    assert counts[0] == counts[1] and ("accepted", 3000) in counts[0]


@pytest.mark.parametrize(
    ("preds", "labels", "message"),
    [
        (b"", b"", "no predictions in it (empty file)"),
        (b"\n  \n", b"", "no predictions in it (empty file)"),
        (b"not json\n[1]\n", b"", "none of its 2 predictions is valid (not_json 1, not_object 1)"),
        (None, b'{"id": "x"}\n', "none of its 1 labels is valid (missing_field 1)"),
    ],
)
def test_nothing_valid_is_an_error_naming_the_file(
    tmp_path: Path, preds: bytes | None, labels: bytes, message: str
) -> None:
    good_preds, _ = _traffic(tmp_path)
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pf.write_bytes(good_preds if preds is None else preds)
    lf.write_bytes(labels)
    with pytest.raises(ReplayError, match=message.replace("(", r"\(").replace(")", r"\)")):
        replay(_config(tmp_path), pf, lf, progress=None)


def test_empty_labels_are_fine_without_them_nothing_joins(tmp_path: Path) -> None:
    preds, _ = _traffic(tmp_path)
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pf.write_bytes(preds)
    lf.write_bytes(b"")
    report = replay(_config(tmp_path), pf, lf, progress=None)
    records = report["operations"]["records"]
    assert {(Path(r["topic"]).name, r["outcome"], r["count"]) for r in records} == {
        ("p.jsonl", "accepted", 3000)
    }


def test_cli_exits_nonzero_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(
        f'[state]\ndir = "{tmp_path / "state"}"\n[[models]]\nname = "fraud"\n'
    )
    (tmp_path / "p.jsonl.gz").write_bytes(gzip.compress(b"garbage\n"))
    (tmp_path / "l.jsonl").write_bytes(b"")
    run = subprocess.run(
        [sys.executable, "-m", "monitor", "replay", "-c", str(tmp_path / "c.toml"),
         "--predictions", str(tmp_path / "p.jsonl.gz"), "--labels", str(tmp_path / "l.jsonl")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "p.jsonl.gz: none of its 1 predictions is valid (not_json 1)" in run.stderr
    # the error says where the rejected records went, and they are there
    dead_letter = tmp_path / "state" / "replay-dead-letter.jsonl"
    assert f"reasons are in {dead_letter}" in run.stderr
    assert b'"reason":"not_json"' in dead_letter.read_bytes()
    assert run.stdout == ""


def test_interleave_advances_both_files(tmp_path: Path) -> None:
    preds, labels = _traffic(tmp_path)
    (tmp_path / "p").write_bytes(preds)
    (tmp_path / "l").write_bytes(labels)
    a = JsonlReader(tmp_path / "p", "p", batch_size=500)
    b = JsonlReader(tmp_path / "l", "l", batch_size=500)
    kinds = [kind for kind, batch in interleave(a, b) if batch.values]
    assert kinds.count("predictions") == 6 and kinds.count("labels") >= 5
    assert kinds.index("labels") < kinds.index("predictions") + 3  # not one file first
