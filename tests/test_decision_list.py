"""GET /v1/route/decisions: explain's records, newest first, filtered and paged by cursor, scoped as explain is (and a
key without workspace:admin lists only its own requests). Its tenancy across workspaces is in tests/test_tenancy.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from generated import models
from tests.conftest import Live, serve
from tests.test_app import assert_error

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
PLAIN = ("inference", "explain:read")  # no workspace:admin: its own requests only


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with serve(None, tmp_path_factory.mktemp("decisions")) as g:
        yield g


def client(gw: Live, secret: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {secret or gw.key}"}, timeout=10)


def chat(gw: Live, secret: str, body: dict[str, Any] = CHAT) -> str:
    with client(gw, secret) as c:
        return c.post("/v1/chat/completions", json=body).headers["x-specway-decision-id"]


def key_id(gw: Live, secret: str) -> str:
    return str(gw.run(gw.gateway.store.key_by_secret(secret)).id)


def listed(c: httpx.Client, **params: Any) -> list[str]:
    r = c.get("/v1/route/decisions", params=params)
    assert r.status_code == 200, r.text
    return [d["id"] for d in models.DecisionList.model_validate(r.json()).model_dump()["data"]]


def test_newest_first_paged_to_the_end_by_cursor(gw: Live) -> None:
    secret = gw.create_key(workspace_id=gw.new_workspace("paged"))
    made = [chat(gw, secret) for _ in range(5)]
    seen, cursor, pages = [], None, 0
    with client(gw, secret) as c:
        while True:
            page = c.get("/v1/route/decisions", params={"limit": 2} | ({"cursor": cursor} if cursor else {})).json()
            seen += [d["id"] for d in page["data"]]
            pages += 1
            cursor = page["next_cursor"]
            assert page["has_more"] is (cursor is not None)
            if cursor is None:
                break
    assert seen == made[::-1] and pages == 3


def test_an_item_sums_up_the_record_explain_reads(gw: Live) -> None:
    secret = gw.create_key(workspace_id=gw.new_workspace("summed"))
    decision = chat(gw, secret)
    with client(gw, secret) as c:
        item = c.get("/v1/route/decisions").json()["data"][0]
        record = c.get(f"/v1/route/explain/{decision}").json()
    assert item == {
        "id": decision, "object": "route.decision", "created_at": record["created_at"], "key_id": record["key_id"],
        "workspace_id": record["workspace_id"], "format": "chat", "stream": False, "requested_model": None,
        "model": "specway/echo", "outcome": "ok", "status": 200, "attempts": 1,
        "latency_ms": record["attempts"][0]["latency_ms"], "input_tokens": record["usage"]["input_tokens"],
        "output_tokens": record["usage"]["output_tokens"], "cost": record["cost"],
        "config_revision": gw.gateway.revision,
    }
    assert record["config_revision"] == gw.gateway.revision and len(gw.gateway.revision) == 12


def test_filters_by_key_model_outcome_and_time(gw: Live) -> None:
    ws = gw.new_workspace("filtered")
    first, second = gw.create_key(workspace_id=ws), gw.create_key(workspace_id=ws)
    ok = chat(gw, first)
    refused = chat(gw, first, {**CHAT, "model": "no/such-model"})
    other = chat(gw, second)
    with client(gw, first) as c:
        second_id = key_id(gw, second)
        assert listed(c) == [other, refused, ok]
        assert listed(c, key_id=second_id) == [other]
        assert listed(c, model="specway/echo") == [other, ok]
        assert listed(c, model="no/such-model") == [refused]  # not answered: the model asked for, as usage counts it
        assert listed(c, outcome="error") == listed(c, outcome="model_not_found") == [refused]
        item = c.get("/v1/route/decisions", params={"outcome": "error"}).json()["data"][0]
        assert (item["model"], item["requested_model"], item["status"], item["attempts"]) == (
            None, "no/such-model", 404, 0)
        assert listed(c, outcome="ok", key_id=second_id) == [other]
        made = datetime.fromisoformat(c.get(f"/v1/route/explain/{refused}").json()["created_at"])
        assert listed(c, start=made.isoformat()) == [other, refused]
        assert listed(c, end=made.isoformat()) == [ok]
        assert listed(c, start=(made + timedelta(days=1)).isoformat()) == []
        assert listed(c, start=(made - timedelta(days=1)).replace(tzinfo=None).isoformat()) == [other, refused, ok]
        assert listed(c, end="0001-01-01T00:00:00+01:00") == []  # before the first instant there is


def test_a_key_without_workspace_admin_lists_only_its_own_requests(gw: Live) -> None:
    ws = gw.new_workspace("plain")
    admin, plain = gw.create_key(workspace_id=ws), gw.create_key(scopes=PLAIN, workspace_id=ws)
    mine, theirs = chat(gw, plain), chat(gw, admin)
    with client(gw, plain) as c:
        assert listed(c) == [mine]
        admin_id = key_id(gw, admin)
        assert c.get("/v1/route/decisions", params={"key_id": admin_id}).json() == c.get(
            "/v1/route/decisions", params={"key_id": "key_" + "0" * 16}).json() == {
            "object": "list", "data": [], "has_more": False, "next_cursor": None}
        assert c.get(f"/v1/route/explain/{theirs}").status_code == 200  # explain by id reads the workspace's, as ever
    with client(gw, admin) as c:
        assert listed(c) == [theirs, mine]


@pytest.mark.parametrize(("params", "param"), [
    ({"start": "yesterday"}, "start"),
    ({"end": "2025-13-01T00:00:00Z"}, "end"),
    # refused by the spec's schema (Connexion's message names the value and the rule, not the parameter)
    ({"cursor": "yesterday"}, None),
    ({"cursor": "1~"}, None),
    ({"limit": 0}, None),
    ({"limit": 101}, None),
])
def test_bad_parameters_are_refused(gw: Live, params: dict[str, Any], param: str | None) -> None:
    with client(gw) as c:
        error = assert_error(c.get("/v1/route/decisions", params=params), 400, "invalid_request")["error"]
    assert error["param"] == param and str(next(iter(params.values()))) in error["message"], error


def test_explain_read_is_needed(gw: Live) -> None:
    with client(gw, gw.create_key(scopes=("inference", "key:read", "workspace:admin"))) as c:
        r = c.get("/v1/route/decisions")
        assert "'explain:read'" in assert_error(r, 403, "insufficient_scope")["error"]["message"]


def test_a_cursor_in_the_future_or_past_lists_what_is_older(gw: Live) -> None:
    secret = gw.create_key(workspace_id=gw.new_workspace("cursors"))
    made = chat(gw, secret)
    future = int((datetime.now(UTC) + timedelta(days=1) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 10**6
    with client(gw, secret) as c:
        assert listed(c, cursor=f"{future}~x") == [made]
        assert listed(c, cursor="99999999999999999~x") == [made]  # the year 5138
        assert listed(c, cursor="0~x") == []
