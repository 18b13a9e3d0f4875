"""Deployment files parse and use only the fields their projects document.

The allowed field sets are transcribed from the projects' documentation:
Argo Rollouts docs/features/analysis.md and docs/analysis/{web,prometheus}.md;
Flagger docs/usage/metrics.md (MetricTemplate, Prometheus provider).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import require_binary
from prometheus_client import CollectorRegistry

from monitor import cli
from monitor.config import load_settings
from monitor.export.http import HttpServer

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

ARGO_SPEC = {"args", "metrics", "dryRun", "measurementRetention"}
ARGO_ARG = {"name", "value", "valueFrom"}
ARGO_METRIC = {
    "name", "interval", "initialDelay", "count", "successCondition", "failureCondition",
    "failureLimit", "inconclusiveLimit", "consecutiveErrorLimit", "provider",
}  # fmt: skip
ARGO_WEB = {"url", "method", "body", "headers", "timeoutSeconds", "jsonPath", "insecure",
            "jsonBody", "authentication"}  # fmt: skip
ARGO_PROMETHEUS = {"address", "query", "timeout", "insecure", "headers", "authentication"}
FLAGGER_SPEC = {"provider", "query"}
FLAGGER_PROVIDER = {"type", "address", "insecureSkipVerify", "secretRef", "region"}


def test_argo_analysis_templates() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "argo-rollouts/analysis-template.yaml").read_text()))
    assert len(docs) == 2
    for doc in docs:
        assert doc["apiVersion"] == "argoproj.io/v1alpha1"
        assert doc["kind"] == "AnalysisTemplate"
        assert set(doc["spec"]) <= ARGO_SPEC
        for arg in doc["spec"]["args"]:
            assert set(arg) <= ARGO_ARG
        for metric in doc["spec"]["metrics"]:
            assert set(metric) <= ARGO_METRIC, set(metric) - ARGO_METRIC
            (kind,) = metric["provider"]
            allowed = {"web": ARGO_WEB, "prometheus": ARGO_PROMETHEUS}[kind]
            assert set(metric["provider"][kind]) <= allowed
            assert (
                "rollback" in metric["failureCondition"]
                or "result[0]" in metric["failureCondition"]
            )
    web = docs[0]["spec"]["metrics"][0]["provider"]["web"]
    assert web["url"].endswith("/api/v1/comparisons/{{args.comparison}}")
    assert web["jsonPath"] == "{$.decision}"


def test_flagger_metric_template() -> None:
    doc = yaml.safe_load((DEPLOY / "flagger/metric-template.yaml").read_text())
    assert doc["apiVersion"] == "flagger.app/v1beta1"
    assert doc["kind"] == "MetricTemplate"
    assert set(doc["spec"]) <= FLAGGER_SPEC
    assert set(doc["spec"]["provider"]) <= FLAGGER_PROVIDER
    assert doc["spec"]["provider"]["type"] == "prometheus"
    query = doc["spec"]["query"]
    assert "mlmon_comparison_decision" in query and "{{ variables.comparison }}" in query


# -- container, compose, Kubernetes, Alertmanager, Grafana -----------------------------
# Everything below checks that the deployment material refers to what the product really
# has: the image name and version, port 9108, /healthz /readyz /metrics, the CLI verbs,
# configs that pass `monitor check-config`, and metric names the exporter can emit.

REPO = DEPLOY.parent
PORT = 9108
STATE_DIR = "/var/lib/model-monitor"
CONFIG_PATH = "/etc/model-monitor/config.toml"


def _version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


IMAGE = f"model-monitor:{_version()}"


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "Dockerfile ends in a continuation line"
    return out


def _instr(name: str) -> list[str]:
    return [args for word, args in _dockerfile() if word == name]


def _final_stage() -> list[tuple[str, str]]:
    instrs = _dockerfile()
    last_from = max(i for i, (w, _) in enumerate(instrs) if w == "FROM")
    return instrs[last_from:]


def _check_config(
    path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str] | None = None
) -> str:
    """Run `monitor check-config -c path` in-process, with only ``env`` as MONITOR_* env."""
    for key in list(os.environ):
        if key.startswith("MONITOR_"):
            monkeypatch.delenv(key)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(["check-config", "-c", str(path)])
    assert code == 0, f"check-config {path} exited {code}:\n{out.getvalue()}"
    return out.getvalue()


def _is_cli_verb(verb: str) -> bool:
    """Whether `monitor VERB --help` is accepted by the real argument parser."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            cli.main([verb, "--help"])
        except SystemExit as exc:
            return exc.code == 0
    return False


def test_cli_verbs_known() -> None:
    assert _is_cli_verb("run") and _is_cli_verb("check-config")
    assert not _is_cli_verb("serve")  # the helper can say no


def _dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` (relative to the repo) out of the build
    context: last matching pattern wins, `!` re-includes, a matched directory covers its
    contents."""
    ignored = False
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        regex = re.escape(pattern).replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        regex = regex.replace(r"\?", "[^/]")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(re.fullmatch(regex, p) for p in prefixes):
            ignored = not negate
    return ignored


def test_dockerfile_entrypoint_cmd_port_healthcheck_and_user() -> None:
    final = _final_stage()
    words = dict(final)  # last of each instruction in the runtime stage
    froms = _instr("FROM")
    arg = " ".join(_instr("ARG"))
    # the image runs the Python CI tests on (.ci/run: Debian bookworm's python3, 3.11)
    assert re.search(r"PYTHON_IMAGE=python:3\.11-slim-bookworm\b", arg), arg
    assert all(f.startswith("${PYTHON_IMAGE}") for f in froms), froms
    assert json.loads(words["ENTRYPOINT"]) == ["monitor"]
    cmd = json.loads(words["CMD"])
    assert cmd == ["run", "-c", CONFIG_PATH]
    assert _is_cli_verb(cmd[0])
    assert words["EXPOSE"].split() == [str(PORT)]
    assert json.loads(words["VOLUME"]) == [STATE_DIR]
    user = words["USER"].split(":")
    assert user[0].isdigit() and int(user[0]) != 0 and int(user[1]) != 0, user
    assert (
        f"--uid {user[0]}" in words["RUN"]
        and f"chown {user[0]}:{user[1]} {STATE_DIR}" in words["RUN"]
    )
    assert words.get("STOPSIGNAL", "SIGTERM") == "SIGTERM"
    # the console script the ENTRYPOINT runs is the package's
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["monitor"] == "monitor.cli:main"
    # no curl in slim images: the health check is Python reading the configured port
    hc = words["HEALTHCHECK"]
    exec_form = json.loads(hc[hc.index("CMD") + 3 :].strip())
    assert exec_form == ["python", "-m", "monitor.healthcheck", CONFIG_PATH], exec_form
    # every COPY source exists and is inside the build context (.dockerignore)
    for word, args in _dockerfile():
        if word != "COPY" or args.startswith("--from"):
            continue
        *sources, _dest = args.split()
        for src in sources:
            matches = list(REPO.glob(src))
            assert matches, f"COPY {src}: nothing in the repository matches"
            for m in matches:
                rel = m.relative_to(REPO).as_posix()
                assert not _dockerignored(rel), f"COPY {rel} but .dockerignore excludes it"
    for private in (".git", "state", ".venv", "tests", "monitor/__pycache__"):
        assert _dockerignored(private), f".dockerignore lets {private} into the context"


def test_dockerfile_healthcheck_command_really_probes_healthz(tmp_path: Path) -> None:
    """The HEALTHCHECK's command exits 0 against a real /healthz on the port the config
    (or its MONITOR_HTTP__PORT override) names, non-zero when nothing answers there."""
    hc = dict(_final_stage())["HEALTHCHECK"]
    argv = json.loads(hc[hc.index("CMD") + 3 :].strip())
    server = HttpServer("127.0.0.1", 0, CollectorRegistry(), lambda: (True, []), dict, lambda: {})
    server.start()
    port = server.url.rsplit(":", 1)[1]
    config = tmp_path / "config.toml"
    config.write_text(f'[http]\nhost = "0.0.0.0"\nport = {port}\n')
    probe = [sys.executable, *argv[1:-1], str(config)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}

    def run(**extra: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(probe, capture_output=True, timeout=30, env={**env, **extra})

    try:
        ok = run()
        assert ok.returncode == 0, ok.stderr
        # the environment overrides the file, as it does for the daemon
        assert run(MONITOR_HTTP__PORT="1").returncode != 0
        config.write_text("[http]\nport = 1\n")
        assert run(MONITOR_HTTP__PORT=port).returncode == 0
    finally:
        server.stop()
    down = run(MONITOR_HTTP__PORT=port)
    assert down.returncode != 0 and f"127.0.0.1:{port}/healthz" in down.stderr.decode()


def _compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose/docker-compose.yml").read_text())


def test_compose_file(monkeypatch: pytest.MonkeyPatch) -> None:
    compose = _compose()
    services = compose["services"]
    assert {"kafka", "monitor", "prometheus", "alertmanager", "grafana"} <= set(services)
    base = DEPLOY / "compose"
    mon = services["monitor"]
    assert mon["image"] == IMAGE
    for name, svc in services.items():
        if "model-monitor" in svc.get("image", "") or "build" in svc:
            assert name == "monitor" and svc["image"] == IMAGE, name
    context = (base / mon["build"]["context"]).resolve()
    assert context == REPO and (context / mon["build"]["dockerfile"]).resolve() == (
        DEPLOY / "Dockerfile"
    )
    assert mon["command"] == json.loads(dict(_final_stage())["CMD"])
    assert f"{PORT}:{PORT}" in mon["ports"]
    # bind mounts point at files in the repo; named volumes are declared
    mounts: dict[str, dict[str, Path]] = {}
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            src, target = vol.split(":")[:2]
            if src.startswith("."):
                path = (base / src).resolve()
                assert path.exists(), f"{name}: mount source {src} does not exist"
                mounts.setdefault(name, {})[target] = path
            else:
                assert src in compose["volumes"], f"{name}: volume {src} is not declared"
    mounted = {vol.split(":")[1] for vol in mon["volumes"]}
    assert {CONFIG_PATH, STATE_DIR} <= mounted
    # the monitor's config, as the container sees it (with the compose environment)
    config = mounts["monitor"][CONFIG_PATH]
    env = {k: str(v) for k, v in mon.get("environment", {}).items() if k.startswith("MONITOR_")}
    _check_config(config, monkeypatch, env)
    settings = load_settings(config)
    assert settings.http.port == PORT and settings.http.host == "0.0.0.0"
    assert str(settings.state.dir) == STATE_DIR
    host, port = settings.kafka.bootstrap_servers.split(":")
    kafka_env = services["kafka"]["environment"]
    assert f"PLAINTEXT://{host}:{port}" in kafka_env["KAFKA_ADVERTISED_LISTENERS"]
    topics_cmd = " ".join(services["kafka-topics"]["command"])
    for topic in (settings.kafka.predictions_topic, settings.kafka.labels_topic,
                  settings.kafka.dead_letter_topic):  # fmt: skip
        assert topic and topic in topics_cmd, f"topic {topic} not created"
    # Prometheus scrapes the monitor service on its port and path, alerts Alertmanager
    prom_cfg = yaml.safe_load(mounts["prometheus"]["/etc/prometheus/prometheus.yml"].read_text())
    (job,) = [j for j in prom_cfg["scrape_configs"] if j["job_name"] == "model-monitor"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job["static_configs"][0]["targets"] == [f"monitor:{PORT}"]
    am_targets = prom_cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am_targets == ["alertmanager:9093"] and "9093:9093" in services["alertmanager"]["ports"]
    assert mounts["prometheus"]["/etc/prometheus/rules"] == base / "rules"
    assert prom_cfg["rule_files"] == ["rules/*.yml"]
    assert mounts["alertmanager"]["/etc/alertmanager/alertmanager.yml"] == (
        DEPLOY / "alertmanager/alertmanager.yml"
    )
    # Grafana: provisioning + the dashboard where the provider looks for it
    graf = mounts["grafana"]
    assert graf["/etc/grafana/provisioning"] == DEPLOY / "grafana/provisioning"
    provider = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/dashboards/model-monitor.yml").read_text()
    )["providers"][0]
    dash_target = next(t for t, p in graf.items() if p == DEPLOY / "grafana/model-monitor.json")
    assert Path(dash_target).parent == Path(provider["options"]["path"])
    (ds,) = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    (var,) = [v for v in _dashboard()["templating"]["list"] if v["name"] == "datasource"]
    assert var["current"]["value"] == ds["uid"], "the dashboard's default datasource"
    assert "9090:9090" in services["prometheus"]["ports"]


def test_compose_prometheus_config_and_rules_pass_promtool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    promtool = require_binary("promtool", hint="apt-get install prometheus")
    rules = sorted((DEPLOY / "compose/rules").glob("*.yml"))
    assert [r.name for r in rules] == ["model-monitor.rules.yml"]
    done = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=DEPLOY / "compose",
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "SUCCESS: 1 rule files found" in out and "model-monitor.rules.yml" in out, out
    # the shipped rules are what `monitor rules` makes of the compose config today
    monkeypatch.chdir(REPO)
    for key in list(os.environ):
        if key.startswith("MONITOR_"):
            monkeypatch.delenv(key)
    generated = io.StringIO()
    with contextlib.redirect_stdout(generated):
        code = cli.main(["rules", "-c", "deploy/compose/monitor.toml"])
    assert code == 0
    assert rules[0].read_text() == generated.getvalue(), (
        "deploy/compose/rules/model-monitor.rules.yml is stale; regenerate it with\n"
        "  monitor rules -c deploy/compose/monitor.toml > "
        "deploy/compose/rules/model-monitor.rules.yml"
    )
    alerts = {
        r["alert"]
        for g in yaml.safe_load(rules[0].read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    assert {"ModelSloBreached", "MonitorNotConsuming", "MonitorCheckpointFailing"} <= alerts


def test_alertmanager_config_passes_amtool() -> None:
    amtool = require_binary("amtool", hint="apt-get install prometheus-alertmanager")
    path = DEPLOY / "alertmanager/alertmanager.yml"
    done = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    cfg = yaml.safe_load(path.read_text())
    receivers = {r["name"] for r in cfg["receivers"]}
    routes = {tuple(r["matchers"]): r["receiver"] for r in cfg["route"]["routes"]}
    assert routes == {('severity = "page"',): "page", ('severity = "ticket"',): "ticket"}
    assert set(routes.values()) | {cfg["route"]["receiver"]} <= receivers
    # which receiver a page and a ticket really reach, by Alertmanager's own routing
    for severity in ("page", "ticket"):
        test = subprocess.run(
            [amtool, "config", "routes", "test", f"--config.file={path}",
             f"severity={severity}", "alertname=X"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert test.returncode == 0 and test.stdout.strip() == severity, test.stdout + test.stderr


def _walk(obj: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in nested dicts and lists."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)


def _manifests() -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert docs, f"{path.name} is empty"
        for d in docs:
            assert {"apiVersion", "kind"} <= set(d), path.name
        out[path.name] = docs
    return out


def _one(kind: str) -> dict[str, Any]:
    found = [d for docs in _manifests().values() for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} manifests"
    return found[0]


def test_kubernetes_manifests(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    manifests = _manifests()
    kustomization = manifests.pop("kustomization.yaml")[0]
    # kustomize applies every manifest but the example Secret (created by the operator)
    assert set(kustomization["resources"]) == set(manifests) - {"secret.example.yaml"}
    namespace = kustomization["namespace"]
    for docs in manifests.values():
        for d in docs:
            if d["kind"] != "Namespace":
                assert d["metadata"].get("namespace", namespace) == namespace

    # anywhere in any manifest: only our image, our port, our HTTP paths
    paths = {"/healthz", "/readyz", "/metrics"}
    for docs in manifests.values():
        for key, value in _walk(docs):
            if key == "image":
                assert value == IMAGE, value
            elif key in ("containerPort", "port") and isinstance(value, int):
                assert value == PORT, (key, value)
            elif key == "path" and str(value).startswith("/"):
                assert value in paths, value

    deploy = _one("Deployment")
    spec = deploy["spec"]
    assert spec["replicas"] == 1, "one instance per consumer group"
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    (ctr,) = pod["containers"]
    assert ctr["image"] == IMAGE
    assert ctr["args"] == json.loads(dict(_final_stage())["CMD"])
    assert "command" not in ctr  # the image's ENTRYPOINT (monitor) runs
    (port,) = ctr["ports"]
    assert port == {"name": "http", "containerPort": PORT, "protocol": "TCP"}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                        ("startupProbe", "/healthz")):  # fmt: skip
        assert ctr[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    assert {"cpu", "memory"} <= set(ctr["resources"]["requests"])
    assert "memory" in ctr["resources"]["limits"]
    uid, gid = (int(x) for x in dict(_final_stage())["USER"].split(":"))
    psc, csc = pod["securityContext"], ctr["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == uid and psc["runAsGroup"] == gid
    assert psc["fsGroup"] == gid, "the state volume must be writable by the monitor's group"
    assert csc["readOnlyRootFilesystem"] is True and csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
    state = volumes[mounts[STATE_DIR]["name"]]
    assert not mounts[STATE_DIR].get("readOnly", False)
    assert "persistentVolumeClaim" in state or "emptyDir" in state
    if "persistentVolumeClaim" in state:
        pvc = _one("PersistentVolumeClaim")
        assert state["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
        assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "/tmp" in mounts and "emptyDir" in volumes[mounts["/tmp"]["name"]]
    config_mount = mounts[str(Path(CONFIG_PATH).parent)]
    assert config_mount["readOnly"] is True
    cm = _one("ConfigMap")
    assert volumes[config_mount["name"]]["configMap"]["name"] == cm["metadata"]["name"]
    assert set(cm["data"]) == {Path(CONFIG_PATH).name}

    # the embedded config passes check-config and agrees with the manifests
    config = tmp_path / "config.toml"
    config.write_text(cm["data"]["config.toml"])
    (env,) = ctr["env"]
    assert env["name"] == "MONITOR_KAFKA__SASL_PASSWORD"
    secret = _one("Secret")
    ref = env["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    _check_config(config, monkeypatch, {env["name"]: "from-the-secret"})
    settings = load_settings(config)
    assert settings.http.port == PORT and settings.http.host == "0.0.0.0"
    assert str(settings.state.dir) == STATE_DIR
    assert settings.kafka.sasl_password is not None  # the environment supplied it
    assert "sasl_password" not in cm["data"]["config.toml"], "secrets do not belong in the TOML"
    assert pod["terminationGracePeriodSeconds"] > settings.state.shutdown_grace
    # its SLOs make valid Prometheus rules (for a PrometheusRule)
    generated = io.StringIO()
    with contextlib.redirect_stdout(generated):
        assert cli.main(["rules", "-c", str(config)]) == 0
    rules = tmp_path / "rules.yml"
    rules.write_text(generated.getvalue())
    promtool = require_binary("promtool", hint="apt-get install prometheus")
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert {s.name for s in settings.slos} <= set(
        re.findall(r'slo: "([^"]+)"', generated.getvalue())
    )

    svc = _one("Service")
    assert svc["spec"]["selector"].items() <= labels.items()
    (sport,) = svc["spec"]["ports"]
    assert sport["name"] == "http" and sport["port"] == PORT and sport["targetPort"] == "http"
    sm = _servicemonitor()
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [namespace]
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == sport["name"] and endpoint["path"] == "/metrics"


def _servicemonitor() -> dict[str, Any]:
    path = DEPLOY / "kubernetes/components/servicemonitor/servicemonitor.yaml"
    (doc,) = yaml.safe_load_all(path.read_text())
    assert doc["kind"] == "ServiceMonitor"
    return doc


def _kustomize(path: Path) -> list[dict[str, Any]] | None:
    """``kubectl kustomize`` output when kubectl is installed (an extra check: the YAML
    assertions around it hold on their own)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    done = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_base_kustomization_needs_no_crds_and_servicemonitor_is_a_component() -> None:
    """``kubectl apply -k deploy/kubernetes`` must work on a cluster without the Prometheus
    Operator: only core kinds in the base; the ServiceMonitor is an opt-in component."""
    base = yaml.safe_load((DEPLOY / "kubernetes/kustomization.yaml").read_text())
    assert "components" not in base
    kinds = set()
    for name in base["resources"]:
        for doc in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()):
            assert doc["apiVersion"].split("/")[0] in ("v1", "apps"), (name, doc["apiVersion"])
            kinds.add(doc["kind"])
    assert "ServiceMonitor" not in kinds
    comp_dir = DEPLOY / "kubernetes/components/servicemonitor"
    comp = yaml.safe_load((comp_dir / "kustomization.yaml").read_text())
    assert comp["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    assert comp["kind"] == "Component" and comp["resources"] == ["servicemonitor.yaml"]
    overlay_dir = DEPLOY / "kubernetes-prometheus-operator"
    overlay = yaml.safe_load((overlay_dir / "kustomization.yaml").read_text())
    assert (overlay_dir / overlay["resources"][0]).resolve() == (DEPLOY / "kubernetes").resolve()
    assert [(overlay_dir / c).resolve() for c in overlay["components"]] == [comp_dir.resolve()]
    assert _servicemonitor()["metadata"]["namespace"] == base["namespace"]

    rendered = _kustomize(DEPLOY / "kubernetes")
    if rendered is not None:
        assert not [d for d in rendered if "monitoring.coreos.com" in d["apiVersion"]]
        with_sm = _kustomize(overlay_dir)
        assert with_sm is not None
        sms = [d for d in with_sm if d["kind"] == "ServiceMonitor"]
        assert len(sms) == 1 and sms[0]["metadata"]["namespace"] == base["namespace"]
        assert len(with_sm) == len(rendered) + 1


def test_argo_template_url_is_the_shipped_service() -> None:
    """The AnalysisTemplate's default URL must reach the Service deploy/kubernetes creates,
    in the namespace its kustomization deploys to (else every analysis errors)."""
    docs = list(yaml.safe_load_all((DEPLOY / "argo-rollouts/analysis-template.yaml").read_text()))
    (arg,) = [a for a in docs[0]["spec"]["args"] if a["name"] == "monitor-url"]
    m = re.fullmatch(r"http://([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)", arg["value"])
    assert m, arg["value"]
    namespace = yaml.safe_load((DEPLOY / "kubernetes/kustomization.yaml").read_text())["namespace"]
    svc = _one("Service")
    assert m.group(1) == svc["metadata"]["name"]
    assert m.group(2) == namespace
    assert int(m.group(3)) == svc["spec"]["ports"][0]["port"]


def test_systemd_unit_exposure_is_at_most_3() -> None:
    """``systemd-analyze security --offline=true``: the unit's exposure score ≤ 3.0."""
    analyze = require_binary("systemd-analyze", hint="apt-get install systemd")
    unit = DEPLOY / "systemd/model-monitor.service"
    done = subprocess.run([analyze, "security", "--offline=true", "--no-pager", str(unit)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    m = re.search(r"Overall exposure level for model-monitor\.service: ([0-9.]+)", done.stdout)
    assert m, done.stdout + done.stderr
    assert float(m.group(1)) <= 3.0, done.stdout


def test_systemd_unit_matches_the_cli_and_state_dir() -> None:
    unit = (DEPLOY / "systemd/model-monitor.service").read_text()
    keys: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            k, _, v = line.partition("=")
            keys.setdefault(k.strip(), []).append(v.strip())
    (start,) = keys["ExecStart"]
    (pre,) = keys["ExecStartPre"]
    assert start.split()[1:] == ["run", "-c", CONFIG_PATH]
    assert pre.split()[1:] == ["check-config", "-c", CONFIG_PATH]
    assert _is_cli_verb("run") and _is_cli_verb("check-config")
    assert keys["StateDirectory"] == ["model-monitor"] and keys["ReadWritePaths"] == [STATE_DIR]
    assert keys["KillSignal"] == ["SIGTERM"]
    assert int(keys["TimeoutStopSec"][0]) > 20  # the default state.shutdown_grace


# -- the Grafana dashboard --------------------------------------------------------------
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__all", "__auto"}
DASHBOARD_VARIABLES = {"datasource", "model", "version", "window", "slice", "mc_model", "reg_model",
                       "rank_model", "k", "job", "instance"}  # fmt: skip
# operational series: every panel showing one filters it by the job/instance variables
OPERATIONAL = ("mlmon_records_total", "mlmon_invalid_records_total", "mlmon_consumer_lag",
               "mlmon_pending_predictions", "mlmon_orphan_labels", "mlmon_join_events_total",
               "mlmon_checkpoint_age_seconds", "mlmon_last_evaluation_timestamp_seconds",
               "mlmon_consuming", "mlmon_checkpoint_failures_total")  # fmt: skip


def _dashboard() -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana/model-monitor.json").read_text())


def dashboard_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows hold their panels
    return out


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard_panels(dashboard)
            for t in p.get("targets", [])]  # fmt: skip


def _fstring_pattern(node: ast.JoinedStr) -> str:
    parts = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            parts.append(re.escape(str(v.value)))
        else:
            parts.append("{}")
    return "".join(parts)


_SUFFIXES = {
    "CounterMetricFamily": ("_total",),
    "HistogramMetricFamily": ("_bucket", "_sum", "_count"),
}


def exporter_metric_names() -> set[str]:
    """Every series name monitor/export/prometheus.py can emit, read from its source:
    literal family names (+ `_total` for counters, `_bucket/_sum/_count` for histograms),
    f-string families expanded over the literal names their comprehension iterates over,
    and the quality families `mlmon_<metric>` (+ `_ci_lower`, `_ci_upper`) for every
    metric of the task catalogs in monitor.config."""
    import monitor.config as config
    from monitor.stats.binary import fbeta_name
    from monitor.stats.estimation import ESTIMATED_METRICS, MULTICLASS_ESTIMATED_METRICS
    from monitor.stats.scores import gain_name

    tree = ast.parse((REPO / "monitor/export/prometheus.py").read_text())
    names: set[str] = set()
    consumed: set[int] = set()  # constants that are part of a name handled below
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            consumed |= {id(v) for v in node.values}
        if not (isinstance(node, ast.Call) and node.args):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and str(first.value).startswith("mlmon_"):
            consumed.add(id(first))
            suffixes = _SUFFIXES.get(getattr(node.func, "id", ""), ("",))
            names |= {first.value + s for s in suffixes}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and id(node) not in consumed
            and isinstance(node.value, str)
            and re.fullmatch(r"mlmon_[a-z0-9_]+", node.value)
        ):
            names.add(node.value)
    # f"mlmon_drift_{name}" in `{...: Family(f"mlmon_drift_{name}", ...) for name, doc in
    # (("statistic", ...), ...)}`
    for comp in ast.walk(tree):
        if not isinstance(comp, ast.DictComp | ast.ListComp | ast.GeneratorExp | ast.SetComp):
            continue
        (gen,) = comp.generators
        if not isinstance(gen.iter, ast.Tuple):
            continue
        values = [e.elts[0].value for e in gen.iter.elts
                  if isinstance(e, ast.Tuple) and isinstance(e.elts[0], ast.Constant)]  # fmt: skip
        for call in ast.walk(comp):
            if not (isinstance(call, ast.Call) and call.args):
                continue
            if not isinstance(call.args[0], ast.JoinedStr):
                continue
            pattern = _fstring_pattern(call.args[0])
            if pattern.startswith("mlmon_") and pattern.count("{}") == 1:
                suffixes = _SUFFIXES.get(getattr(call.func, "id", ""), ("",))
                for v in values:
                    names |= {pattern.replace("{}", v).replace("\\", "") + s for s in suffixes}
    betas = (2.0, 0.5)
    catalog: set[str] = set()
    for attr in ("BINARY_METRICS", "MULTICLASS_METRICS", "REGRESSION_METRICS"):
        catalog |= set(getattr(config, attr, ()))
    # configuration words that stand for several exported names
    catalog -= {"fbeta", "per_class", "pinball", "gain"}
    catalog |= {fbeta_name(b) for b in betas}
    catalog |= {gain_name(f, stem) for f in (0.1, 0.2, 0.5) for stem in ("gain", "lift")}
    catalog |= {f"estimated_{m}" for m in (*ESTIMATED_METRICS, *MULTICLASS_ESTIMATED_METRICS)}
    catalog.add("estimate_reliable")
    # ranking metrics carry their cut-off (k = 5, 10 by default); mrr does not
    catalog |= {f"{m}_at_{k}" for m in config.RANKING_METRICS if m != "mrr" for k in (5, 10)}
    catalog.add("mrr")
    for metric in catalog:
        names |= {f"mlmon_{metric}", f"mlmon_{metric}_ci_lower", f"mlmon_{metric}_ci_upper"}
    return names


def test_exporter_metric_name_scan_finds_the_contract() -> None:
    names = exporter_metric_names()
    for name in ("mlmon_accuracy_ci_lower", "mlmon_roc_auc", "mlmon_f2", "mlmon_records_total",
                 "mlmon_label_delay_seconds_bucket", "mlmon_drift_p_value_adjusted",
                 "mlmon_reliability_observed", "mlmon_comparison_ci_upper",
                 "mlmon_checkpoint_failures_total", "mlmon_consuming"):  # fmt: skip
        assert name in names, name
    assert all(re.fullmatch(r"mlmon_[a-z0-9]+(_[a-z0-9]+)*", n) for n in names), sorted(names)
    assert "mlmon_comparison_effect_ci_lower" not in names
    assert "mlmon_records" not in names  # a counter is exposed with _total


def substitute(expr: str, values: dict[str, str], partial: bool = False) -> str:
    """Replace $var and ${var} (Grafana syntax) with ``values`` (``partial``: leave the
    others as they are)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if partial and name not in values:
            return m.group(0)
        assert name in values, f"no value for ${name} in {expr}"
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def test_grafana_dashboard_variables_and_metrics(tmp_path: Path) -> None:
    dash = _dashboard()
    assert 36 <= dash["schemaVersion"] <= 41 and dash["uid"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert set(variables) >= DASHBOARD_VARIABLES
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("model", "version", "window", "slice"):
        query = variables[name]["query"]["query"]
        m = re.fullmatch(r"label_values\((\w+)(\{.*\})?, (\w+)\)", query)
        assert m and m.group(1) == "mlmon_window_samples" and m.group(3) == name, query
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    defined = set(variables) | GRAFANA_BUILTINS
    known = exporter_metric_names()
    panels = dashboard_panels(dash)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for p in panels:
        used = set(re.findall(r"\$\{?(\w+)", json.dumps(p)))
        assert used <= defined, f"{p['title']}: undefined variables {used - defined}"
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for t in p.get("targets", []):
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        # fill-between bands name series that the panel's targets really produce
        legends = {t.get("legendFormat") for t in p.get("targets", [])}
        for o in p.get("fieldConfig", {}).get("overrides", []):
            for prop in o["properties"]:
                if prop["id"] == "custom.fillBelowTo":
                    assert o["matcher"]["options"] in legends and prop["value"] in legends
    exprs = dashboard_exprs(dash)
    # the ranking panels name the cut-off by the $k variable (values such as 10)
    used_names = {
        n
        for _, e in exprs
        for n in re.findall(r"\bmlmon_[a-z0-9_]+", substitute(e, {"k": "10"}, partial=True))
    }
    assert used_names <= known, f"not exported by the monitor: {sorted(used_names - known)}"
    # what the dashboard is for: each family below is on some panel
    for family in ("mlmon_accuracy", "mlmon_accuracy_ci_lower", "mlmon_recall_ci_upper",
                   "mlmon_roc_auc_ci_lower", "mlmon_reliability_observed",
                   "mlmon_reliability_mean_predicted", "mlmon_drift_effect",
                   "mlmon_drift_detected", "mlmon_comparison_effect", "mlmon_comparison_decision",
                   "mlmon_label_coverage", "mlmon_label_delay_seconds_bucket",
                   "mlmon_records_total", "mlmon_consumer_lag", "mlmon_invalid_records_total",
                   "mlmon_checkpoint_age_seconds", "mlmon_pending_predictions",
                   "mlmon_slo_breached", "mlmon_f1_macro", "mlmon_f1_macro_ci_lower",
                   "mlmon_confusion_matrix", "mlmon_mae", "mlmon_mae_ci_upper", "mlmon_rmse",
                   "mlmon_r2", "mlmon_interval_coverage", "mlmon_estimated_accuracy",
                   "mlmon_estimated_accuracy_ci_lower", "mlmon_estimate_reliable",
                   "mlmon_ks_statistic", "mlmon_gini", "mlmon_gain_at_10",
                   "mlmon_mase", "mlmon_ndcg_at_10", "mlmon_ndcg_at_10_ci_lower", "mlmon_mrr",
                   "mlmon_map_at_10", "mlmon_precision_at_10", "mlmon_recall_at_10",
                   "mlmon_hit_rate_at_10"):  # fmt: skip
        assert family in used_names, f"no panel shows {family}"
    for title, expr in exprs:
        for name in OPERATIONAL:
            for m in re.finditer(rf"\b{name}\b(\{{[^}}]*\}})?", expr):
                sel = m.group(1) or ""
                assert 'job=~"$job"' in sel and 'instance=~"$instance"' in sel, (title, expr)
    for name, metric in (("mc_model", "mlmon_f1_macro"), ("reg_model", "mlmon_mae"),
                         ("rank_model", "mlmon_mrr")):  # fmt: skip
        query = variables[name]["query"]["query"]
        assert query == f'label_values({metric}{{slice="all"}}, model)', query

    # every expression is valid PromQL once the variables are substituted (promtool parses
    # each as a recording rule)
    promtool = require_binary("promtool", hint="apt-get install prometheus")
    values = {"datasource": "prometheus", "model": "fraud", "version": "v1|v2", "window": "1h",
              "slice": "all", "comparison": ".*", "__rate_interval": "1m", "__range": "1h",
              "mc_model": "triage", "reg_model": "eta", "rank_model": "search", "k": "10",
              "job": ".*", "instance": ".*",
              "__interval": "15s"}  # fmt: skip
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": substitute(e, values)}
        for i, (_, e) in enumerate(exprs)]}]}  # fmt: skip
    path = tmp_path / "dashboard-exprs.yml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
