"""Versions an operator can see and retire (``monitor versions``), and the rejected
versions that look real, found in bounded memory among a flood of junk ones."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request

import numpy as np
import pytest

from monitor.engine.groups import BLOCKED_MIN, GroupRegistry
from monitor.engine.models import ModelSpec, WindowSpec
from monitor.export.http import HttpServer, Response

HOUR = 3_600_000
MODEL = ModelSpec("fraud", windows=(WindowSpec("1h", HOUR),), max_versions=20)


def _offer(reg: GroupRegistry, versions: list[str], at_ms: int) -> np.ndarray:
    """One batch of predictions of ``versions``: group codes, rejections counted."""
    model = np.zeros(len(versions), np.int16)
    codes = reg.codes(model, versions)
    reg.reject(model, versions, np.flatnonzero(codes < 0), np.full(len(versions), at_ms))
    return codes


def test_a_real_version_stands_out_of_a_flood_of_junk_ones() -> None:
    reg = GroupRegistry([MODEL])
    _offer(reg, ["v1"] * 50, 0)
    junk = [f"junk-{i}" for i in range(10_000)]
    _offer(reg, junk[:2000], 500)  # the flood fills the free slots first
    rng = np.random.default_rng(3)
    stream = np.array(junk[2000:] + ["v2"] * 2000, dtype=object)
    rng.shuffle(stream)  # then the canary's predictions, interleaved with more junk
    for batch in np.array_split(stream, 40):
        _offer(reg, [str(v) for v in batch], 1000)
    assert reg.live[0] == 20  # v1 and 19 junk versions fill the slots
    assert len(reg._blocked[0]) <= 32  # bounded memory, whatever the flood
    blocked = reg.blocked()
    assert [(m, v) for m, v, _ in blocked] == [("fraud", "v2")], blocked
    assert blocked[0][2] >= 2000 - 10_000 // 33  # Misra-Gries: under by at most n/(k+1)
    assert all(n >= BLOCKED_MIN for _, _, n in blocked)


def test_retiring_by_pattern_frees_the_slots_for_the_real_version() -> None:
    reg = GroupRegistry([MODEL])
    _offer(reg, ["v1"] + [f"junk-{i}" for i in range(30)], 0)
    _offer(reg, ["v2"] * 200, 0)
    assert reg.blocked() == [("fraud", "v2", 200)]
    retired = reg.retire(0, "junk-*")
    assert len(retired) == 19 and all(v.startswith("junk-") for v in retired)
    assert reg.blocked() == []
    codes = _offer(reg, ["v2"] * 5, 10)
    assert (codes >= 0).all()  # admitted now
    table = {v.version: v for v in reg.versions()}
    assert table["v1"].live and table["v2"].live and not table["junk-0"].live
    assert reg.retire(0, "nothing-*") == []


def test_rejections_older_than_an_hour_are_forgotten() -> None:
    reg = GroupRegistry([MODEL])
    _offer(reg, [f"v{i}" for i in range(20)], 0)
    _offer(reg, ["v99"] * 150, 0)
    assert reg.blocked() == [("fraud", "v99", 150)]
    reg.retire_idle(2 * HOUR)  # (also retires the idle versions, a separate matter)
    assert reg.blocked() == []


def _post(url: str, auth: tuple[str, str] | None, header: bool) -> int:
    req = urllib.request.Request(url, method="POST")
    if auth:
        token = base64.b64encode(":".join(auth).encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    if header:
        req.add_header("X-Monitor-Request", "versions")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.parametrize("with_auth", [False, True])
def test_actions_need_basic_auth_and_the_request_header(with_auth: bool) -> None:
    calls: list[str] = []

    def act(req: object) -> Response:
        calls.append("done")
        return Response(200, b"done\n")

    auth = ("ops", "s3cret-pw") if with_auth else None
    server = HttpServer(
        "127.0.0.1", 0, lambda _r: Response(200, b""), lambda: (True, []), dict, lambda: {},
        basic_auth=auth, actions={"/api/v1/versions/retire": act},
    )  # fmt: skip
    server.start()
    url = f"{server.url}/api/v1/versions/retire?model=fraud&pattern=x"
    try:
        if not with_auth:  # never open to anyone: no basic auth, no action
            assert _post(url, None, True) == 403
        else:
            assert _post(url, None, True) == 401
            assert _post(url, auth, False) == 403  # a cross-site form cannot add the header
            assert _post(url, auth, True) == 200
        assert _post(f"{server.url}/metrics", auth, True) == 405
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, timeout=5)  # GET: not an action
        assert err.value.code in (401, 405)
    finally:
        server.stop()
    assert calls == (["done"] if with_auth else [])
