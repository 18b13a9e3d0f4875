"""The stats topic reader's choice of generation and what it keeps of the topic's bytes.

Records are built as ``KafkaStateStore.store`` writes them (chunked, two slots, ranked by
fence, group generation and generation) and handed to the reader as a poll would; no
broker is needed for the choice itself (the broker path is covered by the partitioned
integration tests).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from itertools import count
from pathlib import Path

import orjson
import pytest

from monitor.config import settings_from_mapping
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import IngestPipeline, RawRecord
from monitor.scale.merge import decode, encode, partition_stats
from monitor.scale.stats_topic import StatsReader
from monitor.wiring import build_engine, build_pipeline

GROUP = "g"
CHUNK = 4096
_offsets = count()


@dataclass(frozen=True)
class Rec:
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]
    offset: int


def _chunks(blob: bytes, p: int, generation: int, fence: int = 1) -> list[Rec]:
    """``blob`` as the publisher writes generation ``generation`` of partition ``p``."""
    slot = generation % 2
    starts = range(0, len(blob), CHUNK)
    crc = zlib.crc32(blob)
    return [
        Rec(
            f"{GROUP}/{p}/{fence}-1-{slot}/{i}".encode(),
            blob[at : at + CHUNK],
            [
                ("generation", str(generation).encode()),
                ("chunk", f"{i}/{len(starts)}".encode()),
                ("crc", str(crc).encode()),
                ("size", str(len(blob)).encode()),
                ("fence", str(fence).encode()),
                ("group_generation", b"1"),
            ],
            next(_offsets),
        )
        for i, at in enumerate(starts)
    ]


def _blob(tmp: Path, predictions: int) -> tuple[bytes, int]:
    """Partition 0's statistics after ``predictions`` labeled predictions."""
    s = settings_from_mapping(
        {"evaluation": {"bucket_width": "1m"},
         "models": [{"name": "fraud", "windows": [{"size": "1h"}]}]}
    )  # fmt: skip
    engine = build_engine(s)
    pipe: IngestPipeline = build_pipeline(
        s, engine, FileDeadLetter(tmp / f"dl-{predictions}"), clock_ms=lambda: 1_700_000_000_000
    )
    ts = 1_700_000_000_000
    preds = [
        RawRecord(orjson.dumps({"id": f"r{i}", "ts": ts + i, "model": "fraud", "version": "v1",
                                "score": (i % 10) / 10}), "predictions")
        for i in range(predictions)
    ]  # fmt: skip
    labels = [
        RawRecord(orjson.dumps({"id": f"r{i}", "ts": ts + i + 1, "label": i % 2}), "labels")
        for i in range(predictions)
    ]
    pipe.process("predictions", preds)
    pipe.process("labels", labels)
    return encode(partition_stats(engine), ["fraud"], 0), engine.buckets.width_ms


def _held(reader: StatsReader, p: int = 0) -> int:
    """Bytes of the topic's records the reader still holds for ``p``."""
    return sum(len(r.value or b"") for r in reader._found[p].latest.values())


@pytest.fixture()
def blobs(tmp_path: Path) -> tuple[dict[int, bytes], int]:
    out = {}
    width = 0
    for n in (10, 20, 30, 40):
        out[n], width = _blob(tmp_path, n)
    return out, width


def test_the_reader_keeps_the_newest_generation_and_not_the_bytes_it_decoded(
    blobs: tuple[dict[int, bytes], int],
) -> None:
    by_n, width = blobs
    reader = StatsReader({}, GROUP, ["fraud"], width)
    reader.partitions = 1

    def read(recs: list[Rec]) -> None:
        reader._add(recs)
        reader._decode_dirty()

    def kept() -> bytes:
        return encode(reader.latest()[0], ["fraud"], 0)

    def same(blob: bytes) -> bool:
        return kept() == encode(decode(blob, ["fraud"], width, 0), ["fraud"], 0)

    read(_chunks(by_n[10], 0, generation=1))
    assert same(by_n[10])
    assert _held(reader) == 0, "the decoded generation's bytes are dropped"

    gen2 = _chunks(by_n[20], 0, generation=2)
    assert len(gen2) > 1
    read(gen2[:1])  # half-written: nothing to decode yet, its chunk kept
    assert same(by_n[10])
    assert _held(reader) == len(gen2[0].value or b"")
    read(gen2[1:])
    assert same(by_n[20])
    assert _held(reader) == 0
    assert reader.newest_generation(0) == 2

    # a zombie's complete generation ranked below the kept one: never decoded, dropped
    read(_chunks(by_n[30], 0, generation=7, fence=0))
    assert same(by_n[20])
    assert _held(reader) == 0

    # a higher-ranked generation that does not decode: refused once, counted, dropped
    read(_chunks(b"garbage" * 1000, 0, generation=3))
    assert same(by_n[20])
    assert reader.faults["stats_generation_rejected"] == 1
    assert _held(reader) == 0
    assert reader.newest_generation(0) == 7  # the publisher continues above all seen

    # the next good generation outranks the kept one: taken
    read(_chunks(by_n[40], 0, generation=4))
    assert same(by_n[40])
    assert _held(reader) == 0
    assert reader.faults["stats_generation_rejected"] == 1
