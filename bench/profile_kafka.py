"""Profile the Kafka daemon's consume loop (bench (a)'s stream) with cProfile.

Run ``python bench/profile_kafka.py [--predictions N] [--client confluent|kafka-python]
[--top K] [--callers PATTERN] [--wall]``: starts tansu, produces bench (a)'s traffic (N
predictions, 550,000 by default, and the labels of about 90 % of them), runs the real
daemon over it once as bench (a) does, and prints the daemon's time by stage, its
consuming thread's CPU a message and the cProfile of that thread's consume loop, sorted
by each function's own time on the thread's CPU clock (``--wall``: the wall clock, which
charges the time the thread waited for the GIL or a core to whatever was running), and
the callers of the functions matching ``--callers``. The profile covers the whole loop
(the group join and the idle polls at the end too: the client's
``poll`` waits there), so read the per-message costs from the functions of the stream:
``consume``, the source's split, decoding, the engine's apply, and ``_poll_and_apply``'s
own time, which is mostly freeing the poll's messages.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import daemon_consume, produce_traffic

from monitor.app import Daemon
from monitor.localbroker import LocalBroker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--predictions", type=int, default=550_000)
    parser.add_argument("--client", choices=["confluent", "kafka-python"], default="confluent")
    parser.add_argument("--top", type=int, default=25, help="profile lines printed")
    parser.add_argument("--callers", help="also print the callers of functions matching this")
    parser.add_argument(
        "--wall", dest="cpu", action="store_false", help="profile by wall clock, not thread CPU"
    )
    args = parser.parse_args(argv)

    profile = cProfile.Profile(time.thread_time) if args.cpu else cProfile.Profile()
    consume_from = Daemon._consume_from

    def profiled(self: Daemon, source: Any, sink: Any) -> None:
        profile.enable()  # on the consume loop's thread only
        try:
            consume_from(self, source, sink)
        finally:
            profile.disable()

    Daemon._consume_from = profiled  # type: ignore[method-assign]
    work = Path(tempfile.mkdtemp(prefix="monitor-profile-kafka-"))
    broker = LocalBroker(log_path=work / "tansu.log")
    broker.start()
    try:
        broker.create_topics(["predictions", "labels"], partitions=1)
        n_pred, n_lab, _, _ = produce_traffic(broker.bootstrap, args.predictions)
        total = n_pred + n_lab
        rate, shares, _, thread_cpu = daemon_consume(
            args.client, broker.bootstrap, total, max(120.0, total / 2_000), work
        )
    finally:
        broker.stop()
        Daemon._consume_from = consume_from  # type: ignore[method-assign]
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{args.client}: {total:,} messages at {rate:,.0f} msg/s; consuming thread "
        f"{1e6 * thread_cpu / total:.2f} µs of CPU a message; time by stage: "
        + ", ".join(f"{k} {v:.0f} %" for k, v in shares.items() if k != "records per batch")
        + f"; {shares['records per batch']:,.0f} records per batch"
    )
    stats = pstats.Stats(profile).sort_stats("tottime")
    stats.print_stats(args.top)
    if args.callers:
        stats.print_callers(args.callers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
