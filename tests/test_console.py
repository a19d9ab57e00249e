"""The operator console at /console, in a real browser: Playwright drives Debian's Chromium (/usr/bin/chromium,
installed by .ci/run) against a live gateway whose model is served by the fake upstream, and real OpenAI SDK calls
make the traffic. The same flows run for the operator and for a workspace:admin of another workspace, who must see
nothing of the first. Every page is listened to: a console error, an uncaught exception, a CSP violation
(`securitypolicyviolation`) or a request to another origin fails the test. Each page is saved as a screenshot at 1280
and 390 px wide into tests/screenshots/ (git-ignored)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from handlers.console.serve import CSP
from tests.conftest import Live, serve, unavailable
from tests.fake_upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[1]
SHOTS = Path(__file__).with_name("screenshots")
CHROMIUM = Path("/usr/bin/chromium")
WIDTHS = (1280, 390)
MODEL = "acme/chat"
ADMIN_SCOPES = ("inference", "models:read", "key:read", "explain:read", "workspace:admin")
# Logged into every page before its own scripts: the browser's report of a blocked load or script, as a console error.
WATCH_CSP = ("document.addEventListener('securitypolicyviolation', (e) => console.error("
             "'CSP violation: ' + e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline')));")

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # the dev extra pins it; without it every test here says so
    sync_playwright = None  # type: ignore[assignment]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if sync_playwright is None:
        unavailable("playwright is not installed (the dev extra pins it)")
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing (apt-get install chromium; .ci/run does)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def gw(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    config = {
        "upstreams": {"fake": {"kind": "openai", "base_url": fake.url}},
        "models": [{"id": MODEL, "upstream": "fake", "name": "fake-chat", "aliases": ["chat"],
                    "max_output_tokens": 1000, "price": {"input": "0.5", "output": "1.5"}}],
    }
    with serve(config, tmp_path_factory.mktemp("console")) as g:
        g.run(g.gateway.store.add_credit(g.workspace_id, Decimal(100)))
        yield g


def sdk(gw: Live, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=secret, max_retries=0)


def chat(gw: Live, secret: str) -> str:
    """One chat through the OpenAI SDK; its decision id."""
    raw = sdk(gw, secret).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=50)
    return raw.headers["x-specway-decision-id"]


def api(gw: Live, secret: str, method: str, path: str, **kw: Any) -> Any:
    r = httpx.request(method, f"{gw.url}{path}", headers={"Authorization": f"Bearer {secret}"}, timeout=10, **kw)
    assert r.is_success, r.text
    return r.json()


@dataclass
class Tab:
    """One browser tab on the console, and everything it reported that should not happen."""

    gw: Live
    page: Page
    who: str
    problems: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)  # console errors a step provokes on purpose (a 404 it shows)

    def open(self, path: str = "/console") -> None:
        self.page.goto(f"{self.gw.url}{path}")

    def sign_in(self, secret: str) -> None:
        """By keyboard alone: the key field has the focus, Enter submits."""
        self.open()
        self.page.wait_for_selector("#key:focus")
        self.page.keyboard.type(secret)
        self.page.keyboard.press("Enter")
        self.page.wait_for_selector("header.top, .signin [role=alert]:not([hidden])")

    def nav(self, label: str) -> None:
        self.page.get_by_role("navigation", name="Console").get_by_role("link", name=label).click()
        self.settled()

    def settled(self) -> None:
        self.page.wait_for_selector("main#main:not([aria-busy])")
        unlabelled = self.page.evaluate("""[...document.querySelectorAll('input, select, textarea')]
            .filter((e) => e.type !== 'hidden' && !e.labels?.length && !e.getAttribute('aria-label'))
            .map((e) => e.outerHTML)""")
        assert unlabelled == [], unlabelled

    def confirm(self, button: str) -> None:
        """Press a dialog's button and wait for what it started: the dialog gone, the page drawn again."""
        dialog = self.page.get_by_role("dialog")
        dialog.get_by_role("button", name=button).click()
        dialog.wait_for(state="detached")
        self.settled()

    def shoot(self, name: str) -> None:
        """The page at both widths; at the narrow one nothing but a table's own scroller is wider than the window."""
        SHOTS.mkdir(exist_ok=True)
        for width in WIDTHS:
            self.page.set_viewport_size({"width": width, "height": 900})
            self.page.wait_for_timeout(50)
            overflow = self.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{name} is {overflow}px wider than a {width}px window"
            self.page.screenshot(path=str(SHOTS / f"{self.who}-{name}-{width}.png"), full_page=True)
        self.page.set_viewport_size({"width": WIDTHS[0], "height": 900})

    def text(self, selector: str) -> str:
        found = self.page.locator(selector)
        if found.count() == 0:  # say what the page shows instead
            main = self.page.locator("#app").inner_text()
            raise AssertionError(f"no {selector} on {self.page.url}:\n{main[:2000]}\nproblems: {self.problems}")
        return found.first.inner_text()

    def rows(self, table: str) -> list[list[str]]:
        return self.page.evaluate(f"""[...document.querySelectorAll('table[data-table="{table}"] tbody tr')]
            .map((tr) => [...tr.cells].map((td) => td.innerText.trim()))""")

    def clean(self) -> None:
        unexpected = [p for p in self.problems if p not in self.expected]
        assert unexpected == [], unexpected


@pytest.fixture
def tabs(browser: Browser, gw: Live) -> Iterator[Any]:
    made: list[Tab] = []

    def new(who: str) -> Tab:
        context = browser.new_context(viewport={"width": WIDTHS[0], "height": 900}, timezone_id="UTC", locale="en-US")
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=gw.url)
        context.add_init_script(WATCH_CSP)
        page = context.new_page()
        tab = Tab(gw, page, who)
        page.on("console", lambda m: tab.problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: tab.problems.append(f"uncaught: {e}"))
        page.on("request", lambda r: None if r.url.startswith(gw.url) else tab.problems.append(f"other origin: {r.url}"))
        page.on("response", lambda r: _check_policy(tab, r))
        made.append(tab)
        return tab

    yield new
    for tab in made:
        tab.page.context.close()


def _check_policy(tab: Tab, response: Any) -> None:
    if "/console" in response.url and response.headers.get("content-security-policy") != CSP:
        tab.problems.append(f"no CSP on {response.url}")


# --- the flows ----------------------------------------------------------------------------------------------------


def overview_matches_usage(tab: Tab, secret: str) -> dict[str, Any]:
    """The charts' and the table's numbers are GET /v1/usage's, for the same range and breakdown."""
    tab.nav("Overview")
    start = (datetime.now(UTC) - timedelta(hours=24)).isoformat()
    usage = api(tab.gw, secret, "GET", "/v1/usage", params={"start": start, "bucket": "hour", "group_by": "model"})
    totals = usage["totals"]
    for metric, expected in (("requests", totals["requests"]), ("errors", totals["errors"]),
                             ("tokens", totals["input_tokens"] + totals["output_tokens"])):
        figure = f'figure[data-metric="{metric}"]'
        assert tab.text(f"{figure} .chart-total") == f"{expected:,}"
        bars = tab.page.eval_on_selector_all(f"{figure} rect[data-value]", "els => els.map(e => Number(e.dataset.value))")
        assert sum(bars) == expected
    cost = tab.page.eval_on_selector_all('figure[data-metric="cost"] rect[data-value]', "els => els.map(e => e.dataset.value)")
    assert sum(map(Decimal, cost)) == Decimal(totals["cost"]) == Decimal(tab.text('figure[data-metric="cost"] .chart-total'))
    per_model: dict[str, list[Decimal]] = {}
    for row in usage["data"]:
        got = per_model.setdefault(row["model"], [Decimal(0)] * 4)
        for i, name in enumerate(("requests", "errors", "input_tokens", "cost")):
            got[i] += Decimal(row[name])
    shown = {r[0]: [Decimal(r[1].replace(",", "")), Decimal(r[2].replace(",", "")), Decimal(r[3].replace(",", "")),
                    Decimal(r[5])] for r in tab.rows("usage") if r[0] != "Total"}
    assert shown == per_model
    return usage


def create_key(tab: Tab, name: str, budget: str) -> str:
    """Through the New key dialog; the secret is shown once, and Copy puts it on the clipboard."""
    tab.nav("Keys and workspaces")
    tab.page.get_by_role("button", name="New key").click()
    dialog = tab.page.get_by_role("dialog")
    dialog.get_by_label("Name").fill(name)
    dialog.get_by_label("Budget", exact=True).fill(budget)
    dialog.get_by_label("Requests per minute").fill("60")
    tab.settled()
    tab.shoot("new-key")
    dialog.get_by_role("button", name="Create").click()
    secret_box = dialog.locator("input[data-secret]")
    secret = secret_box.input_value()
    assert secret.startswith("sk-sw-")
    dialog.get_by_role("button", name="Copy").click()
    dialog.get_by_text("Copied.").wait_for()
    assert tab.page.evaluate("navigator.clipboard.readText()") == secret
    tab.confirm("Done")
    # Gone from the page once the dialog closed (waited for: the dialog's element may outlive its role a moment).
    tab.page.locator("input[data-secret]").wait_for(state="detached", timeout=10_000)
    assert tab.page.locator("input[data-secret]").count() == 0
    return secret


def find_and_open(tab: Tab, key_id: str, decision: str) -> None:
    """The request in the list filtered by its key, then its own page with its attempts."""
    tab.nav("Requests")
    tab.page.get_by_label("Key", exact=True).select_option(value=key_id)
    tab.page.get_by_role("button", name="Filter").click()
    tab.settled()
    link = tab.page.locator(f'a[data-decision="{decision}"]')
    assert tab.page.locator("a[data-decision]").count() == 1 and link.count() == 1
    assert "key_id=" in tab.page.url and "sk-sw-" not in tab.page.url
    tab.shoot("requests")
    link.click()
    tab.settled()
    assert tab.text("h1") == f"Request {decision}"
    attempts = tab.rows("attempts")
    assert [(a[1], a[2], a[3]) for a in attempts] == [(MODEL, "fake", "200")]
    assert tab.rows("candidates")[0][1:4] == [MODEL, "fake", "chosen"]
    assert tab.text('[data-facts="request"]').count(tab.gw.gateway.revision) == 1
    tab.shoot("request")


def edit_and_credit(tab: Tab, admin: str, key_id: str, key_name: str) -> None:
    """Edit a key's limits and allowlist; add credit (the operator's), each checked against the API."""
    tab.nav("Keys and workspaces")
    tab.page.get_by_role("button", name=f"Edit {key_name}").click()
    dialog = tab.page.get_by_role("dialog")
    dialog.get_by_label("Requests per minute").fill("120")
    dialog.get_by_label("Models", exact=True).fill(f"{MODEL}\nchat")
    dialog.get_by_label("Budget period").select_option("monthly")
    tab.confirm("Save")
    key = api(tab.gw, admin, "GET", f"/v1/keys/{key_id}")
    assert (key["limits"]["rpm"], key["limits"]["budget"], key["limits"]["budget_period"], key["models"]) == (
        120, "1.00", "monthly", [MODEL, "chat"])
    if tab.page.get_by_role("button", name=re.compile("^Add credit")).count():
        before = Decimal(api(tab.gw, admin, "GET", f"/v1/workspaces/{key['workspace_id']}")["credit"])
        tab.page.locator(f'tr:has(code:text-is("{key["workspace_id"]}"))').get_by_role("button", name=re.compile("^Add credit")).click()
        tab.page.get_by_role("dialog").get_by_label("Amount").fill("2.50")
        tab.confirm("Add credit")
        after = Decimal(api(tab.gw, admin, "GET", f"/v1/workspaces/{key['workspace_id']}")["credit"])
        assert after == before + Decimal("2.50")


def revoke(tab: Tab, key_name: str) -> None:
    tab.nav("Keys and workspaces")
    tab.page.get_by_role("button", name=f"Revoke {key_name}").click()
    tab.confirm("Revoke")
    row = next(r for r in tab.rows("keys") if r[0].startswith(key_name))
    assert "revoked" in row


def the_flow(tab: Tab, admin: str, key_name: str) -> tuple[str, str]:
    """Sign in, check the overview, create a key with a budget, use it, find its request, revoke it. Returns the
    new key's decision id and its secret."""
    tab.sign_in(admin)
    tab.shoot("overview")
    overview_matches_usage(tab, admin)
    secret = create_key(tab, key_name, "1.00")
    key_id = api(tab.gw, secret, "GET", "/v1/key")["id"]
    decision = chat(tab.gw, secret)
    tab.page.reload()
    tab.settled()
    row = next(r for r in tab.rows("keys") if r[0].startswith(key_name))
    assert "1.00 total" in row[5] and "active" in row and key_id in row[0]
    rotates = "/v1/keys/{keyId}/rotate" in httpx.get(f"{tab.gw.url}/openapi.json").json()["paths"]
    assert tab.page.get_by_role("button", name=f"Rotate {key_name}").count() == int(rotates)  # where it is served
    tab.shoot("keys")
    find_and_open(tab, key_id, decision)
    edit_and_credit(tab, admin, key_id, key_name)
    revoke(tab, key_name)
    with pytest.raises(openai.AuthenticationError):
        chat(tab.gw, secret)
    tab.nav("Models")
    assert tab.rows("models")[0][0].startswith(MODEL)
    tab.shoot("models")
    overview_matches_usage(tab, admin)  # the new key's request counted
    return decision, secret


def test_the_operator_runs_the_gateway_from_the_console(gw: Live, tabs: Any) -> None:
    chat(gw, gw.key)
    tab = tabs("operator")
    the_flow(tab, gw.key, "svc")
    deployments = tab.page.get_by_role("heading", name="Deployments")
    served = httpx.get(f"{gw.url}/openapi.json").json()["paths"]
    tab.nav("Overview")
    # The panel shows once the gateway serves GET /v1/route/deployments, with one row per deployment.
    assert deployments.count() == (1 if "/v1/route/deployments" in served else 0)
    if "/v1/route/deployments" in served:
        assert tab.rows("deployments")
    tab.page.get_by_role("button", name="Sign out").click()
    tab.page.wait_for_selector("#key")
    assert tab.page.evaluate("sessionStorage.length") == 0
    assert tab.page.evaluate("document.cookie") == "" and tab.page.evaluate("localStorage.length") == 0
    tab.clean()


def test_a_workspace_admin_of_another_workspace_sees_nothing_of_the_first(gw: Live, tabs: Any) -> None:
    first = chat(gw, gw.key)  # a request of the operator's workspace
    other = api(gw, gw.key, "POST", "/v1/workspaces", json={"name": "team b", "credit": "50"})["id"]
    b_admin = api(gw, gw.key, "POST", "/v1/keys", json={"name": "b admin", "workspace_id": other,
                                                         "scopes": list(ADMIN_SCOPES)})["secret"]
    chat(gw, b_admin)
    tab = tabs("workspace-admin")
    decision, _ = the_flow(tab, b_admin, "b-svc")

    tab.nav("Keys and workspaces")
    assert [r[0].split("\n")[-1] for r in tab.rows("workspaces")] == [other]
    listed = {k["id"] for k in api(gw, b_admin, "GET", "/v1/keys")["data"]}
    assert all(row[0].split("\n")[1].split()[0] in listed for row in tab.rows("keys"))
    operator = api(gw, gw.key, "GET", "/v1/key")["id"]
    assert listed and not any(operator in row[0] for row in tab.rows("keys"))
    assert tab.page.get_by_role("button", name=re.compile("^Add credit")).count() == 0  # credit is the operator's
    tab.nav("Requests")
    shown = tab.page.eval_on_selector_all("a[data-decision]", "els => els.map(e => e.dataset.decision)")
    assert decision in shown and first not in shown
    tab.nav("Overview")
    assert tab.text('figure[data-metric="requests"] .chart-total') == "2"  # its admin's chat and its key's

    # The one console error allowed: the browser's note of the refused read, which the page shows in the API's words.
    refused = "console error: Failed to load resource: the server responded with a status of 404 (Not Found)"
    tab.expected.append(refused)
    tab.open(f"/console/requests/{first}")
    tab.settled()
    assert f"No decision '{first}' for this key's workspace." in tab.text("[role=alert]")
    assert tab.problems == [refused]
    tab.clean()


def test_a_key_read_key_sees_itself_and_asks_for_nothing_else(gw: Live, tabs: Any) -> None:
    secret = gw.create_key(scopes=("inference", "key:read"))
    chat(gw, secret)
    tab = tabs("key-read")
    tab.sign_in(secret)
    tab.settled()
    total = api(gw, secret, "GET", "/v1/usage", params={"bucket": "hour"})["totals"]["requests"]
    assert total == 1 and tab.text('figure[data-metric="requests"] .chart-total') == "1"
    tab.nav("Keys and workspaces")
    me = api(gw, secret, "GET", "/v1/key")
    assert me["id"] in tab.text('[data-facts="self"]') and "key:read" in tab.text('[data-facts="self"]')
    assert tab.page.get_by_text("This key lacks the 'workspace:admin' scope needed here").count() == 2
    assert tab.page.get_by_role("button", name="New key").count() == 0
    tab.nav("Requests")
    assert "lacks the 'explain:read' scope" in tab.text("[role=alert]")
    tab.shoot("self")
    tab.clean()  # nothing it may not read was asked for: no refused request in the console


def test_the_keyboard_alone_reaches_a_page_and_a_dialog(gw: Live, tabs: Any) -> None:
    tab = tabs("keyboard")
    tab.sign_in(gw.key)
    tab.settled()
    for _ in range(12):  # skip link, brand-less nav links...
        tab.page.keyboard.press("Tab")
        if tab.page.evaluate("document.activeElement.textContent") == "Keys and workspaces":
            break
    tab.page.keyboard.press("Enter")
    tab.settled()
    assert tab.page.evaluate("document.activeElement.tagName + ' ' + document.activeElement.textContent") == (
        "H1 Keys and workspaces")
    tab.page.get_by_role("button", name="New key").focus()
    tab.page.keyboard.press("Enter")
    assert tab.page.evaluate("document.activeElement.name") == "name"  # the dialog's first field
    tab.page.keyboard.press("Escape")
    tab.page.get_by_role("dialog").wait_for(state="detached")
    assert tab.page.evaluate("document.activeElement.textContent") == "New key"  # back where it was opened
    tab.clean()


def test_a_violation_would_be_seen(gw: Live, tabs: Any) -> None:
    """The listeners above can fail: an inline style, which the policy blocks, is reported."""
    tab = tabs("probe")
    tab.sign_in(gw.key)
    tab.page.evaluate("document.head.append(Object.assign(document.createElement('style'), {textContent: 'p {}'}))")
    tab.page.wait_for_timeout(200)
    assert any("CSP violation: style-src" in p for p in tab.problems), tab.problems


def test_a_wrong_key_is_refused_and_nothing_is_kept(gw: Live, tabs: Any) -> None:
    tab = tabs("wrong")
    tab.sign_in("sk-sw-not-a-key")
    assert "does not know this key" in tab.text("[role=alert]")
    assert tab.page.evaluate("sessionStorage.length") == 0 and tab.page.url == f"{gw.url}/console"


def test_money_reads_as_plain_decimals(gw: Live) -> None:
    """After priced requests (leased, held and settled), every amount the console reads is digits and a point: a
    difference that is zero is 0, never Decimal's 0E-7."""
    chat(gw, gw.key)
    texts = [httpx.get(f"{gw.url}{path}", headers=gw.headers).text for path in ("/v1/workspaces", "/v1/keys", "/v1/key")]
    amounts = re.findall(r'"(?:credit|reserved|spend_total|total|period|budget)":"([^"]*)"', "".join(texts))
    assert amounts and all(re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", a) for a in amounts), amounts


def test_the_console_files_carry_the_policy(gw: Live) -> None:
    for path in ("/console", "/console/", "/console/requests/abc", "/console/assets/console.js",
                 "/console/assets/console.css", "/console/assets/icon.svg"):
        r = httpx.get(f"{gw.url}{path}")
        assert r.status_code == 200 and r.headers["content-security-policy"] == CSP, path
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"
        again = httpx.get(f"{gw.url}{path}", headers={"If-None-Match": r.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
    page = httpx.get(f"{gw.url}/console").text
    assert "<style" not in page and " style=" not in page and "http" not in page.replace("http-equiv", "")
    assert re.findall(r"<script[^>]*>", page) == ['<script type="module" src="/console/assets/console.js">']
    missing = httpx.get(f"{gw.url}/console/assets/nothing.js")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    posted = httpx.post(f"{gw.url}/console", content=b"key=sk-sw-x")
    assert posted.status_code == 405 and posted.headers["allow"] == "GET, HEAD"


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _ratio(a: str, b: str) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_the_colours_meet_wcag_aa() -> None:
    """Each "contrast:" pair console.css names is 4.5:1 at least; the chart colours 3:1 against the page."""
    css = (ROOT / "handlers" / "console" / "assets" / "console.css").read_text(encoding="utf-8")
    colours = dict(re.findall(r"(--[\w-]+):\s*(#[0-9a-f]{6})", css))
    pairs = [(fg, bg) for fgs, bg in re.findall(r"contrast: ((?:--[\w-]+ )+)on (--[\w-]+)", css) for fg in fgs.split()]
    assert len(pairs) >= 10
    for fg, bg in pairs:
        assert _ratio(colours[fg], colours[bg]) >= 4.5, (fg, bg, _ratio(colours[fg], colours[bg]))
    for n in range(7):
        assert _ratio(colours[f"--c{n}"], colours["--bg"]) >= 3, n


def test_the_readme_shows_a_committed_screenshot() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.findall(r"!\[[^\]]*\]\((docs/[^)]+\.png)\)", readme)
    assert shown and all((ROOT / s).is_file() for s in shown)
