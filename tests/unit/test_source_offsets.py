"""The source side owns the offsets: the pipeline advances them with the state, the
daemon checkpoints them next to the engine's state and restores them for the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.ingest.deadletter import DeadLetterSink
from monitor.ingest.pipeline import RawRecord
from monitor.state.checkpoint import CheckpointStore


def _pred(i: int) -> bytes:
    return orjson.dumps(
        {"id": f"p{i}", "ts": 1_700_000_000_000 + i, "model": "fraud", "version": "v1",
         "score": 0.7}
    )  # fmt: skip


class _FeedingDaemon(Daemon):
    def _consume(self, sink: DeadLetterSink) -> None:
        self.owner.start(sink)
        pipeline = self.owner.pipeline  # type: ignore[attr-defined]
        assert pipeline.offsets is self.offsets
        pipeline.process(
            "predictions", [RawRecord(_pred(i), "preds", 1, 100 + i) for i in range(10)]
        )
        pipeline.process("predictions", [RawRecord(b"garbage", "preds", 0, 7)])
        # an older batch (re-delivered) never moves an offset back
        pipeline.process("predictions", [RawRecord(_pred(3), "preds", 1, 103)])
        return None


def _settings(tmp_path: Path) -> Any:
    return settings_from_mapping(
        {"http": {"port": 0}, "state": {"dir": str(tmp_path / "state")},
         "models": [{"name": "fraud"}]}
    )  # fmt: skip


def test_offsets_are_checkpointed_and_restored_outside_the_engine(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    daemon = _FeedingDaemon(s)
    assert daemon.run() == 0
    assert daemon.offsets == {"preds:1": 110, "preds:0": 8}
    meta, _ = state_codec.encode(daemon.engine)
    assert "offsets" not in meta  # the engine knows nothing of sources
    loaded = CheckpointStore(s.state.dir).load()
    assert loaded is not None and loaded.meta["offsets"] == {"preds:1": 110, "preds:0": 8}
    assert loaded.meta["pending"] == 10

    again = Daemon(s)
    again.restore()
    assert again.offsets == {"preds:1": 110, "preds:0": 8}
    assert again.engine.pending == 10
