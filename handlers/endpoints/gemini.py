"""Google's Gemini API for its own clients (google-genai, Gemini CLI): generateContent, streamGenerateContent and
countTokens under /v1beta and /v1, and GET /v1beta/models(/{model}) listing what the key may use as Google's Model
objects. The path names the model: a catalog id or alias, or `specway` for the key's routing policy to choose.
Errors on these paths have Google's shape (handlers/edge/paths.py picks it by path)."""

from __future__ import annotations

from starlette.responses import Response

from generated import errors as codes
from generated import models
from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response
from handlers.errors import not_found
from handlers.inference.canonical import Request
from handlers.inference.catalog import Catalog, Model
from handlers.inference.formats import gemini
from handlers.inference.formats.common import present
from handlers.serving import count_tokens
from handlers.serving.relay import relay

_PAGE = 50  # models per page when the caller does not say


async def gemini_generate_content(principal: Principal, body: models.GeminiGenerateContentRequest, model: str
                                  ) -> Response:
    return await relay(principal, _routed(gemini.parse(body), model), gemini)


async def gemini_stream_generate_content(principal: Principal, body: models.GeminiGenerateContentRequest, model: str,
                                         alt: str) -> Response:
    req = _routed(gemini.parse(body), model)
    req.stream = True
    return await relay(principal, req, gemini)


async def gemini_count_tokens(principal: Principal, body: models.GeminiCountTokensRequest, model: str) -> Response:
    return await count_tokens.count(principal, _routed(gemini.parse_count(body), model), answer=gemini.count_body)


# /v1 (google-genai 3.x's default) serves the same actions.


async def gemini_generate_content_v1(principal: Principal, body: models.GeminiGenerateContentRequest, model: str
                                     ) -> Response:
    return await gemini_generate_content(principal, body, model)


async def gemini_stream_generate_content_v1(principal: Principal, body: models.GeminiGenerateContentRequest,
                                            model: str, alt: str) -> Response:
    return await gemini_stream_generate_content(principal, body, model, alt)


async def gemini_count_tokens_v1(principal: Principal, body: models.GeminiCountTokensRequest, model: str
                                 ) -> Response:
    return await gemini_count_tokens(principal, body, model)


def _routed(req: Request, model: str) -> Request:
    """The path's model as the request's: the placeholder (when no model or alias has its name) leaves the choice to
    the key's routing policy."""
    if not model:
        raise not_found("The path names no model: models/<a model id or alias>, or models/specway for the key's "
                        "routing policy to choose.", codes.MODEL_NOT_FOUND, "model")
    req.model = None if model == gemini.ROUTE and gateway.current().catalog.resolve(model) is None else model
    return req


async def gemini_list_models(principal: Principal, page_size: int | None = None, page_token: str | None = None
                             ) -> Response:
    usable = _usable(principal)
    names = [name for _, name in usable]
    start = names.index(page_token) if page_token in names else 0 if page_token is None else len(names)
    page = usable[start:start + (page_size or _PAGE)]
    after = start + len(page)
    listed = models.GeminiModelList(models=[_entry(m, name) for m, name in page],
                                    **present(nextPageToken=names[after] if after < len(names) else None))
    return json_response(listed.model_dump(exclude_none=True))


async def gemini_get_model(principal: Principal, model: str) -> Response:
    for found, name in _usable(principal):
        if name == model:
            return json_response(_entry(found, name).model_dump(exclude_none=True))
    raise not_found(f"No model or alias named {model!r} for this key.", codes.MODEL_NOT_FOUND)


def _usable(principal: Principal) -> list[tuple[Model, str]]:
    """Each model the key may use under each name it may use it by, in the catalog's order."""
    allow = principal.key.models
    return [(m, name) for m in gateway.current().catalog.models for name in Catalog.usable_names(m, allow)]


def _entry(model: Model, name: str) -> models.GeminiModel:
    """A model as Google's Model object: name models/<the name asked by>, its limits when known. (Every field the
    catalog cannot fill is left out: Google's own are optional.)"""
    return models.GeminiModel(
        name=f"models/{name}", baseModelId=model.id, displayName=model.display_name if name == model.id else name,
        supportedGenerationMethods=list(gemini.METHODS), thinking=model.reasoning,
        **present(description=None if name == model.id else f"An alias of {model.id}.",
                  inputTokenLimit=model.context_window, outputTokenLimit=model.max_output_tokens),
    )
