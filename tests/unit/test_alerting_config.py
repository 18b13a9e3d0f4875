"""``[[slos]]`` and ``[alerting]``: problems by key path, secrets from env or file, never
printed; ``check-config`` knows plugin metric names; ``monitor rules`` is a real command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.alert_wiring import build_dispatcher, slo_specs
from monitor.config import ConfigError, load_settings, redacted, settings_from_mapping

ROOT = Path(__file__).resolve().parents[2]

MODEL = {
    "name": "fraud",
    "metrics": ["accuracy", "recall", "ece"],
    "windows": [{"size": "1h"}, {"size": "1d", "name": "day"}],
    "slices": [{"dimensions": ["country", "device"]}],
}


def _slo(**over: object) -> dict[str, object]:
    return {"name": "r", "model": "fraud", "metric": "recall", "window": "1h",
            "objective": 0.8, "direction": "above", **over}  # fmt: skip


def _problems(data: dict[str, object]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        settings_from_mapping({"models": [MODEL], **data})
    return info.value.problems


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    return {**env, **extra}


def test_slo_defaults_and_durations() -> None:
    s = settings_from_mapping({"models": [MODEL], "slos": [_slo(**{"for": "5m"})]})
    slo = s.slos[0]
    assert (slo.version, slo.slice, slo.for_, slo.min_samples) == ("all", "all", 300.0, 100)
    assert (slo.severity, slo.confidence, slo.runbook_url) == ("page", "interval", None)
    a = s.alerting
    assert (a.resend_interval, a.timeout, a.max_queue) == (60.0, 5.0, 1000)
    assert (a.checkpoint_alerts, a.drift_alerts, a.comparison_alerts) == (True, False, False)
    assert build_dispatcher(s) is None  # no receiver configured
    (spec,) = slo_specs(s)
    assert (spec.for_s, spec.direction, spec.objective) == (300.0, "above", 0.8)


def test_slo_cross_checks_name_the_key_path() -> None:
    problems = _problems(
        {
            "slos": [
                _slo(model="x"),
                _slo(name="w", window="2h"),
                _slo(name="m", metric="roc_auc"),  # a built-in metric not configured here
                _slo(name="s", slice="device=ios"),  # not a configured slice
                _slo(name="s2", slice="country=US"),  # a prefix of a crossed slice: no
                _slo(name="ok", slice="country=US,device=ios", window="day"),
                _slo(name="ok"),  # duplicate name
            ]
        }
    )
    by_path = dict(problems)
    assert by_path["slos[0].model"] == "unknown model 'x'"
    assert "'2h' is not a window of model 'fraud'" in by_path["slos[1].window"]
    assert "models[0].windows" in by_path["slos[1].window"]
    assert "'roc_auc' is not among the metrics of model 'fraud'" in by_path["slos[2].metric"]
    assert "not a slice of model 'fraud'" in by_path["slos[3].slice"]
    assert "slos[4].slice" in by_path
    assert "slos[5].slice" not in by_path
    assert by_path["slos"] == "SLO name 'ok' is used more than once"


def test_slo_field_problems() -> None:
    problems = dict(
        _problems({"slos": [_slo(direction="up", confidence="maybe", objective="x", bogus=1)]})
    )
    assert {"slos.0.direction", "slos.0.confidence", "slos.0.objective", "slos.0.bogus"} <= {
        k.replace("[", ".").replace("]", "") for k in problems
    }
    assert "direction" in str(_problems({"slos": [{"name": "a", "model": "fraud"}]}))


def test_alerting_problems() -> None:
    problems = _problems({"alerting": {"webhook_secret": "x", "alertmanager_url": "ftp://a"}})
    text = str(problems)
    assert "alerting.alertmanager_url" in text
    problems = _problems({"alerting": {"webhook_secret": "x"}})
    assert problems == [("alerting", "webhook_secret is set but webhook_url is not")]
    problems = _problems({"alerting": {"retry_initial": "10s", "retry_max": "1s"}})
    assert "retry_max must be at least retry_initial" in str(problems)
    problems = _problems({"alerting": {"labels": {"bad-name": "x"}}})
    assert "not valid Prometheus label names" in str(problems)


def test_webhook_secret_from_env_or_file_is_never_printed(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-a-file\n")
    s = settings_from_mapping(
        {
            "models": [MODEL],
            "alerting": {"webhook_url": "http://h/x", "webhook_secret_file": str(secret_file)},
        }
    )
    assert s.alerting.resolved_webhook_secret() == "from-a-file"
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[alerting]\nwebhook_url = "http://127.0.0.1:1/hook"\n'
        'alertmanager_url = "http://127.0.0.1:9093"\n'
        '[[models]]\nname = "fraud"\n'
    )
    os.environ["MONITOR_ALERTING__WEBHOOK_SECRET"] = "env-secret-value"
    try:
        s = load_settings(cfg)
    finally:
        del os.environ["MONITOR_ALERTING__WEBHOOK_SECRET"]
    assert s.alerting.resolved_webhook_secret() == "env-secret-value"
    assert "env-secret-value" not in str(redacted(s)) and "env-secret-value" not in repr(s)
    d = build_dispatcher(s)
    assert d is not None and d.receivers == ("alertmanager", "webhook")
    # the daemon's check-config path never prints it either
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", "check-config", "-c", str(cfg)],
        capture_output=True, text=True, timeout=60,
        env=_env(MONITOR_ALERTING__WEBHOOK_SECRET="env-secret-value"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "env-secret-value" not in proc.stdout + proc.stderr


def test_check_config_checks_slo_metrics_against_loaded_plugins(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    plugin = ROOT / "plugins" / "top_share.py"
    base = (
        f'[plugins]\npaths = ["{plugin}"]\nentry_points = false\n'
        '[[models]]\nname = "fraud"\n[[models.windows]]\nsize = "1h"\n'
        '[[slos]]\nname = "top"\nmodel = "fraud"\nwindow = "1h"\nobjective = 0.5\n'
        'direction = "above"\n'
    )
    cfg.write_text(base + 'metric = "precision_at_top"\n')
    run = [sys.executable, "-m", "monitor", "check-config", "-c", str(cfg)]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=60, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cfg.write_text(base + 'metric = "precision_at_tpo"\n')
    proc = subprocess.run(run, capture_output=True, text=True, timeout=60, env=_env())
    assert proc.returncode == 2
    assert "slos[0].metric: 'precision_at_tpo' is neither a metric of model 'fraud'" in (
        proc.stderr
    )


def test_rules_command_exit_codes(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "monitor", "rules", "-c"]
    proc = subprocess.run(
        [*run, str(ROOT / "tests" / "rules" / "slo-config.toml")],
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.count('alert: "ModelSloBreached"') == 4
    bad = tmp_path / "bad.toml"
    bad.write_text('[[models]]\nname = "fraud"\n[[slos]]\nname = "x"\n')
    proc = subprocess.run([*run, str(bad)], capture_output=True, text=True, timeout=60, env=_env())
    assert proc.returncode == 2 and "slos[0].model: required key is missing" in proc.stderr
