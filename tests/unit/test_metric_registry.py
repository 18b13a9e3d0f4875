"""One metric registry: configuration catalogs, score-metric selection and Prometheus
help texts all come from it, and a new task can register its own metrics."""

from __future__ import annotations

import pytest

from monitor import config
from monitor.engine import metric_registry as reg
from monitor.engine.models import SCORE_METRICS


def test_config_catalogs_are_the_registry() -> None:
    for task in ("binary", "multiclass", "regression"):
        assert config.TASK_METRICS[task] == reg.task_metrics(task)
        assert len(set(reg.task_metrics(task))) == len(reg.task_metrics(task))
    assert {"ks_statistic", "gini", "gain"} == config.OPT_IN_METRICS
    assert {"roc_auc", "log_loss", "ece", "gain"} <= SCORE_METRICS
    assert not SCORE_METRICS & {"accuracy", "f1", "mcc", "mae"}


def test_every_metric_has_help() -> None:
    for task in ("binary", "multiclass", "regression"):
        for name in reg.task_metrics(task):
            assert reg.help_text(name) not in ("", name), name


def test_unknown_metric_names_the_catalog() -> None:
    with pytest.raises(Exception, match="roc_auc"):
        config.settings_from_mapping({"models": [{"name": "m", "metrics": ["nope"]}]})


def test_prometheus_help_comes_from_the_registry() -> None:
    from monitor.export import prometheus

    assert not hasattr(prometheus, "_HELP")
    assert prometheus.help_text is reg.help_text


def test_parametrised_names_have_their_help_in_the_registry() -> None:
    """The per-quantile and per-fraction names a configuration makes (pinball_q0_9,
    gain_at_2_5, lift_at_10, f0_5) are documented by the registry, nowhere else."""
    from monitor.stats.binary import fbeta_name
    from monitor.stats.regression import pinball_name
    from monitor.stats.scores import gain_name

    assert reg.help_text(pinball_name(0.9)) == "Mean pinball (quantile) loss at quantile 0.9"
    assert reg.help_text(gain_name(0.025)) == "Share of positives among the top 2.5% scores"
    assert reg.help_text(gain_name(0.1, "lift")) == "Cumulative gain at the top 10% scores / 10%"
    assert reg.help_text(fbeta_name(0.5)).startswith("F-beta score with beta = 0.5 ")


def test_a_new_task_registers_its_metrics() -> None:
    reg.register(reg.MetricInfo("test_ndcg_probe", frozenset({"test-task"}), "NDCG probe"))
    reg.register(reg.MetricInfo("accuracy", frozenset({"test-task"}), "ignored: known"))
    assert reg.task_metrics("test-task") == ("test_ndcg_probe", "accuracy")
    assert reg.help_text("accuracy") == "Share of labeled predictions that were correct"
    assert "test-task" in reg.metric_info("accuracy").tasks  # type: ignore[union-attr]
    assert "test_ndcg_probe" not in reg.task_metrics("binary")


def test_every_task_loss_is_a_stored_loss() -> None:
    """A comparison loss a task may pick must have a row in the stored loss moments."""
    for task, losses in config.TASK_LOSSES.items():
        assert set(losses) <= set(reg.LOSSES), (task, set(losses) - set(reg.LOSSES))
    assert set(reg.LOSSES) == {name for names in config.TASK_LOSSES.values() for name in names}
