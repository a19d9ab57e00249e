"""Past `server.max_requests`, a worker refuses at once (503 overloaded, Retry-After) instead of queueing; the
operator's routes are never refused, and a request finishing makes room again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import serve
from tests.fake_upstream import FakeUpstream
from tests.test_operations import scrape

HANG = 15.0


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


def test_requests_over_the_bound_are_refused_at_once(fake: FakeUpstream, tmp_path: Path) -> None:
    fake.reset()
    config = {"server": {"max_requests": 2},
              "upstreams": {"up": {"kind": "openai", "base_url": fake.url}},
              "models": [{"id": "acme/m", "upstream": "up", "name": "m"}]}
    body = {"model": "acme/m", "messages": [{"role": "user", "content": "hi"}]}
    with serve(config, tmp_path) as live:
        gate = fake.hold()
        answers: list[int] = []

        def held() -> None:
            answers.append(httpx.post(f"{live.url}/v1/chat/completions", json=body, headers=live.headers,
                                      timeout=HANG).status_code)

        threads = [threading.Thread(target=held) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + HANG
        while len(fake.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            over = httpx.post(f"{live.url}/v1/chat/completions", json=body, headers=live.headers, timeout=HANG)
            assert over.status_code == 503 and over.headers["retry-after"] == "1", over.text
            assert over.json()["error"]["code"] == "overloaded"
            assert len(fake.requests) == 2  # never reached the upstream
            assert httpx.get(f"{live.url}/healthz", timeout=HANG).status_code == 200
            assert scrape(live.url, "specway_overloaded_total", limit="requests") == 1
        finally:
            gate.set()
            fake.release()
            for t in threads:
                t.join(HANG)
        assert answers == [200, 200]
        after = httpx.post(f"{live.url}/v1/chat/completions", json=body, headers=live.headers, timeout=HANG)
        assert after.status_code == 200, after.text
