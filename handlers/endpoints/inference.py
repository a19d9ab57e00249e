"""POST /v1/chat/completions, /v1/responses, /v1/messages: parse the caller's format, relay, answer in it."""

from __future__ import annotations

from starlette.responses import Response

from generated import models
from handlers.administration.auth import Principal
from handlers.inference.formats import chat, messages, responses
from handlers.inference.relay import relay


async def create_chat_completion(principal: Principal, body: models.ChatCompletionRequest) -> Response:
    return await relay(principal, chat.parse(body), chat)


async def create_response(principal: Principal, body: models.ResponsesRequest) -> Response:
    return await relay(principal, responses.parse(body), responses)


async def create_message(principal: Principal, body: models.MessagesRequest) -> Response:
    return await relay(principal, messages.parse(body), messages)
