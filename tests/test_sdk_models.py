"""SDK conformance, the model catalog and the caller's key: models listed and retrieved by both SDKs, Anthropic's
x-api-key style, and a missing or invalid key (fixtures and drivers in tests/sdk_support.py)."""

from __future__ import annotations

import itertools

import pytest

from tests.conftest import Live
from tests.fake_upstream import FakeUpstream
from tests.sdk_support import (
    CATALOG,
    FORMATS,
    SDK,
    TEXT,
    USAGE,
    Clients,
    call,
    check_answer,
    error_of,
    fixture_clients,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_fresh,  # noqa: F401  (a fixture)
    fixture_live,  # noqa: F401  (a fixture)
    make_clients,
    request_args,
    run,
)

# --- models -----------------------------------------------------------------------------------------------------------


def test_openai_models_list_and_retrieve(clients: Clients) -> None:
    models = list(clients.openai.models.list())  # iterates every page to the end
    assert [m.id for m in models] == CATALOG
    assert all(m.object == "model" and m.owned_by and m.created > 0 for m in models)
    one = clients.openai.models.retrieve("acme/oa")
    assert (one.id, one.object) == ("acme/oa", "model")


@pytest.mark.parametrize("x_api_key", [False, True], ids=["bearer", "x-api-key"])
def test_anthropic_models_list_and_retrieve(live: Live, x_api_key: bool) -> None:
    c = make_clients(live, live.key, x_api_key=x_api_key)
    page = c.anthropic.models.list()
    assert page.has_more is False
    models = []
    for m in page:  # auto-pagination: must stop, has_more is false
        models.append(m)
        assert len(models) <= len(CATALOG), "the SDK kept paging"
    assert [m.id for m in models] == CATALOG
    paged = [m.id for m in itertools.islice(c.anthropic.models.list(limit=1), 10)]
    assert paged == CATALOG, "paging by after_id reaches every model, then stops"
    assert all(m.type == "model" and m.display_name and m.created_at for m in models)
    assert models[1].display_name == "Acme Claude"
    assert c.anthropic.models.retrieve("acme/an").display_name == "Acme Claude"


# --- the caller's key -------------------------------------------------------------------------------------------------


def test_anthropic_x_api_key_style(live: Live, fake: FakeUpstream) -> None:
    c = make_clients(live, live.key, x_api_key=True)
    for mode in ("create", "stream", "helper"):
        fake.script(text=TEXT, usage=USAGE)
        o = run(c, "messages", mode, request_args("messages", "acme/an"))
        check_answer(o, "messages", "anthropic")
        sent = c.seen.last.request.headers
        assert sent["x-api-key"] == live.key and "authorization" not in sent


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_key_is_authentication_error(live: Live, fake: FakeUpstream, fmt: str) -> None:
    c = make_clients(live, live.key)
    omit = {"Authorization": SDK[fmt].omit}
    with pytest.raises(SDK[fmt].AuthenticationError) as e:
        call(c, fmt, "acme/oa", extra_headers=omit)
    assert e.value.status_code == 401
    assert error_of(e.value)["code"] == "invalid_api_key"
    assert "No relay key" in error_of(e.value)["message"]
    assert "authorization" not in c.seen.last.request.headers
    assert fake.requests == []


@pytest.mark.parametrize(("fmt", "x_api_key"), [
    ("chat", False), ("responses", False), ("messages", False), pytest.param("messages", True, id="messages-x-api-key"),
])
def test_invalid_key_is_authentication_error(live: Live, fake: FakeUpstream, fmt: str, x_api_key: bool) -> None:
    bad = "sk-sw-not-a-real-key-0000"
    c = make_clients(live, bad, x_api_key=x_api_key)
    with pytest.raises(SDK[fmt].AuthenticationError) as e:
        call(c, fmt, "acme/oa")
    assert error_of(e.value)["code"] == "invalid_api_key"
    assert "not valid" in error_of(e.value)["message"]
    assert bad not in e.value.response.text
    assert fake.requests == []
