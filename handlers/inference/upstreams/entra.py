"""Microsoft Entra ID tokens for an upstream that signs in with them (azure's `entra`): one credential per upstream,
its token kept and renewed as access_tokens.py keeps every upstream's.

azure-identity is an optional extra, imported only when an upstream asks for Entra ID."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any, Protocol

import httpx

from handlers.config import ConfigError
from handlers.inference.upstreams.access_tokens import AccessTokens

_EXTRA = "pip install 'specway[azure]'"


class TokenCredential(Protocol):
    """azure-identity's async credential (azure.core.credentials_async.AsyncTokenCredential), as far as it is used."""

    async def get_token(self, *scopes: str) -> Any:
        """An AccessToken: `token` and `expires_on` (seconds since the epoch)."""

    async def close(self) -> None: ...


def default_credential(where: str) -> TokenCredential:
    """azure-identity's DefaultAzureCredential (managed identity, workload identity, environment, Azure CLI ...);
    a ConfigError naming `where` when the package is not installed."""
    try:
        identity = importlib.import_module("azure.identity.aio")
    except ImportError:
        raise ConfigError(f"{where}: Microsoft Entra ID needs the azure-identity package: {_EXTRA}") from None
    credential: TokenCredential = identity.DefaultAzureCredential()
    return credential


class EntraTokens(AccessTokens):
    """Bearer tokens for `scope` from `credential`, renewed RENEW_BEFORE seconds before they expire. `clock` is
    time.time, replaced in tests."""

    issuer = "Microsoft Entra ID"

    def __init__(self, upstream: str, credential: TokenCredential, scope: str,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(upstream, clock)
        self.scope = scope
        self._credential = credential

    async def fetch(self) -> tuple[str, float]:
        got = await self._credential.get_token(self.scope)
        return str(got.token), float(got.expires_on)

    async def sign(self, request: httpx.Request) -> None:
        """An httpx request hook: the request carries the current token as its bearer."""
        request.headers["authorization"] = f"Bearer {await self.token()}"

    async def aclose(self) -> None:
        await self._credential.close()
