"""POST /v1/embeddings: OpenAI's embeddings, routed, metered and recorded like inference."""

from __future__ import annotations

from starlette.responses import Response

from generated import models
from handlers.administration.auth import Principal
from handlers.inference.formats import embeddings as wire
from handlers.serving import embeddings


async def create_embedding(principal: Principal, body: models.EmbeddingsRequest,
                           x_specway_max_cost: str | None = None) -> Response:
    return await embeddings.embed(principal, wire.parse(body), x_specway_max_cost)
