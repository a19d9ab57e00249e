"""Upstream calls through the proxy the environment names (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY), as the
providers' SDKs make them: the fake upstream stands in as the proxy, and the upstream's host does not resolve, so only
a call that went through the proxy can be answered."""

from __future__ import annotations

import asyncio
import base64

import pytest

from handlers.config import ConfigError
from handlers.inference.upstreams import UpstreamError
from handlers.inference.upstreams.proxies import environment_proxy
from tests.fake_upstream import FakeUpstream
from tests.upstream_support import (
    Build,
    answer,
    fixture_build,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_server,  # noqa: F401  (a fixture)
)

_NAMES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
UNRESOLVABLE = "http://upstream.invalid/v1"  # .invalid never resolves (RFC 6761)


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


_PROXY_AUTH_DEPRECATED = "error:The 'proxy_auth' parameter is deprecated:DeprecationWarning"  # aiohttp 4 drops it


@pytest.mark.filterwarnings(_PROXY_AUTH_DEPRECATED)
@pytest.mark.parametrize("streaming", [False, True])
async def test_calls_go_through_the_proxy_with_its_credentials(fake: FakeUpstream, build: Build, streaming: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://team:s3cret@127.0.0.1:{fake.port}")
    result = await answer(build("openai", base_url=UNRESOLVABLE), streaming)
    assert result.text() == "Hello from fake"
    sent = fake.requests[-1]
    assert sent.headers["host"] == "upstream.invalid"
    assert sent.headers["proxy-authorization"] == "Basic " + base64.b64encode(b"team:s3cret").decode()
    assert sent.path == "/v1/chat/completions"


@pytest.mark.filterwarnings(_PROXY_AUTH_DEPRECATED)
async def test_an_https_upstream_s_tunnel_is_asked_for_with_the_proxy_s_credentials(
        build: Build, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CONNECT carries Proxy-Authorization; nothing meant for the proxy is in the upstream's own headers, which
    go through the tunnel to the upstream."""
    asked: list[bytes] = []

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    proxy = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    monkeypatch.setenv("HTTPS_PROXY", f"http://team:s3cret@127.0.0.1:{port}")
    try:
        upstream = build("openai", base_url="https://upstream.invalid/v1")
        assert not any(name.lower().startswith("proxy-") for name in upstream._client.headers)
        with pytest.raises(UpstreamError):
            await answer(upstream, streaming=False)
    finally:
        proxy.close()
        await proxy.wait_closed()
    head = asked[0].decode("latin-1").lower()
    assert head.startswith("connect upstream.invalid:443 http/1.1\r\n")
    assert "proxy-authorization: basic " + base64.b64encode(b"team:s3cret").decode().lower() in head


async def test_a_host_no_proxy_lists_is_called_directly(fake: FakeUpstream, build: Build,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(UpstreamError) as failed:
        await answer(build("openai"), streaming=False)
    assert failed.value.kind == "connect"
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert (await answer(build("openai"), streaming=False)).text() == "Hello from fake"
    assert "proxy-authorization" not in fake.requests[-1].headers


@pytest.mark.parametrize(("env", "url", "expected"), [
    ({"HTTPS_PROXY": "http://egress:3128"}, "https://api.openai.com/v1", "http://egress:3128"),
    ({"HTTPS_PROXY": "http://egress:3128"}, "http://10.0.0.5:8000/v1", None),  # by the upstream's scheme
    ({"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"}, "https://a.example/v1", "http://lower:1"),
    ({"ALL_PROXY": "egress:3128"}, "http://10.0.0.5:8000/v1", "http://egress:3128"),
    ({"HTTPS_PROXY": "http://egress:3128", "NO_PROXY": ".example.com"}, "https://api.example.com/v1", None),
    ({"HTTPS_PROXY": "http://egress:3128", "NO_PROXY": "*"}, "https://api.openai.com/v1", None),
    ({}, "https://api.openai.com/v1", None),
])
def test_which_proxy_an_upstream_uses(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], url: str,
                                      expected: str | None) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    proxy = environment_proxy(url, "upstreams.x")
    assert (None if proxy is None else str(proxy.url)) == expected


def test_a_proxy_the_transport_cannot_speak_stops_the_start_without_its_credentials(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "socks5://team:s3cret@egress:1080")
    with pytest.raises(ConfigError) as refused:
        environment_proxy("https://api.openai.com/v1", "upstreams.openai")
    assert "upstreams.openai" in str(refused.value) and "socks5://" in str(refused.value)
    assert "s3cret" not in str(refused.value) and "team" not in str(refused.value)
