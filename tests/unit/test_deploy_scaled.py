"""deploy/kubernetes-scaled: N replicas without a shared volume, a PodDisruptionBudget,
and a configuration that validates as scale.mode = "partitioned"."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.config import settings_from_mapping

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SCALED = DEPLOY / "kubernetes-scaled"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((SCALED / name).read_text()) if d]


def test_scaled_overlay_files() -> None:
    k = _docs("kustomization.yaml")[0]
    assert k["resources"] == ["../kubernetes", "pdb.yaml"]
    assert {p["path"] for p in k["patches"]} == {
        "deployment-scaled.yaml",
        "no-pvc.yaml",
        "configmap-scaled.yaml",
    }
    deployment = _docs("deployment-scaled.yaml")[0]
    assert deployment["spec"]["replicas"] > 1
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 1
    state = deployment["spec"]["template"]["spec"]["volumes"][0]
    assert (
        state["name"] == "state" and "emptyDir" in state and state["persistentVolumeClaim"] is None
    )
    pdb = _docs("pdb.yaml")[0]
    assert pdb["kind"] == "PodDisruptionBudget" and pdb["spec"]["maxUnavailable"] == 1
    base = yaml.safe_load((DEPLOY / "kubernetes/deployment.yaml").read_text())
    assert (
        pdb["spec"]["selector"]["matchLabels"].items()
        <= base["spec"]["template"]["metadata"]["labels"].items()
    )


def test_scaled_config_validates_in_partitioned_mode() -> None:
    (configmap,) = _docs("configmap-scaled.yaml")
    base = yaml.safe_load((DEPLOY / "kubernetes/configmap.yaml").read_text())
    assert configmap["metadata"] == {k: base["metadata"][k] for k in ("name", "namespace")}
    assert configmap["data"].keys() == base["data"].keys()
    s = settings_from_mapping(tomllib.loads(next(iter(configmap["data"].values()))))
    assert s.scale.mode == "partitioned" and not s.state.single_instance
    # the same deployment as the base otherwise: topics, group, models, SLOs
    b = settings_from_mapping(tomllib.loads(next(iter(base["data"].values()))))
    assert (s.kafka, s.slos, s.comparisons) == (b.kafka, b.slos, b.comparisons)
    assert [m.name for m in s.models] == [m.name for m in b.models]


def test_scaled_overlay_renders() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (the file checks above hold on their own)")
    done = subprocess.run([kubectl, "kustomize", str(SCALED)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = [d["kind"] for d in docs]
    assert "PersistentVolumeClaim" not in kinds and kinds.count("PodDisruptionBudget") == 1
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 3
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert set(volumes["state"]) == {"name", "emptyDir"}
    env = {e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "MONITOR_KAFKA__SASL_PASSWORD" in env  # the base container, patched not replaced
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert 'mode = "partitioned"' in next(iter(cm["data"].values()))
