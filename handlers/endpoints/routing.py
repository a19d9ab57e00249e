"""POST /v1/route/preview/{chat/completions,responses,messages,embeddings}: a request's plan, without sending it."""

from __future__ import annotations

from starlette.responses import Response

from generated import models
from handlers.administration.auth import Principal
from handlers.inference.formats import chat, messages, responses
from handlers.inference.formats import embeddings as embedding_wire
from handlers.serving import preview


async def preview_chat_completion(principal: Principal, body: models.ChatCompletionRequest) -> Response:
    return await preview.inference(principal, chat.parse(body))


async def preview_response(principal: Principal, body: models.ResponsesRequest) -> Response:
    return await preview.inference(principal, responses.parse(body))


async def preview_message(principal: Principal, body: models.MessagesRequest) -> Response:
    return await preview.inference(principal, messages.parse(body))


async def preview_embedding(principal: Principal, body: models.EmbeddingsRequest) -> Response:
    return await preview.embedding(principal, embedding_wire.parse(body))
