"""Packaging metadata: the licence text the metadata names, pins that satisfy the declared
ranges and are what the image installs, Parquet as an optional extra."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text("utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            assert canonicalize_name(name) not in pins, f"{name} pinned twice"
            pins[canonicalize_name(name)] = version
    return pins


def test_license_file_is_the_apache_2_text_the_metadata_names() -> None:
    text = (REPO / "LICENSE").read_text("utf-8")
    assert PYPROJECT["license"] == {"text": "Apache-2.0"}
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    for section in ("1. Definitions.", "2. Grant of Copyright License.", "3. Grant of Patent",
                    "4. Redistribution.", "7. Disclaimer of Warranty.",
                    "8. Limitation of Liability.", "END OF TERMS AND CONDITIONS"):  # fmt: skip
        assert section in text, section
    assert "License :: OSI Approved :: Apache Software License" in PYPROJECT["classifiers"]


def test_metadata_has_classifiers_and_urls() -> None:
    classifiers = PYPROJECT["classifiers"]
    major_minor = re.search(r">=\s*3\.(\d+)", PYPROJECT["requires-python"])
    assert major_minor is not None
    assert f"Programming Language :: Python :: 3.{major_minor.group(1)}" in classifiers
    assert {"Source", "Documentation", "Issues"} <= set(PYPROJECT["urls"])
    assert all(u.startswith("https://") for u in PYPROJECT["urls"].values())


def test_constraints_pin_every_runtime_dependency_within_its_range() -> None:
    pins = _pins()
    extras = PYPROJECT["optional-dependencies"]
    for spec in [*PYPROJECT["dependencies"], *extras["parquet"], *extras["fast"]]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert pins[name] in req.specifier, f"{req.name}=={pins[name]} outside {req.specifier}"


def test_parquet_is_an_extra_and_the_image_and_ci_use_the_pins() -> None:
    core = {canonicalize_name(Requirement(d).name) for d in PYPROJECT["dependencies"]}
    assert "pyarrow" not in core
    extras = PYPROJECT["optional-dependencies"]
    assert any(Requirement(d).name == "pyarrow" for d in extras["parquet"])
    assert "model-monitor[parquet]" in extras["test"]  # the tests read Parquet
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text("utf-8")
    assert re.search(r"pip install [^\n]*-c constraints\.txt", dockerfile)
    assert "COPY pyproject.toml README.md LICENSE constraints.txt" in dockerfile
    ci = (REPO / ".ci" / "run").read_text("utf-8")
    assert re.search(r"pip install [^\n]*-c constraints\.txt", ci)
