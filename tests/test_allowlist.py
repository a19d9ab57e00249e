"""A key's model allowlist: GET /v1/models lists exactly the names a request may use (200), no others (403)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Live, serve

CONFIG = {
    "upstreams": {"echo": {"kind": "echo"}},
    "models": [
        {"id": "acme/fast", "upstream": "echo", "name": "fast", "aliases": ["fast", "quick"]},
        {"id": "acme/strong", "upstream": "echo", "name": "strong", "aliases": ["strong"]},
        {"id": "acme/plain", "upstream": "echo", "name": "plain"},
    ],
}
FAST = {"acme/fast", "fast", "quick"}
STRONG = {"acme/strong", "strong"}
NAMES = FAST | STRONG | {"acme/plain"}
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with serve(CONFIG, tmp_path_factory.mktemp("allowlist")) as g:
        yield g


def listed(c: httpx.Client) -> set[str]:
    body = c.get("/v1/models").json()
    assert body["has_more"] is False
    return {m["id"] for m in body["data"]}


def accepted(c: httpx.Client) -> set[str]:
    ok = set()
    for name in NAMES:
        r = c.post("/v1/chat/completions", json={"messages": USER, "model": name})
        assert r.status_code in (200, 403), r.text
        if r.status_code == 200:
            ok.add(name)
        else:
            assert r.json()["error"]["code"] == "model_not_allowed"
    return ok


@pytest.mark.parametrize(("allowlist", "expected"), [
    (None, NAMES),
    (("acme/fast",), FAST),
    (("fast",), FAST),
    (("quick",), FAST),  # naming one alias admits the model under its id and every alias
    (("strong", "acme/plain"), STRONG | {"acme/plain"}),
    (("acme/plain",), {"acme/plain"}),
])
def test_models_listed_are_the_models_accepted(gw: Live, allowlist: tuple[str, ...] | None,
                                               expected: set[str]) -> None:
    secret = gw.create_key(models=allowlist)
    with httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {secret}"}, timeout=10) as c:
        names = listed(c)
        assert names == accepted(c) == expected
        for name in NAMES:
            assert c.get(f"/v1/models/{name}").status_code == (200 if name in names else 404)
