"""An unexpected failure inside the consumer loop leaves the last good checkpoint alone.

A batch that raised half way may be partly applied to the engine; a final checkpoint of
that state would make the restart (which re-reads the batch from the checkpointed
offsets) count part of it twice.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.ingest.deadletter import DeadLetterSink
from monitor.ingest.pipeline import RawRecord
from monitor.state.checkpoint import CheckpointStore


class _CrashingDaemon(Daemon):
    """Applies some predictions, checkpoints, applies more, then fails like a bug would."""

    def _consume(self, sink: DeadLetterSink) -> None:
        self.owner.start(sink)
        pipeline = self.owner.pipeline  # type: ignore[attr-defined]

        def batch(lo: int, hi: int) -> list[RawRecord]:
            return [
                RawRecord(
                    orjson.dumps(
                        {
                            "id": f"p{i}",
                            "ts": 1_700_000_000_000 + i,
                            "model": "fraud",
                            "version": "v1",
                            "score": 0.7,
                        }
                    ),
                    "predictions",
                )
                for i in range(lo, hi)
            ]

        pipeline.process("predictions", batch(0, 10))
        assert self.checkpoint(sink, None)
        pipeline.process("predictions", batch(10, 25))
        raise RuntimeError("a bug in the middle of a batch")


def test_no_checkpoint_after_a_crash(tmp_path: Path) -> None:
    settings = settings_from_mapping(
        {
            "http": {"port": 0},
            "state": {"dir": str(tmp_path / "state")},
            "models": [{"name": "fraud"}],
        }
    )
    daemon = _CrashingDaemon(settings)
    with pytest.raises(RuntimeError, match="a bug"):
        daemon.run()
    loaded = CheckpointStore(settings.state.dir).load()
    assert loaded is not None
    assert loaded.meta["pending"] == 10  # the checkpoint before the failure, not 25
    assert daemon.engine.pending == 25
