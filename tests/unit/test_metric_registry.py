"""One registry, generated from the metric families: configuration catalogs, score-metric
selection, the exporter's series (help text, labels) and the docs' metric table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from monitor import config
from monitor.engine.models import SCORE_METRICS
from monitor.metrics import registry as reg
from monitor.metrics.protocol import TASKS, Metric, ModelParams

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_config_catalogs_are_the_registry() -> None:
    for task in TASKS:
        assert config.TASK_METRICS[task] == reg.task_metrics(task)
        assert len(set(reg.task_metrics(task))) == len(reg.task_metrics(task))
    assert {"ks_statistic", "gini", "gain", "npv", "top_k_accuracy"} == config.OPT_IN_METRICS
    assert {"roc_auc", "log_loss", "ece", "gain"} <= SCORE_METRICS
    assert not SCORE_METRICS & {"accuracy", "f1", "mcc", "mae", "npv"}


def test_every_definition_declares_help_unit_and_direction() -> None:
    for family in reg.BUILTIN:
        assert issubclass(family, Metric) and family.declared(), family
        for d in family.declared():
            assert d.help not in ("", d.name) and d.unit and d.tasks <= set(TASKS), d


def test_unknown_metric_names_the_catalog() -> None:
    with pytest.raises(Exception, match="roc_auc"):
        config.settings_from_mapping({"models": [{"name": "m", "metrics": ["nope"]}]})


def test_parametrised_series_come_from_their_definitions() -> None:
    """The per-beta, per-quantile, per-fraction, per-class and per-k names a configuration
    makes are declared by their family; the exporter parses no name back."""
    params = ModelParams("binary", fbeta=(0.5,), gain_fractions=(0.025, 0.1))
    binary = {s.name: s for s in reg.series_of(params, ("fbeta", "gain"))}
    assert binary["f0_5"].help.startswith("F-beta score with beta = 0.5 ")
    assert binary["gain_at_2_5"].help == "Share of positives among the top 2.5% scores"
    assert binary["lift_at_10"].help == "Cumulative gain at the top 10% scores / 10%"
    rg = {
        s.name: s for s in reg.series_of(ModelParams("regression", quantiles=(0.9,)), ("pinball",))
    }
    assert rg["pinball_q0_9"].help == "Mean pinball (quantile) loss at quantile 0.9"
    mc = {s.name: s for s in reg.series_of(ModelParams("multiclass", ("a", "b")), ("per_class",))}
    assert mc["precision[a]"].family == "class_precision"
    assert mc["precision[a]"].labels == (("class", "a"),)
    rk = {s.name: s for s in reg.series_of(ModelParams("ranking", ks=(3,)), ("ndcg", "mrr"))}
    assert set(rk) == {"ndcg_at_3", "mrr"} and "3" in rk["ndcg_at_3"].help
    from monitor.export import prometheus

    source = Path(prometheus.__file__).read_text()
    assert "_split_class" not in source and "help_text" not in source


def test_every_task_loss_is_a_stored_loss() -> None:
    for task, losses in config.TASK_LOSSES.items():
        assert set(losses) <= set(reg.LOSSES), (task, set(losses) - set(reg.LOSSES))
    assert set(reg.LOSSES) == {name for names in config.TASK_LOSSES.values() for name in names}


def test_the_docs_metric_table_is_the_generated_one() -> None:
    """docs/metrics.md holds the table between its markers exactly as generated (run
    ``python -m monitor.metrics.docs`` to rewrite it)."""
    page = DOCS.read_text()
    m = re.search(
        r"<!-- metric table: generated -->\n(.*?)<!-- end of metric table -->", page, re.S
    )
    assert m is not None, "docs/metrics.md lacks the generated metric table"
    assert m.group(1) == reg.docs_table()
