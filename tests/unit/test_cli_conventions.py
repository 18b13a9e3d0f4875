"""The command line as operators expect it: --version, log options anywhere, errors on
stderr, bad output paths and closed pipes end in one clear line, empty secrets refused."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry

from monitor.export.http import HttpServer

REPO = Path(__file__).resolve().parents[2]
CONFIG = '[[models]]\nname = "fraud"\n'


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    env = {**base, **(env or {})}
    return subprocess.run([sys.executable, "-m", "monitor", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=REPO)  # fmt: skip


def _config(tmp_path: Path, text: str = CONFIG) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    return cfg


def test_version_and_help_per_subcommand() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("monitor "), proc
    assert "Python 3." in proc.stdout
    for verb, words in (("run", "SIGTERM"), ("replay", "JSONL"), ("baseline", "reference")):
        help_text = run_cli(verb, "--help").stdout
        assert words in help_text, (verb, help_text)


def test_global_options_after_the_subcommand_and_from_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret-value\n")
    secret.chmod(0o644)  # world-readable: a warning, logged in the chosen format
    cfg = _config(
        tmp_path, f'[http]\nbasic_auth_user = "p"\nbasic_auth_password_file = "{secret}"\n' + CONFIG
    )
    proc = run_cli("check-config", "-c", str(cfg), "--log-format", "json")
    assert proc.returncode == 0, proc.stderr
    (line,) = [json.loads(x) for x in proc.stderr.splitlines()]
    assert line["level"] == "WARNING" and "readable by every user" in line["message"], line
    assert "s3cret-value" not in proc.stderr
    # the same from the environment, before the subcommand overridden after it
    env = {"MONITOR_LOG_FORMAT": "json", "MONITOR_LOG_LEVEL": "error"}
    quiet = run_cli("check-config", "-c", str(cfg), env=env)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr  # ERROR hides it
    loud = run_cli("--log-level", "error", "check-config", "-c", str(cfg), "--log-level", "info")
    assert "readable by every user" in loud.stderr and not loud.stderr.startswith("{")
    bad = run_cli("check-config", "-c", str(cfg), env={"MONITOR_LOG_LEVEL": "chatty"})
    assert bad.returncode == 2 and "MONITOR_LOG_LEVEL" in bad.stderr


def test_check_config_problems_go_to_stderr(tmp_path: Path) -> None:
    proc = run_cli("check-config", "-c", str(_config(tmp_path, "[kafka]\nbogus = 1\n" + CONFIG)))
    assert proc.returncode == 2
    assert proc.stdout == "" and "kafka.bogus: unknown key" in proc.stderr


def test_fatal_errors_are_json_under_log_format_json(tmp_path: Path) -> None:
    """Every stderr line parses as JSON: config problems as one object listing them,
    a replay that cannot run as one object naming the cause."""
    bad = _config(tmp_path, "[kafka]\nbogus = 1\n[http]\nport = -1\n" + CONFIG)
    proc = run_cli("check-config", "-c", str(bad), "--log-format", "json")
    assert proc.returncode == 2
    (line,) = [json.loads(x) for x in proc.stderr.splitlines()]
    assert line["level"] == "ERROR" and "invalid configuration (2 problem(s))" in line["message"]
    assert {p["key"] for p in line["problems"]} == {"kafka.bogus", "http.port"}
    assert line["source"] == str(bad)
    preds = tmp_path / "p.jsonl"
    preds.write_text("not json\n")
    good = tmp_path / "good.toml"
    good.write_text(f'[state]\ndir = "{tmp_path}"\n' + CONFIG)
    proc = run_cli("replay", "-c", str(good),
                   "--predictions", str(preds), "--labels", str(tmp_path / "none.jsonl"),
                   env={"MONITOR_LOG_FORMAT": "json"})  # fmt: skip
    assert proc.returncode == 2
    (line,) = [json.loads(x) for x in proc.stderr.splitlines()]
    assert line["message"] == f"monitor replay: {tmp_path / 'none.jsonl'} is not a file"
    # the same problems as indented text for a person
    text = run_cli("check-config", "-c", str(bad))
    lines = text.stderr.splitlines()
    assert lines[0].endswith("invalid configuration (2 problem(s))"), lines
    assert sorted(line.split(":")[0] for line in lines[1:]) == ["  http.port", "  kafka.bogus"]


def test_empty_secrets_are_configuration_errors(tmp_path: Path) -> None:
    blank = tmp_path / "blank"
    blank.write_text("\n")
    blank.chmod(0o600)
    cfg = _config(
        tmp_path, f'[http]\nbasic_auth_user = "p"\nbasic_auth_password_file = "{blank}"\n' + CONFIG
    )
    proc = run_cli("check-config", "-c", str(cfg))
    assert proc.returncode == 2, proc
    assert "http.basic_auth_password_file" in proc.stderr and "empty" in proc.stderr
    # set in the environment but empty
    cfg = _config(tmp_path, '[http]\nbasic_auth_user = "p"\n' + CONFIG)
    proc = run_cli("check-config", "-c", str(cfg), env={"MONITOR_HTTP__BASIC_AUTH_PASSWORD": ""})
    assert proc.returncode == 2, proc
    assert "http.basic_auth_password" in proc.stderr and "empty" in proc.stderr
    # `run` refuses too, before serving anything
    proc = run_cli("run", "-c", str(cfg), env={"MONITOR_HTTP__BASIC_AUTH_PASSWORD": "  "})
    assert proc.returncode == 2 and "http.basic_auth_password" in proc.stderr


def test_basic_scheme_is_case_insensitive() -> None:
    server = HttpServer(
        "127.0.0.1", 0, CollectorRegistry(), lambda: (True, []), dict, dict,
        basic_auth=("prom", "pw"),
    )  # fmt: skip
    server.start()
    try:
        token = base64.b64encode(b"prom:pw").decode()
        for scheme in ("Basic", "basic", "BASIC"):
            req = urllib.request.Request(
                f"{server.url}/metrics", headers={"Authorization": f"{scheme} {token}"}
            )
            with urllib.request.urlopen(req, timeout=5) as resp:
                assert resp.status == 200, scheme
        req = urllib.request.Request(
            f"{server.url}/metrics", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            urllib.request.urlopen(req, timeout=5)
            raise AssertionError("a Bearer token must not pass basic auth")
        except urllib.error.HTTPError as err:
            assert err.code == 401
    finally:
        server.stop()


def test_bad_output_paths_fail_first_with_one_line(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    data = tmp_path / "train.jsonl"
    data.write_text('{"features": {"x": 1.0}}\n' * 10)
    proc = run_cli("baseline", "-c", str(cfg), "--input", str(data), "--output", "nodir/b.json")
    assert proc.returncode == 2, proc
    assert proc.stderr.strip().count("\n") == 0 and "nodir" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    preds, labels = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    preds.write_text('{"id": "a", "ts": 1, "model": "fraud", "version": "v1", "score": 0.5}\n')
    labels.write_text('{"id": "a", "ts": 2, "label": 1}\n')
    proc = run_cli(
        "replay", "-c", str(cfg), "--predictions", str(preds), "--labels", str(labels),
        "--report", "/nonexist/o.json",
    )  # fmt: skip
    assert proc.returncode == 2, proc
    assert proc.stderr.strip().count("\n") == 0 and "/nonexist" in proc.stderr, proc.stderr
    assert "replay:" in proc.stderr and "%" not in proc.stderr  # failed before replaying


def test_closed_stdout_exits_quietly(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    base = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "rules", "-c", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=base,
        cwd=REPO,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first write
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_replay_progress_uses_carriage_return_only_on_a_terminal(tmp_path: Path) -> None:
    cfg = _config(tmp_path, f'[state]\ndir = "{tmp_path}/state"\n' + CONFIG)
    preds, labels = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    preds.write_text('{"id": "a", "ts": 1, "model": "fraud", "version": "v1", "score": 0.5}\n')
    labels.write_text('{"id": "a", "ts": 2, "label": 1}\n')
    proc = run_cli("replay", "-c", str(cfg), "--predictions", str(preds), "--labels", str(labels))
    assert proc.returncode == 0, proc.stderr
    assert "replay: 100.0%" in proc.stderr and "\r" not in proc.stderr
