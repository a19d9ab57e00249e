"""POST /v1/route/preview/{chat/completions,responses,messages,embeddings}: a request's plan, without sending it;
GET /v1/route/deployments: the deployments behind the catalog, with their health."""

from __future__ import annotations

from starlette.responses import Response

from generated import models
from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import model_response
from handlers.inference.catalog import Catalog, Model
from handlers.inference.cooldown import Cooling, deployment_key, upstream_key
from handlers.inference.formats import chat, messages, responses
from handlers.inference.formats import embeddings as embedding_wire
from handlers.metering import quotas
from handlers.serving import preview


async def preview_chat_completion(principal: Principal, body: models.ChatCompletionRequest,
                                  x_specway_session: str | None = None, x_specway_max_cost: str | None = None
                                  ) -> Response:
    return await preview.inference(principal, chat.parse(body), x_specway_session, x_specway_max_cost)


async def preview_response(principal: Principal, body: models.ResponsesRequest, x_specway_session: str | None = None,
                           x_specway_max_cost: str | None = None) -> Response:
    return await preview.inference(principal, responses.parse(body), x_specway_session, x_specway_max_cost)


async def preview_message(principal: Principal, body: models.MessagesRequest, x_specway_session: str | None = None,
                          x_specway_max_cost: str | None = None) -> Response:
    return await preview.inference(principal, messages.parse(body), x_specway_session, x_specway_max_cost)


async def preview_embedding(principal: Principal, body: models.EmbeddingsRequest,
                            x_specway_max_cost: str | None = None) -> Response:
    return await preview.embedding(principal, embedding_wire.parse(body), x_specway_max_cost)


async def list_deployments(principal: Principal) -> Response:
    gw = gateway.current()
    served: dict[str, tuple[Model, list[str]]] = {}  # by deployment, those of models the key may use
    for model in gw.catalog.models:
        if Catalog.usable_names(model, principal.key.models):
            for d in gw.catalog.deployments(model):
                served.setdefault(d.deployment, (d, []))[1].append(model.id)
    cd = gw.cooldowns
    await cd.refresh(key for d, _ in served.values() for key in (upstream_key(d.upstream), deployment_key(d.deployment)))
    data = []
    for d, ids in served.values():
        blocked = cd.blocking(d.upstream, d.deployment)
        if blocked is None and (d.rpm or d.tpm) and (over := await quotas.over(gw.limiter, d, 1)) is not None:
            blocked = over[0], cd.waiting(over[1], over[0])
        data.append(_status(gw, d, ids, blocked))
    return model_response(models.DeploymentList(object="list", data=data))


def _status(gw: gateway.Gateway, d: Model, ids: list[str], blocked: tuple[str, Cooling] | None
            ) -> models.DeploymentStatus:
    latency = gw.deployments.latency(d.deployment, fresh=False)
    return models.DeploymentStatus(
        id=d.deployment, object="route.deployment", upstream=d.upstream, model=d.name, catalog_ids=ids,
        state="healthy" if blocked is None else blocked[1].state,
        cooldown_until=None if blocked is None else blocked[1].until_text(),
        reason=None if blocked is None else blocked[0], in_flight=gw.deployments.in_flight(d.deployment),
        latency_ms=None if latency is None else round(latency * 1000, 3), weight=d.weight, rpm=d.rpm, tpm=d.tpm)
