"""POST /v1/chat/completions, /v1/responses, /v1/messages: parse the caller's format, relay, answer in it."""

from __future__ import annotations

from starlette.responses import Response

from generated import models
from handlers.administration.auth import Principal
from handlers.inference.formats import chat, messages, responses
from handlers.serving import count_tokens
from handlers.serving.relay import relay


async def create_chat_completion(principal: Principal, body: models.ChatCompletionRequest,
                                 x_specway_session: str | None = None, x_specway_max_cost: str | None = None
                                 ) -> Response:
    return await relay(principal, chat.parse(body), chat, x_specway_session, x_specway_max_cost)


async def create_response(principal: Principal, body: models.ResponsesRequest, x_specway_session: str | None = None,
                          x_specway_max_cost: str | None = None) -> Response:
    return await relay(principal, responses.parse(body), responses, x_specway_session, x_specway_max_cost)


async def create_message(principal: Principal, body: models.MessagesRequest, x_specway_session: str | None = None,
                         x_specway_max_cost: str | None = None, anthropic_beta: str | None = None,
                         anthropic_version: str | None = None) -> Response:
    req = messages.parse(body)
    # Anthropic's own headers reach an anthropic upstream with the body they belong to; no other kind reads them.
    req.headers = {name: value for name, value in (("anthropic-beta", anthropic_beta),
                                                   ("anthropic-version", anthropic_version)) if value}
    return await relay(principal, req, messages, x_specway_session, x_specway_max_cost)


async def count_message_tokens(principal: Principal, body: models.MessagesRequest,
                               x_specway_session: str | None = None, anthropic_beta: str | None = None,
                               anthropic_version: str | None = None) -> Response:
    req = messages.parse(body)
    req.headers = {name: value for name, value in (("anthropic-beta", anthropic_beta),
                                                   ("anthropic-version", anthropic_version)) if value}
    return await count_tokens.count(principal, req, x_specway_session)
