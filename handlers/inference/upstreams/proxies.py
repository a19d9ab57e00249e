"""The proxy an upstream's calls go through, from the environment, as curl, httpx and the providers' SDKs read it:
`https_proxy` or `http_proxy` by the upstream's scheme, else `all_proxy` (each in either case, the lower-case one
first), and none for a host `no_proxy` lists (`*` for every host). Read once per upstream, when its client is made (at
start and at each reload), never per call.

A proxy's credentials (`http://user:password@proxy:3128`) go as a `Proxy-Authorization` header, never as aiohttp's
`proxy_auth` (deprecated; gone in aiohttp 4): in the CONNECT of an https:// upstream's tunnel (the proxy's headers),
and on each request to an http:// upstream, which the proxy forwards (`proxy_headers_of`)."""

from __future__ import annotations

import base64
import urllib.parse
import urllib.request

import httpx

from handlers.config import ConfigError

_SCHEMES = ("http", "https")  # what the aiohttp transport can speak to a proxy


def environment_proxy(base_url: str, where: str) -> httpx.Proxy | None:
    """The proxy for calls to `base_url`, or None; a ConfigError naming `where` for a proxy that cannot be used."""
    parts = urllib.parse.urlsplit(base_url)
    proxies = urllib.request.getproxies_environment()
    found = proxies.get(parts.scheme) or proxies.get("all")
    if not found or urllib.request.proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    url = found if "://" in found else f"http://{found}"
    try:
        proxy: httpx.Proxy | None = httpx.Proxy(url)
    except (ValueError, httpx.InvalidURL):
        proxy = None
    if proxy is None or proxy.url.scheme not in _SCHEMES or not proxy.url.host:
        scheme = url.partition("://")[0]  # nothing more of it: a proxy's address may carry its credentials
        raise ConfigError(f"{where}: the environment names a {scheme}:// proxy for {parts.scheme} calls that cannot be "
                          "used; an upstream's proxy is http:// or https://, with a host")
    if proxy.auth is None:
        return proxy
    basic = base64.b64encode(":".join(proxy.auth).encode()).decode()
    return httpx.Proxy(proxy.url, headers={"Proxy-Authorization": f"Basic {basic}"})  # its url has no credentials


def proxy_headers_of(base_url: str, proxy: httpx.Proxy | None) -> httpx.Headers:
    """What each request to `base_url` carries for its proxy: the proxy's headers for an http:// upstream (aiohttp
    sends them only in an https:// upstream's CONNECT, which no request's own headers reach)."""
    if proxy is None or urllib.parse.urlsplit(base_url).scheme != "http":
        return httpx.Headers()
    return proxy.headers
