"""The ``monitor`` command (DESIGN §4). Exit codes: 0 ok, 2 usage/config error, 1 failure."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from .config import ConfigError, Settings, load_settings

__all__ = ["main"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="monitor",
        description="Production model monitoring: quality with confidence intervals, "
        "per model, version and window, from Kafka predictions and labels.",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the daemon")
    run.add_argument("-c", "--config", required=True, type=Path)

    demo = sub.add_parser("demo", help="the whole system on embedded defaults")
    demo.add_argument("--duration", type=float, default=None, help="seconds, then exit")
    demo.add_argument("--port", type=int, default=None, help="HTTP port (default: 9108 or free)")
    demo.add_argument("--rate", type=float, default=200.0, help="predictions per second")

    rp = sub.add_parser("replay", help="the same pipeline over JSONL files")
    rp.add_argument("-c", "--config", required=True, type=Path)
    rp.add_argument("--predictions", required=True, type=Path)
    rp.add_argument("--labels", required=True, type=Path)
    rp.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    rp.add_argument("--dead-letter", type=Path, default=None)

    cc = sub.add_parser("check-config", help="validate a configuration file")
    cc.add_argument("-c", "--config", required=True, type=Path)

    bl = sub.add_parser("baseline", help="build a reference profile for drift detection")
    bl.add_argument("-c", "--config", required=True, type=Path)
    bl.add_argument("--input", required=True, type=Path)
    bl.add_argument("--output", required=True, type=Path)
    bl.add_argument("--model", default=None, help="which model (when the config has several)")

    rules = sub.add_parser("rules", help="print Prometheus rules for the configured SLOs")
    rules.add_argument("-c", "--config", required=True, type=Path)
    return p


def _load(path: Path) -> Settings:
    return load_settings(path)


def _report_problems(source: str | Path, problems: list[tuple[str, str]]) -> int:
    print(f"{source}: invalid configuration ({len(problems)} problem(s))")
    for key, msg in problems:
        print(f"  {key}: {msg}")
    return EXIT_USAGE


def _check_config(path: Path) -> int:
    """Validate the file, then what it points at: drift references and plugins."""
    try:
        settings = _load(path)
    except ConfigError as err:
        return _report_problems(err.source, err.problems)
    from .wiring import drift_specs, load_configured_plugins

    problems: list[tuple[str, str]] = []
    drift: tuple[object, ...] = ()
    try:
        drift = drift_specs(settings)
    except ConfigError as err:
        problems += err.problems
    loaded = load_configured_plugins(settings)
    problems += [(f"plugins ({name})", problem) for name, problem in loaded.errors]
    problems += _slo_metric_problems(settings, loaded.plugins)
    if problems:
        return _report_problems(path, problems)
    windows = sum(len(m.windows) for m in settings.models)
    print(
        f"{path}: ok ({len(settings.models)} model(s), {windows} window(s), "
        f"{len(settings.comparisons)} comparison(s), {len(drift)} drift reference(s), "
        f"{len(loaded.plugins)} plugin(s))"
    )
    return EXIT_OK


def _slo_metric_problems(settings: Settings, plugins: Sequence[Any]) -> list[tuple[str, str]]:
    """SLO metrics that neither the model's configured metrics nor a loaded plugin export
    (the config check alone cannot know plugin metric names)."""
    import numpy as np

    from .config import model_metric_names

    offered: set[str] = set()
    for plugin in plugins:
        try:
            names = {m.name for m in plugin.metrics(np.zeros(plugin.width()), 0.95)}
        except Exception:
            return []  # a plugin that cannot name its metrics up front: cannot tell
        if not names:
            return []
        offered |= names
    problems = []
    for i, slo in enumerate(settings.slos):
        model = settings.model(slo.model)
        known = model_metric_names(model)
        derived = "pinball" in known and slo.metric.startswith("pinball_q")  # per quantile
        if slo.metric not in known | offered and not derived:
            problems.append(
                (
                    f"slos[{i}].metric",
                    f"{slo.metric!r} is neither a metric of model {slo.model!r} nor one a "
                    f"loaded plugin reports ({sorted(offered) or 'no plugins'})",
                )
            )
    return problems


def _run(path: Path) -> int:
    from .app import Daemon, StartupError

    settings = _load(path)
    daemon = Daemon(settings)

    def stop(signum: int, _frame: object) -> None:
        log = logging.getLogger("monitor")
        log.info("received %s: stopping", signal.Signals(signum).name)
        daemon.request_stop()
        grace = settings.state.shutdown_grace

        def overdue() -> None:
            log.error("shutdown took longer than state.shutdown_grace (%.0fs): exiting", grace)
            os._exit(EXIT_FAILURE)

        timer = threading.Timer(grace, overdue)
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        return daemon.run()
    except StartupError as err:
        logging.getLogger("monitor").error("cannot start: %s", err)
        return EXIT_FAILURE


def _replay(args: argparse.Namespace) -> int:
    from .replay import ReplayError, replay

    settings = _load(args.config)
    for p in (args.predictions, args.labels):
        if not p.is_file():
            print(f"monitor replay: {p} is not a file", file=sys.stderr)
            return EXIT_USAGE
    try:
        report = replay(settings, args.predictions, args.labels, dead_letter=args.dead_letter)
    except ReplayError as err:
        print(f"monitor replay: {err}", file=sys.stderr)
        return EXIT_FAILURE
    data = orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    if args.report:
        args.report.write_bytes(data + b"\n")
        n = len(report["results"])
        print(f"report with {n} result(s) written to {args.report}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(data + b"\n")
    return EXIT_OK


def _baseline(args: argparse.Namespace) -> int:
    from .baseline import BaselineError, build_baseline

    settings = _load(args.config)
    try:
        summary = build_baseline(settings, args.input, args.model)
    except BaselineError as err:
        print(f"monitor baseline: {err}", file=sys.stderr)
        return EXIT_USAGE
    args.output.write_bytes(orjson.dumps(summary.profile.to_json(), option=orjson.OPT_INDENT_2))
    print(
        f"profile of {summary.rows} rows written to {args.output}: "
        f"{len(summary.numeric)} numeric {list(summary.numeric)}, "
        f"{len(summary.categorical)} categorical {list(summary.categorical)}"
        + (", prediction score" if summary.profile.score is not None else "")
        + (", label prior" if summary.profile.label_prior else ""),
        file=sys.stderr,
    )
    return EXIT_OK


def _rules(path: Path) -> int:
    """Print Prometheus recording and alerting rules for the configured SLOs."""
    from .alert_wiring import rule_options, slo_specs
    from .alerting.rules import render_rules

    settings = _load(path)
    sys.stdout.write(render_rules(slo_specs(settings), rule_options(settings), str(path)))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.log_level != "DEBUG":
        # kafka-python logs every connection and rebalance at INFO
        logging.getLogger("kafka").setLevel(logging.WARNING)
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
    try:
        if args.command == "check-config":
            return _check_config(args.config)
        if args.command == "run":
            return _run(args.config)
        if args.command == "replay":
            return _replay(args)
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(duration=args.duration, port=args.port, rate=args.rate)
        if args.command == "baseline":
            return _baseline(args)
        if args.command == "rules":
            return _rules(args.config)
    except ConfigError as err:
        print(f"{err.source}: invalid configuration", file=sys.stderr)
        for key, msg in err.problems:
            print(f"  {key}: {msg}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
