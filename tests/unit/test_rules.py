"""`monitor rules`: the generated Prometheus rules pass promtool and behave as specified.

The promtool unit tests in tests/rules/*.test.yml are checked in, but the rules they test
are not: each run generates ``rules.yml`` from tests/rules/slo-config.toml with the real
``monitor rules`` command into a temporary directory and runs ``promtool test rules``
there, so the tests cannot drift from the generator.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from monitor.alerting.rules import BURN_WINDOWS, RuleOptions, error_budget, rule_groups, to_yaml
from monitor.alerting.slo import SloSpec

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "tests" / "rules"


def _monitor_rules(config: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "rules", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _promtool(promtool: str, *args: str, cwd: Path) -> None:
    done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize(
    "config", [RULES / "slo-config.toml", REPO / "config.example.toml"], ids=["tests", "example"]
)
def test_generated_rules_pass_promtool_check(config: Path, tmp_path: Path, promtool: str) -> None:
    text = _monitor_rules(config)
    (tmp_path / "rules.yml").write_text(text)
    _promtool(promtool, "check", "rules", "rules.yml", cwd=tmp_path)
    groups = yaml.safe_load(text)["groups"]
    assert [g["name"] for g in groups][-1] == "model-monitor-operations"


@pytest.mark.parametrize("test_file", sorted(p.name for p in RULES.glob("*.test.yml")))
def test_promtool_unit_tests(test_file: str, tmp_path: Path, promtool: str) -> None:
    (tmp_path / "rules.yml").write_text(_monitor_rules(RULES / "slo-config.toml"))
    shutil.copy(RULES / test_file, tmp_path / test_file)
    _promtool(promtool, "test", "rules", test_file, cwd=tmp_path)


def test_every_slo_gets_its_rules() -> None:
    specs = [
        SloSpec("a", "m", "recall", "1h", 0.8, "above", for_s=300),
        SloSpec("b", "m", "log_loss", "1h", 0.4, "below", confidence="point", min_samples=7),
        SloSpec("c", "m", "accuracy", "1h", 0.99, "above", version="v2"),
        SloSpec("d", "m", "error_rate", "1h", 0.02, "below"),
        SloSpec("e", "m", "accuracy", "1h", 0.99, "above", slice="country=US"),
    ]
    data = rule_groups(specs, RuleOptions(extra_labels={"team": "ml"}))
    # the emitter's output is the same data for a YAML parser
    assert yaml.safe_load(to_yaml(data)) == data
    groups = {g["name"]: g["rules"] for g in data["groups"]}
    alerts = [r for r in groups["model-monitor-slo"] if "alert" in r]
    by_slo = {r["labels"]["slo"]: r for r in alerts}
    assert set(by_slo) == {"a", "b", "c", "d", "e"}
    assert by_slo["a"]["expr"] == 'mlmon_slo:sli{slo="a"} < 0.8' and by_slo["a"]["for"] == "5m"
    assert by_slo["b"]["expr"] == 'mlmon_slo:sli{slo="b"} > 0.4' and "for" not in by_slo["b"]
    records = {r["labels"]["slo"]: r["expr"] for r in groups["model-monitor-slo"]
               if r.get("record") == "mlmon_slo:sli"}  # fmt: skip
    assert records["a"].startswith("mlmon_recall_ci_upper{")  # interval, above: upper bound
    assert records["b"].startswith("mlmon_log_loss{") and ">= 7" in records["b"]  # point
    assert 'version="v2"' in records["c"]
    assert 'slice="country=US"' in records["e"]
    # burn rates only for the error-budget SLOs over slice "all": c (budget 1%), d (2%)
    burn = [r for r in groups["model-monitor-error-budget"] if "alert" in r]
    assert sorted((r["labels"]["slo"], r["labels"]["severity"]) for r in burn) == [
        ("c", "page"), ("c", "ticket"), ("d", "page"), ("d", "ticket")
    ]  # fmt: skip
    page_c = next(r for r in burn if r["labels"] == {"team": "ml", "slo": "c", "severity": "page"})
    for severity, long_w, short_w, rate in BURN_WINDOWS:
        if severity == "page":
            assert f"ratio_rate{long_w}{{" in page_c["expr"]
            assert f"ratio_rate{short_w}{{" in page_c["expr"]
            assert f"({rate:g} * 0.01)" in page_c["expr"]
    assert error_budget(specs[0]) is None and error_budget(specs[4]) is None
    assert error_budget(specs[3]) == pytest.approx(0.02)


def test_min_label_completeness_gates_the_rule_as_the_daemon_does() -> None:
    spec = SloSpec("a", "m", "recall", "1h", 0.8, "above", version="v2",
                   min_label_completeness=0.9)  # fmt: skip
    groups = rule_groups([spec], RuleOptions(evaluation_interval_s=10.0))
    text = to_yaml(groups)
    assert 'mlmon_label_completeness{model="m",window="1h",version="v2"} >= 0.9' in text, text
    assert "and on (model, version, window)" in text
