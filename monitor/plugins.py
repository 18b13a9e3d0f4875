"""Metric plugins: discovery of families written against the one metric protocol.

A plugin is a :class:`monitor.metrics.protocol.Metric` subclass — the same protocol the
built-in metrics use, for every task (``binary``, ``multiclass``, ``regression``,
``ranking``): it declares a fixed-size sufficient-statistic vector that merges by
addition, the engine keeps one vector per (model, version, bucket) of each model of a
task it serves, calls ``update`` with each vectorized batch of joined rows of that task,
sums the vectors of a window's buckets and asks ``compute`` (or ``metrics``) for values
with intervals. A plugin therefore costs O(buckets) per window like everything else,
and its statistics survive restarts in the checkpoint. A plugin that implements
``loss`` can be a version comparison's ``loss``; its metrics can be SLO metrics.
:func:`monitor.metrics.bootstrap.bucket_bootstrap` gives an interval to a metric
without a closed form.

Discovery: the entry-point group ``monitor.metrics`` (a package declares
``[project.entry-points."monitor.metrics"] name = "module:PluginClass"``) and
``[plugins] paths`` (Python files defining ``Metric`` subclasses). A plugin that
fails to load, or raises in ``update``, ``compute`` or ``loss``, is isolated: counted in
``mlmon_plugin_errors_total{plugin}``, its metrics not exported, nothing else affected.
See docs/plugins.md.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import inspect
import logging
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .metrics.bootstrap import bucket_bootstrap
from .metrics.protocol import (
    TASKS,
    BinaryRows,
    Definition,
    Direction,
    Metric,
    ModelParams,
    MulticlassRows,
    RankingRows,
    RegressionRows,
)
from .stats.intervals import wilson_interval, z_value
from .stats.results import MetricValue

__all__ = [
    "ENTRY_POINT_GROUP",
    "BinaryRows",
    "Definition",
    "Direction",
    "JoinedRows",
    "LoadedPlugins",
    "Metric",
    "MetricPlugin",
    "MetricValue",
    "ModelParams",
    "MulticlassRows",
    "RankingRows",
    "RegressionRows",
    "bucket_bootstrap",
    "load_plugins",
    "wilson_interval",
    "z_value",
]

ENTRY_POINT_GROUP = "monitor.metrics"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
log = logging.getLogger(__name__)

# the names plugins written before the protocol covered every task use (binary batches)
MetricPlugin = Metric
JoinedRows = BinaryRows


@dataclass(frozen=True, slots=True)
class LoadedPlugins:
    plugins: tuple[MetricPlugin, ...]
    errors: tuple[tuple[str, str], ...]  # (plugin, problem) for plugins that did not load


def load_plugins(
    paths: Sequence[Path] = (),
    entry_points: bool = True,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    reserved: frozenset[str] = frozenset(),
) -> LoadedPlugins:
    """Discover, instantiate and check plugins; problems are returned, never raised."""
    options = options or {}
    found: list[tuple[str, type[Metric] | None, str]] = []
    if entry_points:
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                obj = ep.load()
            except Exception as err:
                found.append((ep.name, None, f"entry point {ep.value}: {err!r}"))
                continue
            found.append(
                (
                    ep.name,
                    obj if _is_plugin(obj) else None,
                    "" if _is_plugin(obj) else f"{ep.value} is not a Metric subclass",
                )
            )
    for path in paths:
        try:
            module = _load_module(Path(path))
        except Exception as err:
            found.append((Path(path).stem, None, f"{path}: {err!r}"))
            continue
        classes = [
            c for _, c in inspect.getmembers(module, _is_plugin) if c.__module__ == module.__name__
        ]
        if not classes:
            found.append((Path(path).stem, None, f"{path} defines no Metric subclass"))
        found.extend((c.name or c.__name__, c, "") for c in classes)
    plugins: list[Metric] = []
    errors: list[tuple[str, str]] = []
    names: set[str] = set()
    for label, cls, problem in found:
        if cls is None:
            errors.append((label, problem))
            continue
        name = cls.name
        try:
            if not _NAME.match(name or ""):
                raise ValueError(f"plugin name {name!r} must match {_NAME.pattern}")
            if name in names:
                raise ValueError(f"plugin name {name!r} is used twice")
            plugin = cls(**dict(options.get(name, {})))
            width = int(plugin.width())
            if width <= 0:
                raise ValueError(f"width() must be positive, got {width}")
            unknown = set(plugin.tasks) - set(TASKS)
            if not plugin.tasks or unknown:
                raise ValueError(f"tasks must be among {list(TASKS)}, got {sorted(plugin.tasks)}")
            clash = _metric_names(plugin) & reserved
            if clash:
                raise ValueError(f"metric names {sorted(clash)} clash with built-in metrics")
        except Exception as err:
            errors.append((name or label, f"{type(err).__name__}: {err}"))
            continue
        names.add(name)
        plugins.append(plugin)
    for name, problem in errors:
        log.error("plugin %s not loaded: %s", name, problem)
    return LoadedPlugins(tuple(plugins), tuple(errors))


def _is_plugin(obj: object) -> bool:
    """A Metric subclass a plugin defines (not one it imported, e.g. a built-in)."""
    return (
        inspect.isclass(obj)
        and issubclass(obj, Metric)
        and obj is not Metric
        and not obj.__module__.startswith("monitor.")
    )


def _load_module(path: Path) -> Any:
    name = f"monitor_plugin_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _metric_names(plugin: Metric) -> set[str]:
    """Names a plugin declares or reports on an empty vector (checked for clashes)."""
    names = {d.name for d in plugin.declared()} - {plugin.name}
    # an empty vector may be undefined for it: checked again at evaluation
    with contextlib.suppress(Exception):
        names |= {m.name for m in plugin.metrics(np.zeros(plugin.width()), 0.95)}
    return names
