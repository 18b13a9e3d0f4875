"""Fuzzing configuration loading: a TOML file, a parsed mapping, environment overrides.

Whatever the input — values of the wrong type at random keys, unknown keys, garbage
bytes as the file, garbage strings in ``MONITOR_*`` variables — loading ends in exactly
one of two ways: a valid ``Settings``, or a ``ConfigError`` whose every problem names a
key path (``kafka.max_poll_records``, ``models[0].windows[0].size``, ``(syntax)`` ...).
Never another exception type: ``monitor run`` and ``check-config`` report a ConfigError
with exit status 2, anything else would be a traceback. A ``Settings`` that validates
can also be wired into an engine and a pipeline (the daemon's first step), so a value
that passes validation cannot crash the start either.
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from monitor.config import ConfigError, Settings, load_settings, settings_from_mapping
from monitor.ingest.deadletter import FileDeadLetter
from monitor.wiring import build_engine, build_pipeline

BASE: dict[str, Any] = {"models": [{"name": "m"}]}


# -- the key catalogue, read from the settings classes ------------------------------------
def _model_class(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(section class, is a list of them) for a field annotation, else (None, False)."""
    args = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin = typing.get_origin(annotation)
    if origin is tuple and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0], True
    if origin in (typing.Union, types.UnionType):
        for a in args:
            cls, many = _model_class(a)
            if cls is not None:
                return cls, many
    return None, False


def key_paths(cls: type[BaseModel] = Settings, prefix: str = "") -> list[tuple[str, str]]:
    """Every key path of the settings tree: (path, "leaf" | "table" | "array of tables")."""
    out: list[tuple[str, str]] = []
    for name, field in cls.model_fields.items():
        path = f"{prefix}{name}"
        sub, many = _model_class(field.annotation)
        if sub is None:
            out.append((path, "leaf"))
            continue
        out.append((path, "array" if many else "table"))
        out.extend(key_paths(sub, f"{path}[0]." if many else f"{path}."))
    return out


KEYS = key_paths()
LEAVES = [p for p, kind in KEYS if kind == "leaf"]
TABLES = [p for p, kind in KEYS if kind != "leaf"]
SECTIONS = [p for p, kind in KEYS if kind == "table"]
assert "kafka.max_poll_records" in LEAVES and "models[0].windows[0].size" in LEAVES
assert "models[0].drift" in TABLES


def _parts(path: str) -> list[str | int]:
    out: list[str | int] = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        out.append(int(index) if index else name)
    return out


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at ``path`` (``models[0].windows[0].size``), creating what is needed;
    a container in the way that is not a table/array is replaced."""
    parts = _parts(path)
    cur: Any = data
    for part, nxt in itertools.pairwise(parts):
        want: Any = [] if isinstance(nxt, int) else {}
        if isinstance(part, int):
            while len(cur) <= part:
                cur.append({} if isinstance(want, dict) else [])
            if not isinstance(cur[part], type(want)):
                cur[part] = want
            cur = cur[part]
        else:
            if not isinstance(cur.get(part), type(want)):
                cur[part] = want
            cur = cur[part]
    last = parts[-1]
    if isinstance(last, int):
        while len(cur) <= last:
            cur.append(None)
    cur[last] = value


# -- values -------------------------------------------------------------------------------
toml_scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "5m", "1h30m", "-1s", "1 fortnight", "0", "1e400", "PLAINTEXT",
                     "earliest", "binary", "first:24h", "nan", "inf", "99999999999999999999d"]),
    st.dates(),
    st.times(),
    st.datetimes(),
)  # fmt: skip
toml_values = st.recursive(
    toml_scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(min_size=1, max_size=6), c),
    max_leaves=6,
)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """The base config with random values at random known keys, and unknown keys; returns
    the mapping and the paths that must be reported (unknown keys)."""
    data: dict[str, Any] = {"models": [{"name": "m"}]}
    must: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.integers(0, 3))
        if op <= 1:
            set_path(data, draw(st.sampled_from(LEAVES)), draw(toml_values))
        elif op == 2:
            set_path(data, draw(st.sampled_from(TABLES)), draw(toml_scalars))
        else:
            table = draw(st.sampled_from(["", *SECTIONS]))
            key = draw(st.from_regex(r"[a-z_]{1,10}", fullmatch=True))
            path = f"{table}.zz_{key}" if table else f"zz_{key}"
            set_path(data, path, draw(toml_scalars))
            must.append(path)
    # an unknown key is reported unless a later change replaced the table holding it
    return data, [p for p in must if _table_intact(data, p)]


def _table_intact(data: dict[str, Any], path: str) -> bool:
    """Whether the unknown key at ``path`` is still there: a later change may have
    replaced its table by a scalar and another recreated the table without it."""
    cur: Any = data
    *heads, last = _parts(path)
    for part in heads:
        if isinstance(part, int):
            if not isinstance(cur, list) or len(cur) <= part:
                return False
        elif not isinstance(cur, dict) or part not in cur:
            return False
        cur = cur[part]
    return isinstance(cur, dict) and last in cur


# -- the property ---------------------------------------------------------------------------
FIRST = {p.split(".")[0].split("[")[0] for p, _ in KEYS}
SPECIAL = {"(top level)", "(syntax)", "(file)"}


def check_outcome(load: typing.Callable[[], Settings], must: list[str] = ()) -> str:
    """Run ``load``; a Settings, or a ConfigError naming key paths — nothing else."""
    try:
        s = load()
    except ConfigError as err:
        assert err.problems, err
        for path, msg in err.problems:
            assert isinstance(path, str) and isinstance(msg, str) and msg.strip(), (path, msg)
            # a key path from the root of the tree (user-made keys, e.g. plugin options,
            # may hold any text; an unknown key at the root is named as written), or one
            # of the whole-file markers
            head = path.split(".")[0].split("[")[0]
            unknown_root = "." not in path and msg.startswith("unknown key")
            assert path in SPECIAL or head in FIRST or head.startswith("zz_") or unknown_root, (
                path,
                msg,
            )
        paths = [p for p, _ in err.problems]
        for p in must:
            assert any(q == p or q.startswith(p) for q in paths), (p, err.problems)
        return "error"
    assert isinstance(s, Settings)
    assert not must, f"unknown keys {must} were accepted"
    # a configuration that validates can be wired: the daemon's start cannot crash on it
    with tempfile.TemporaryDirectory() as tmp:
        try:
            engine = build_engine(s)
        except ConfigError:
            return "wiring error"  # e.g. a drift reference file that does not exist
        sink = FileDeadLetter(Path(tmp) / "dl.jsonl")
        build_pipeline(s, engine, sink)
        sink.close()
    return "ok"


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(mutated())
def test_mapping_fuzz_gives_settings_or_config_error(
    case: tuple[dict[str, Any], list[str]],
) -> None:
    data, must = case
    check_outcome(lambda: settings_from_mapping(data, "<fuzz>"), must)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\U{ord(c):08x}"
                             for c in v) + '"'  # fmt: skip
    if isinstance(v, datetime | date | time):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def to_toml(data: dict[str, Any]) -> str:
    """Everything as inline tables under the root: valid TOML for any nesting."""
    return "\n".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in data.items()) + "\n"


@FUZZ
@given(mutated())
def test_toml_file_fuzz_gives_settings_or_config_error(
    case: tuple[dict[str, Any], list[str]],
) -> None:
    data, must = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_text(to_toml(data), encoding="utf-8")
        check_outcome(lambda: load_settings(path), must)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=400), st.text(max_size=200).map(str.encode)))
@example(b"0=0")  # valid TOML, an unknown key at the root
def test_garbage_files_give_config_error(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_bytes(raw)
        assert check_outcome(lambda: load_settings(path)) == "error"


@contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.startswith("MONITOR_")}
    for k in saved:
        del os.environ[k]
    os.environ.update(values)
    try:
        yield
    finally:
        for k in values:
            os.environ.pop(k, None)
        os.environ.update(saved)


env_text = st.one_of(
    st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=30),
    st.sampled_from(["{", "[", "[garbage", '{"a":', "null", "[]", "{}", "nan", "inf", "-1",
                     "1e400", "true", '[{"name": 1}]', '{"x": 1}', "99999999999999999999", "0"]),
)  # fmt: skip
env_keys = st.one_of(
    st.sampled_from(sorted({p.replace("[0]", "") for p, _ in KEYS})).map(
        lambda p: "MONITOR_" + p.upper().replace(".", "__")
    ),
    st.from_regex(r"MONITOR_[A-Z_]{1,12}", fullmatch=True),
)


@FUZZ
@given(st.dictionaries(env_keys, env_text, min_size=1, max_size=3))
def test_garbage_environment_overrides_give_settings_or_config_error(env: dict[str, str]) -> None:
    with environ(env):
        check_outcome(lambda: settings_from_mapping(BASE, "<env fuzz>"))


@pytest.mark.parametrize(
    ("name", "value", "path"),
    [
        ("MONITOR_MODELS", "[garbage", "models"),
        ("MONITOR_KAFKA", "{", "kafka"),
        ("MONITOR_KAFKA__EXTRA_CONSUMER_CONFIG", "{bad", "kafka"),
        ("MONITOR_PLUGINS__PATHS", "not json", "plugins"),
        ("MONITOR_KAFKA__MAX_POLL_RECORDS", "lots", "kafka.max_poll_records"),
        ("MONITOR_KAFKA__NOPE", "x", "kafka.nope"),
        ("MONITOR_JOIN__LABEL_TTL", "inf", "join.label_ttl"),
    ],
)
def test_bad_environment_override_is_named(name: str, value: str, path: str) -> None:
    with environ({name: value}), pytest.raises(ConfigError) as info:
        settings_from_mapping(BASE, "<env>")
    assert path in [p for p, _ in info.value.problems], info.value.problems


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("join.label_ttl", float("inf")),
        ("evaluation.bucket_width", float("inf")),
        ("evaluation.max_future_skew", float("nan")),
        ("models[0].windows[0].delay", float("inf")),
        ("join.orphan_label_ttl", "99999999999999999999999d"),
    ],
)
def test_non_finite_or_absurd_durations_are_config_errors(path: str, value: Any) -> None:
    data: dict[str, Any] = {"models": [{"name": "m", "windows": [{"size": "1h"}]}]}
    set_path(data, path, value)
    with pytest.raises(ConfigError) as info:
        settings_from_mapping(data)
    assert path in [p for p, _ in info.value.problems], info.value.problems
