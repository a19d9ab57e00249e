"""Microsoft Entra ID tokens for an upstream that signs in with them (azure's `entra`): one credential per upstream,
its token kept until shortly before it expires, then renewed by one caller while the others wait for it.

azure-identity is an optional extra, imported only when an upstream asks for Entra ID. A token never reaches a log,
a metric or an error message: a failure names the credential's exception class only, since azure-identity's messages
can quote configuration."""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import httpx

from handlers.config import ConfigError
from handlers.inference.upstreams.base import UpstreamError

log = logging.getLogger(__name__)

RENEW_BEFORE = 300.0  # seconds before expiry a token is renewed: Azure rejects one that expires in flight
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


class EntraTokens:
    """Bearer tokens for `scope` from `credential`, renewed RENEW_BEFORE seconds before they expire. `clock` is
    time.time, replaced in tests."""

    def __init__(self, upstream: str, credential: TokenCredential, scope: str,
                 clock: Callable[[], float] = time.time) -> None:
        self.upstream = upstream
        self.scope = scope
        self._credential = credential
        self._clock = clock
        self._token: str | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        if self._token is not None and self._clock() < self._expires - RENEW_BEFORE:
            return self._token
        async with self._lock:  # one renewal at a time; those who waited find it done
            if self._token is None or self._clock() >= self._expires - RENEW_BEFORE:
                await self._renew()
            assert self._token is not None
            return self._token

    async def _renew(self) -> None:
        try:
            got = await self._credential.get_token(self.scope)
            token, expires = str(got.token), float(got.expires_on)
        except Exception as exc:  # noqa: BLE001 - any credential's failure: the request fails over
            if self._token is not None and self._clock() < self._expires:
                log.warning("upstream %s: renewing its Entra ID token failed (%s); the current one is still valid",
                            self.upstream, type(exc).__name__)
                return
            raise UpstreamError("status", f"upstream {self.upstream} could not get a Microsoft Entra ID token "
                                f"({type(exc).__name__})", status=401) from None
        self._token, self._expires = token, expires

    async def sign(self, request: httpx.Request) -> None:
        """An httpx request hook: the request carries the current token as its bearer."""
        request.headers["authorization"] = f"Bearer {await self.token()}"

    async def aclose(self) -> None:
        await self._credential.close()
