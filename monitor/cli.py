"""The ``monitor`` command. Exit codes: 0 ok, 2 usage/config error, 1 failure.

Fatal errors go through ``logsetup.fatal``: text for a person, one JSON object each
under ``--log-format json``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .logsetup import LEVELS, configure_logging, fatal
from .redact import register_secrets

if TYPE_CHECKING:
    from .config import Settings

# The configuration (pydantic, and through the metric catalog numpy and scipy) and the
# commands' modules are imported where used: `monitor --version` and `--help` stay fast.

__all__ = ["main"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


_DESCRIPTIONS = {
    "run": "Run the daemon: consume predictions and labels from Kafka, evaluate every "
    "[evaluation] interval, serve /metrics, /healthz, /readyz and /api/v1/* on [http], "
    "checkpoint to [state] dir. Stops cleanly on SIGTERM/SIGINT.",
    "demo": "The whole system on embedded defaults: a local tansu broker, a synthetic "
    "story (steady, input drift, a worse canary) and the daemon, with a live summary.",
    "replay": "Run the same pipeline over JSONL files (predictions and labels) and print "
    "or write the JSON report: a backfill or an offline check.",
    "check-config": "Validate a configuration file (and the drift references and plugins "
    "it names); problems go to stderr, one per key, exit 2. Then print the Prometheus "
    "series each model can produce, per version and at max_versions.",
    "baseline": "Build a drift reference profile (numeric and categorical features, score, "
    "label prior) from training data (JSONL, CSV or Parquet).",
    "rules": "Print Prometheus recording and alerting rules for the configured SLOs.",
    "versions": "List a model's versions (live, retired, blocked by max_versions), or retire "
    "them by name pattern: through the running daemon's API, or in the checkpoint of a "
    "stopped one (docs/operations.md).",
}


def _global_options(p: argparse.ArgumentParser, top: bool) -> None:
    """Options accepted before and after the subcommand. Defaults are SUPPRESS so a value
    given before the subcommand is not reset by the subparser."""
    g = p.add_argument_group("global options")
    g.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        default=argparse.SUPPRESS,
        help="default: $MONITOR_LOG_LEVEL or INFO",
    )
    g.add_argument(
        "--log-format",
        type=str.lower,
        choices=("text", "json"),
        default=argparse.SUPPRESS,
        help="log lines as text or one JSON object each (default: $MONITOR_LOG_FORMAT or text)",
    )
    g.add_argument(
        "--kafka-log-level",
        type=str.upper,
        choices=LEVELS,
        default=argparse.SUPPRESS,
        help="kafka-python's own level; its protocol loggers print SASL bytes at DEBUG, "
        "so they stay at INFO unless set here",
    )
    if top:
        g.add_argument("--version", action=_Version)


class _Version(argparse.Action):
    """argparse's "version" action, with the line built only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the version and exit")  # fmt: skip

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        sys.stdout.write(_version_line() + "\n")  # stdout, as argparse's own action
        parser.exit()


def _version_line() -> str:
    import platform

    from .version import app_version

    return f"monitor {app_version()} (Python {platform.python_version()})"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="monitor",
        description="Production model monitoring: quality with confidence intervals, "
        "per model, version and window, from Kafka predictions and labels.",
    )
    _global_options(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help, description=_DESCRIPTIONS[name])
        _global_options(cmd, top=False)
        return cmd

    run = command("run", "run the daemon")
    run.add_argument("-c", "--config", required=True, type=Path)

    demo = command("demo", "the whole system on embedded defaults")
    demo.add_argument("--duration", type=float, default=None, help="seconds, then exit")
    demo.add_argument("--port", type=int, default=None, help="HTTP port (default: 9108 or free)")
    demo.add_argument("--rate", type=float, default=200.0, help="predictions per second")

    rp = command("replay", "the same pipeline over JSONL files")
    rp.add_argument("-c", "--config", required=True, type=Path)
    rp.add_argument("--predictions", required=True, type=Path)
    rp.add_argument("--labels", required=True, type=Path)
    rp.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    rp.add_argument(
        "--html", type=Path, default=None, help="also write a self-contained HTML report"
    )
    rp.add_argument("--dead-letter", type=Path, default=None)
    rp.add_argument(
        "--decode-worker",
        choices=("auto", "on", "off"),
        default="auto",
        help="decode in worker processes (auto: when a second CPU is usable and idle); same report",
    )
    rp.add_argument(
        "--max-steps",
        type=int,
        default=1000,
        metavar="N",
        help="with SLOs, comparisons or drift: evaluate about N times over the replayed range at "
        "most, at a multiple of evaluation.interval (0: every interval; default 1000)",
    )

    cc = command("check-config", "validate a configuration file")
    cc.add_argument("-c", "--config", required=True, type=Path)
    cc.add_argument(
        "--no-series",
        action="store_true",
        help="skip the series estimate (it runs each model on a small synthetic stream: "
        "a few seconds, and the statistics libraries)",
    )

    bl = command("baseline", "build a reference profile for drift detection")
    bl.add_argument("-c", "--config", required=True, type=Path)
    bl.add_argument("--input", required=True, type=Path)
    bl.add_argument("--output", required=True, type=Path)
    bl.add_argument("--model", default=None, help="which model (when the config has several)")

    rules = command("rules", "print Prometheus rules for the configured SLOs")
    rules.add_argument("-c", "--config", required=True, type=Path)

    versions = command("versions", "list a model's versions, or retire them by pattern")
    versions.add_argument("action", choices=("list", "retire"))
    versions.add_argument("-c", "--config", required=True, type=Path)
    versions.add_argument("--model", default=None, help="the model (required for retire)")
    versions.add_argument(
        "--pattern", default=None, help="retire: shell-style pattern of version names ('b-*')"
    )
    versions.add_argument(
        "--url", default=None, help="a running daemon's address (default: [http] of the config)"
    )
    return p


def _unwritable(path: Path | None) -> str | None:
    """Why ``path`` cannot be written (checked before any work is done), or None."""
    if path is None:
        return None
    parent = path.parent
    if path.is_dir():
        return f"{path} is a directory"
    if not parent.is_dir():
        return f"directory {parent} does not exist"
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return f"{path} is not writable"
    return None


def _load(path: Path) -> Settings:
    from .config import load_settings

    return load_settings(path)


def _report_problems(source: str | Path, problems: list[tuple[str, str]]) -> int:
    fatal(
        f"{source}: invalid configuration ({len(problems)} problem(s))",
        [f"  {key}: {msg}" for key, msg in problems],
        source=str(source),
        problems=[{"key": key, "problem": msg} for key, msg in problems],
    )
    return EXIT_USAGE


def _check_config(path: Path, series: bool = True) -> int:
    """Validate the file, then what it points at: drift references and plugins; then
    print the Prometheus series it can produce."""
    from .config import ConfigError

    try:
        settings = _load(path)
    except ConfigError as err:
        return _report_problems(err.source, err.problems)
    from .wiring import drift_specs, load_configured_plugins, plugin_loss_problems

    problems: list[tuple[str, str]] = []
    drift: tuple[object, ...] = ()
    try:
        drift = drift_specs(settings)
    except ConfigError as err:
        problems += err.problems
    loaded = load_configured_plugins(settings)
    problems += [(f"plugins ({name})", problem) for name, problem in loaded.errors]
    problems += _slo_metric_problems(settings, loaded.plugins)
    problems += plugin_loss_problems(settings, loaded)
    if problems:
        return _report_problems(path, problems)
    windows = sum(len(m.windows) for m in settings.models)
    print(
        f"{path}: ok ({len(settings.models)} model(s), {windows} window(s), "
        f"{len(settings.comparisons)} comparison(s), {len(drift)} drift reference(s), "
        f"{len(loaded.plugins)} plugin(s))"
    )
    if series:
        _print_series(settings)
    return EXIT_OK


def _print_series(settings: Settings) -> None:
    """The Prometheus series the configuration can produce (monitor/series_estimate.py)."""
    from .series_estimate import estimate_series

    try:
        models = estimate_series(settings)
    except Exception as err:  # the estimate is advice: the configuration itself is valid
        print(f"series estimate unavailable: {err}")
        return
    width = max(len(m.model) for m in models)
    print("Prometheus series (every slice value filled; worst case at max_versions):")
    for m in models:
        detail = f"overall {m.overall:,}"
        if m.slice_values:
            detail += f" + {m.slice_values:,} slice values x {m.per_slice_value:,}"
        if m.drift:
            detail += f" + drift {m.drift:,}"
        print(
            f"  {m.model:{width}s}  {m.per_version:>9,} per version ({m.windows} window(s): "
            f"{detail}); worst {m.total():>11,} at {m.max_versions} versions"
        )
    worst = sum(m.total() for m in models)
    bound = settings.http.max_series
    print(
        f"  worst case {worst:,} series, plus a few per comparison and SLO; "
        + (
            f"[http] max_series = {bound:,} withholds the rest (lowest-traffic slices first)"
            if bound is not None
            else "[http] max_series is not set: nothing bounds them"
        )
    )


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
    from .config import secret_values

    settings = _load(path)
    register_secrets(secret_values(settings))
    owner = None  # single instance: one owner of every partition
    if settings.scale.mode == "partitioned":
        from .scale.partitioned import GroupOwner

        owner = GroupOwner  # the consumer group's assignment, one partition per number
    daemon = Daemon(settings, owner=owner)

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
    from .ingest.cpus import CpuSample

    started = CpuSample.now()  # `--decode-worker auto` watches the CPUs over the imports
    from .replay import ReplayError, replay

    settings = _load(args.config)
    for p in (args.predictions, args.labels):
        if not p.is_file():
            fatal(f"monitor replay: {p} is not a file")
            return EXIT_USAGE
    for flag, out in (("--report", args.report), ("--dead-letter", args.dead_letter)):
        problem = _unwritable(out)
        if problem:
            fatal(f"monitor replay: cannot write {flag} {out}: {problem}")
            return EXIT_USAGE
    try:
        report = replay(
            settings,
            args.predictions,
            args.labels,
            dead_letter=args.dead_letter,
            decode_worker=args.decode_worker,
            max_steps=max(0, args.max_steps),
            started=started,
        )
    except ReplayError as err:
        fatal(f"monitor replay: {err}")
        return EXIT_FAILURE
    data = orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    if args.report:
        args.report.write_bytes(data + b"\n")
        n = len(report["results"])
        print(f"report with {n} result(s) written to {args.report}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(data + b"\n")
    if args.html:
        from .export.status_page import render_report

        args.html.write_bytes(render_report(orjson.loads(data)))  # the JSON's very numbers
        print(f"HTML report written to {args.html}", file=sys.stderr)
    return EXIT_OK


def _baseline(args: argparse.Namespace) -> int:
    from .baseline import BaselineError, build_baseline

    settings = _load(args.config)
    problem = _unwritable(args.output)
    if problem:
        fatal(f"monitor baseline: cannot write --output {args.output}: {problem}")
        return EXIT_USAGE
    try:
        summary = build_baseline(settings, args.input, args.model)
    except BaselineError as err:
        fatal(f"monitor baseline: {err}")
        return EXIT_USAGE
    args.output.write_bytes(orjson.dumps(summary.profile.to_json(), option=orjson.OPT_INDENT_2))
    print(
        f"profile of {summary.rows} rows written to {args.output}: "
        f"{len(summary.numeric)} numeric {list(summary.numeric)}, "
        f"{len(summary.categorical)} categorical {list(summary.categorical)}"
        + (", prediction score" if summary.profile.score is not None else "")
        + (", label prior" if summary.profile.label_prior else "")
        + (
            f", MASE scale {summary.profile.naive_mae:.6g} (season {summary.profile.naive_season})"
            if summary.profile.naive_mae is not None
            else ""
        ),
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
    from .config import ConfigError  # after --version and --help have exited

    level = getattr(args, "log_level", None) or os.environ.get("MONITOR_LOG_LEVEL", "INFO")
    fmt = getattr(args, "log_format", None) or os.environ.get("MONITOR_LOG_FORMAT", "text")
    level, fmt = level.strip().upper(), fmt.strip().lower()
    if level not in LEVELS or fmt not in ("text", "json"):
        print(
            f"monitor: MONITOR_LOG_LEVEL must be one of {', '.join(LEVELS)} and "
            f"MONITOR_LOG_FORMAT text or json (got {level!r}, {fmt!r})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # the demo's broker is local and throw-away: third-party warnings (kafka-python's slow
    # poll on a busy laptop) would only drown the story
    quiet = args.command == "demo"
    kafka_level = getattr(args, "kafka_log_level", None)
    configure_logging(level, "json" if fmt == "json" else "text", kafka_level, quiet)
    try:
        code = _dispatch(args)
        sys.stdout.flush()
        return code
    except ConfigError as err:
        _report_problems(err.source, err.problems)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:
        # the reader went away (`monitor rules | head -1`): no traceback, and no second
        # error when Python flushes stdout at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    except Exception:  # a failure nothing above expected: logged, so JSON stays JSON
        logging.getLogger("monitor").critical("monitor %s failed", args.command, exc_info=True)
        return EXIT_FAILURE


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "check-config":
        return _check_config(args.config, series=not args.no_series)
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
    if args.command == "versions":
        return _versions(args)
    return EXIT_USAGE


def _versions(args: argparse.Namespace) -> int:
    from .versions import run_command

    if args.action == "retire" and not (args.model and args.pattern):
        print("monitor versions retire: give --model and --pattern", file=sys.stderr)
        return EXIT_USAGE
    from .config import secret_values

    settings = _load(args.config)
    register_secrets(secret_values(settings))
    return run_command(args, settings)


if __name__ == "__main__":
    raise SystemExit(main())
