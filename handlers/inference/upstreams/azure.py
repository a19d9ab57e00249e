"""Azure OpenAI: OpenAI's Chat Completions or Responses on Azure's paths, with its key header or Entra ID tokens.

Azure answers in OpenAI's wire shapes (with its content-filter annotations, prompt_filter_results and
content_filter_results, which the readers pass over), so the kind is the openai kind's transport and formats with
Azure's paths, credentials and content-filter refusals."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import orjson

from generated.config import UpstreamSettings
from handlers.inference.formats.base import UpstreamOptions
from handlers.inference.upstreams.base import UpstreamError
from handlers.inference.upstreams.entra import EntraTokens, TokenCredential, default_credential
from handlers.inference.upstreams.failures import ERROR_TYPE_STATUS, error_detail, scrub, status_error
from handlers.inference.upstreams.openai import OpenAIUpstream

_SUFFIXES = ("/openai/v1", "/openai")  # what a base_url copied from Azure's portal or an SDK example may end with


def resource_endpoint(base_url: str) -> str:
    """The resource's endpoint (https://RESOURCE.openai.azure.com), whichever of its usual forms was configured."""
    url = base_url.rstrip("/")
    for suffix in _SUFFIXES:
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url


class AzureUpstream(OpenAIUpstream):
    """Azure OpenAI through Chat Completions (AzureResponsesUpstream: through Responses); `model` is the deployment.

    `api_version` None calls the v1 API (/openai/v1/...); set, the dated API (/openai/deployments/NAME/...?
    api-version=). `entra` signs each request with an Entra ID token instead of the `api-key`. Otherwise takes
    HttpUpstream's arguments: (name, *, base_url, api_key=None, headers=None, timeouts=Timeouts(), sizes=Sizes(),
    pool=Pool(), options=UpstreamOptions(), transport=None)."""

    kind = "azure"
    system = "azure.ai.openai"  # OpenTelemetry's gen_ai.system for Azure OpenAI
    embeds = True
    speaks = "chat"
    operation = "chat/completions"
    path = "/openai/v1/chat/completions"  # without api_version; path_for gives every path
    deployment_path = True  # the dated API names the deployment in the path (Responses: in the body)
    # Azure's error code for a refused prompt, when it arrives as an error event of a stream
    error_statuses: Mapping[str, int] = {**ERROR_TYPE_STATUS, "content_filter": 400}

    def __init__(self, name: str, *, base_url: str, api_version: str | None = None,
                 entra: EntraTokens | None = None, **transport: Any) -> None:
        self.api_version = api_version
        super().__init__(name, base_url=resource_endpoint(base_url), **transport)
        self._entra = entra
        if entra is not None:
            self.on_request(entra.sign)

    @classmethod
    def from_settings(cls, name: str, settings: UpstreamSettings) -> AzureUpstream:
        azure = settings.azure
        kind = AzureResponsesUpstream if azure.api == "responses" else AzureUpstream
        # handlers/config.py has checked that it signs in with a key or with Entra ID, one of them
        entra = None
        if azure.entra:
            entra = EntraTokens(name, entra_credential(f"upstreams.{name}.azure.entra"), azure.entra_scope)
        return kind(name, **cls.transport_args(name, settings), options=UpstreamOptions.of(settings),
                    api_version=azure.api_version, entra=entra)

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"api-key": api_key}

    def path_for(self, model: str, stream: bool) -> str:
        return self._path(self.operation, model, self.deployment_path)

    def embeddings_path(self, model: str) -> str:
        return self._path("embeddings", model, True)

    def _path(self, operation: str, model: str, by_deployment: bool) -> str:
        if self.api_version is None:
            return f"/openai/v1/{operation}"
        query = urlencode({"api-version": self.api_version})
        if by_deployment:
            return f"/openai/deployments/{quote(model, safe='')}/{operation}?{query}"
        return f"/openai/{operation}?{query}"

    def _status_error(self, response: httpx.Response, body: bytes) -> UpstreamError:
        refused = content_filter_refusal(self.name, response.status_code, body, self._secret)
        return refused or status_error(self.name, response.status_code, response.headers, body, self._secret)

    async def aclose(self) -> None:
        await super().aclose()
        if self._entra is not None:
            await self._entra.aclose()


class AzureResponsesUpstream(AzureUpstream):
    """Azure OpenAI through the Responses API. Every body carries store false, as for the responses kind."""

    speaks = "responses"
    operation = "responses"
    path = "/openai/v1/responses"
    deployment_path = False


def entra_credential(where: str) -> TokenCredential:
    """The credential Entra ID tokens come from (a seam for tests, which have no Azure to sign in to)."""
    return default_credential(where)


def content_filter_refusal(name: str, status: int, body: bytes, secret: str | None) -> UpstreamError | None:
    """Azure's content filter refusing a prompt (400 `content_filter`) as an UpstreamError that says so and names
    the categories that were filtered; None for any other answer."""
    error = _error_object(body)
    if status != 400 or error is None or error.get("code") != "content_filter":
        return None
    inner = error.get("innererror")
    results = inner.get("content_filter_result") if isinstance(inner, dict) else None
    found = results.items() if isinstance(results, dict) else ()
    categories = [f"{category} ({result.get('severity') or 'detected'})" for category, result in found
                  if isinstance(result, dict) and result.get("filtered")]
    which = f" for {', '.join(categories)}" if categories else ""
    detail = error_detail(body)
    message = f"Azure's content filter refused the prompt{which} (upstream {name})" + (f": {detail}" if detail else "")
    return UpstreamError("status", scrub(message, secret), status=400)


def _error_object(body: bytes) -> dict[str, Any] | None:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    error = payload.get("error") if isinstance(payload, dict) else None
    return error if isinstance(error, dict) else None
