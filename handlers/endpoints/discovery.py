"""GET /v1/models, /v1/models/{id}, /v1/key, /v1/route/explain/{id} and /v1/route/decisions: what a key may use,
is, and caused."""

from __future__ import annotations

from datetime import datetime

from starlette.responses import Response

from generated import errors as codes
from generated import models
from generated.scopes import WORKSPACE_ADMIN
from handlers import gateway
from handlers.administration import accounts as admin
from handlers.administration import tenancy
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response, model_response
from handlers.errors import ApiError, not_found
from handlers.inference.catalog import SOURCED_FIELDS, Catalog, Model
from handlers.inference.formats import FORMATS
from handlers.observability import decisions
from handlers.observability.usage import parse_time
from handlers.store.base import DecisionQuery
from handlers.store.values import money_text

# An answer's id is its decision id after its format's prefix (chatcmpl-, msg_, resp_).
_DECISION_PREFIXES = tuple(fmt.VOCABULARY.id_prefix for fmt in FORMATS.values())


def _entry(model: Model, name: str, created: datetime) -> models.Model:
    return models.Model(
        id=name, object="model", created=int(created.timestamp()), owned_by=model.owned_by, type="model",
        display_name=model.display_name if name == model.id else name,
        created_at=created.isoformat().replace("+00:00", "Z"), alias_of=None if name == model.id else model.id,
        aliases=list(model.aliases), context_window=model.context_window, max_output_tokens=model.max_output_tokens,
        pricing=models.ModelPricing(input_per_million=str(model.price_in), output_per_million=str(model.price_out),
                                    cached_input_per_million=str(model.cached_input_price),
                                    cache_write_per_million=str(model.cache_write_price)),
        capabilities=models.ModelCapabilities(reasoning=model.reasoning, vision=model.vision,
                                              tool_calling=model.tool_calling,
                                              structured_output=model.structured_output),
        sources=models.ModelSources(**model.sources_of(SOURCED_FIELDS)),
    )


def _usable(principal: Principal) -> list[tuple[Model, str]]:
    """Each model the key may use under each name it may use it by, in the catalog's order."""
    allow = principal.key.models
    return [(m, name) for m in gateway.current().catalog.models for name in Catalog.usable_names(m, allow)]


async def list_models(principal: Principal, after_id: str | None = None, before_id: str | None = None,
                      limit: int | None = None) -> Response:
    usable = _usable(principal)
    ids = [name for _, name in usable]
    start, end = 0, len(usable)
    if after_id is not None:
        start = ids.index(after_id) + 1 if after_id in ids else len(usable)
    if before_id is not None:
        end = ids.index(before_id) if before_id in ids else 0
    page = usable[start:end]
    size = limit or 1000
    has_more = len(page) > size
    page = page[-size:] if before_id is not None and after_id is None else page[:size]
    created = gateway.current().started_at
    return model_response(models.ModelList(
        object="list", data=[_entry(m, name, created) for m, name in page], has_more=has_more,
        first_id=page[0][1] if page else None, last_id=page[-1][1] if page else None,
    ))


async def get_model(principal: Principal, model_id: str) -> Response:
    for model, name in _usable(principal):
        if name == model_id:
            return model_response(_entry(model, name, gateway.current().started_at))
    raise not_found(f"No model or alias named {model_id!r} for this key.", codes.MODEL_NOT_FOUND)


async def get_key(principal: Principal) -> Response:
    gw = gateway.current()
    await gw.ledger.write_now()
    key = await gw.store.get_key(principal.key.id) or principal.key
    ws = await gw.store.get_workspace(key.workspace_id)
    if ws is None:
        raise ApiError(codes.INVALID_API_KEY, "The relay key's workspace no longer exists.")
    summary = {"id": ws.id, "name": ws.name, "credit": money_text(ws.credit), "reserved": money_text(ws.reserved)}
    # Not a models.KeyInfo: the answer has always carried workspace_id and revoked_at too, which KeyInfo does not
    # declare (a model would drop them).
    shown = admin.key_out(key).model_dump()
    secret = "previous" if principal.key.by_previous_secret else "current"
    return json_response({**shown, "workspace": summary, "policy": key.policy or gw.config.default_policy,
                          "secret": secret})


async def explain_decision(principal: Principal, decision_id: str) -> Response:
    for prefix in _DECISION_PREFIXES:
        if decision_id.startswith(prefix):
            decision_id = decision_id[len(prefix):]
            break
    record = await gateway.current().recorder.get(decision_id)
    # Another workspace's decision is answered exactly like an unknown one: ids are not an oracle.
    if record is None or record.get("workspace_id") != principal.workspace_id:
        raise not_found(f"No decision {decision_id!r} for this key's workspace.", codes.DECISION_NOT_FOUND)
    return json_response(record)


async def list_decisions(principal: Principal, key_id: str | None = None, model: str | None = None,
                         outcome: str | None = None, start: str | None = None, end: str | None = None,
                         limit: int | None = None, cursor: str | None = None) -> Response:
    """Explain's records, newest first: the caller's workspace's; without workspace:admin (or admin), its own."""
    if not tenancy.holds(principal.key.scopes, WORKSPACE_ADMIN):
        if key_id not in (None, principal.key.id):  # another key is answered like an unknown one
            return model_response(models.DecisionList(object="list", data=[], has_more=False, next_cursor=None))
        key_id = principal.key.id
    size = limit or 50
    query = DecisionQuery(workspace_id=principal.workspace_id, key_id=key_id, model=model, outcome=outcome,
                          start=parse_time("start", start), end=parse_time("end", end),
                          before=None if cursor is None else decisions.read_cursor(cursor), limit=size + 1)
    gw = gateway.current()
    await gw.write()  # what this process answered so far is listed too
    found = await gw.store.list_decisions(query)
    page = found[:size]
    more = len(found) > size
    return model_response(models.DecisionList(
        object="list", data=[decisions.summary(r) for r in page], has_more=more,
        next_cursor=decisions.cursor_after(page[-1]) if more else None))
