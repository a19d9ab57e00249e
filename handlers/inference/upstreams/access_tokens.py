"""Bearer tokens an upstream signs in with (Microsoft Entra ID's, Google's): one per upstream, kept until shortly
before it expires, then renewed by one caller while the others wait for it. A token never reaches a log, a metric or
an error message: a failure names the exception's class only, since the libraries' messages can quote configuration
or a token endpoint's answer."""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections.abc import Callable

from handlers.inference.upstreams.base import UpstreamError

log = logging.getLogger(__name__)

RENEW_BEFORE = 300.0  # seconds before expiry a token is renewed, so that none expires in flight


class AccessTokens(abc.ABC):
    """The current token of `upstream`, renewed `renew_before` seconds before it expires. `clock` is time.time,
    replaced in tests; `issuer` names whose tokens they are, in messages."""

    issuer: str

    def __init__(self, upstream: str, clock: Callable[[], float] = time.time,
                 renew_before: float = RENEW_BEFORE) -> None:
        self.upstream = upstream
        self._clock = clock
        self._renew_before = renew_before
        self._token: str | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    @abc.abstractmethod
    async def fetch(self) -> tuple[str, float]:
        """A new token and when it expires (seconds since the epoch)."""

    async def token(self) -> str:
        if self._token is not None and self._clock() < self._expires - self._renew_before:
            return self._token
        async with self._lock:  # one renewal at a time; those who waited find it done
            if self._token is None or self._clock() >= self._expires - self._renew_before:
                await self._renew()
            assert self._token is not None
            return self._token

    async def _renew(self) -> None:
        try:
            token, expires = await self.fetch()
        except Exception as exc:  # noqa: BLE001 - any credential's failure: the request fails over
            if self._token is not None and self._clock() < self._expires:
                log.warning("upstream %s: renewing its %s token failed (%s); the current one is still valid",
                            self.upstream, self.issuer, type(exc).__name__)
                return
            raise UpstreamError("status", f"upstream {self.upstream} could not get a {self.issuer} token "
                                f"({type(exc).__name__})", status=401) from None
        self._token, self._expires = token, expires
