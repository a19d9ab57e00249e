"""Google OAuth 2.0 access tokens for a vertex upstream, through google-auth: a service-account key file (its path in
the environment variable `credentials_env` names) or Application Default Credentials, with the cloud-platform scope,
kept and renewed as access_tokens.py keeps every upstream's.

google-auth is an optional extra (`specway[vertex]`), imported only when a vertex upstream is configured. Its
refresh is blocking I/O (a signed JWT assertion POSTed to the key's token_uri, or the metadata server): it runs in
a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import time
from collections.abc import Callable
from datetime import UTC
from typing import Any

from handlers.config import ConfigError
from handlers.inference.upstreams.access_tokens import RENEW_BEFORE, AccessTokens

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_EXTRA = "pip install 'specway[vertex]'"


def credentials(where: str, credentials_env: str | None) -> Any:
    """google-auth's credentials for a vertex upstream: the service-account key file the variable `credentials_env`
    names, else Application Default Credentials (looked up at the first request, not here: finding them may call
    the metadata server). A ConfigError naming `where` when google-auth is not installed or the file is unusable."""
    try:
        service_account = importlib.import_module("google.oauth2.service_account")
        importlib.import_module("google.auth.transport.requests")
    except ImportError:
        raise ConfigError(f"{where}: Vertex AI needs the google-auth package: {_EXTRA}") from None
    path = os.environ.get(credentials_env) if credentials_env else None
    if not path:
        return None  # Application Default Credentials, found when first needed
    try:
        return service_account.Credentials.from_service_account_file(path, scopes=[SCOPE])
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: the service-account file in ${credentials_env} cannot be used "
                          f"({type(exc).__name__})") from None


class GoogleTokens(AccessTokens):
    """Access tokens from `creds` (None: Application Default Credentials), renewed RENEW_BEFORE seconds before they
    expire."""

    issuer = "Google access"

    def __init__(self, upstream: str, creds: Any, clock: Callable[[], float] = time.time,
                 renew_before: float = RENEW_BEFORE) -> None:
        super().__init__(upstream, clock, renew_before)
        self._creds = creds

    async def fetch(self) -> tuple[str, float]:
        return await asyncio.to_thread(self._refresh)

    def _refresh(self) -> tuple[str, float]:
        """A new token and when it expires (seconds since the epoch), in a worker thread."""
        requests = importlib.import_module("google.auth.transport.requests")
        if self._creds is None:
            default = importlib.import_module("google.auth").default
            self._creds, _ = default(scopes=[SCOPE])
        self._creds.refresh(requests.Request())
        expiry = self._creds.expiry  # naive UTC, as google-auth keeps it; None: it did not say
        expires = expiry.replace(tzinfo=UTC).timestamp() if expiry is not None else self._clock() + 3600
        return str(self._creds.token), expires
