"""Serving /console: GET /console/assets/<file> answers that file; every other GET under /console answers
index.html, whose script reads the path (the console's pages are its own routes). Files are read once, at startup.

The policy allows this origin's script, style, images and API calls and nothing else: no inline script or style,
no other origin, no form submission, no framing."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from starlette.types import Receive, Scope, Send

from generated import errors as codes
from handlers.errors import ApiError

PREFIX = "/console"
ASSETS = Path(__file__).with_name("assets")
_PAGE = "index.html"
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-cache"),  # revalidated each time (an ETag answers 304): a new version shows at once
)


def is_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


@dataclass(frozen=True, slots=True)
class _File:
    body: bytes
    type: bytes
    etag: bytes


def _load(folder: Path) -> dict[str, _File]:
    files = {}
    for path in sorted(folder.iterdir()):
        if path.suffix in _TYPES:
            body = path.read_bytes()
            etag = f'"{hashlib.sha256(body).hexdigest()[:20]}"'.encode()
            files[path.name] = _File(body, _TYPES[path.suffix].encode(), etag)
    if _PAGE not in files:
        raise RuntimeError(f"the console's {_PAGE} is missing from {folder}")
    return files


class Console:
    """ASGI app for the paths is_console() names."""

    def __init__(self, folder: Path = ASSETS) -> None:
        self.files = _load(folder)

    def _find(self, path: str) -> _File | None:
        if path.startswith(f"{PREFIX}/assets/"):
            return self.files.get(path[len(PREFIX) + len("/assets/"):])
        return self.files[_PAGE]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            raise ApiError(codes.METHOD_NOT_ALLOWED, "The console answers GET only.", headers={"Allow": "GET, HEAD"})
        found = self._find(scope["path"])
        if found is None:
            raise ApiError(codes.NOT_FOUND, "No such console file.")
        fresh = any(name == b"if-none-match" and found.etag in value for name, value in scope["headers"])
        headers = [*_HEADERS, (b"etag", found.etag), (b"content-type", found.type)]
        if not fresh:
            headers.append((b"content-length", str(len(found.body)).encode()))
        await send({"type": "http.response.start", "status": 304 if fresh else 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if fresh or scope["method"] == "HEAD" else found.body})
