// The operator console: sign in with a relay key, then pages that read and change what that key may, through the
// API. Routes are paths under /console (the gateway answers index.html for each); filters live in the query string,
// the key never does.

import { api, must, onSignedOut, Refusal, spec, type Spec } from "./api.js";
import { h } from "./dom.js";
import { keys } from "./pages/keys.js";
import { models } from "./pages/models.js";
import { overview } from "./pages/overview.js";
import { request } from "./pages/request.js";
import { requests } from "./pages/requests.js";
import * as session from "./session.js";
import { type Ctx, type Me, problem } from "./ui.js";

type Page = (ctx: Ctx, rest: string) => Promise<Node>;

const NAV: [string, string][] = [
  ["/console", "Overview"],
  ["/console/keys", "Keys and workspaces"],
  ["/console/requests", "Requests"],
  ["/console/models", "Models"],
];
const ROUTES: [RegExp, string, Page][] = [
  [/^\/console\/?$/, "Overview", overview],
  [/^\/console\/keys\/?$/, "Keys and workspaces", keys],
  [/^\/console\/requests\/?$/, "Requests", requests],
  [/^\/console\/requests\/([^/]+)$/, "Request", request],
  [/^\/console\/models\/?$/, "Models", models],
];

const root = document.getElementById("app") as HTMLElement;
let me: Me | null = null;
let rendering = 0;

async function whoami(): Promise<Me> {
  try {
    const key = await must(api.GET("/v1/key"));
    return { key, scopes: key.scopes };
  } catch (err) {
    if (!(err instanceof Refusal) || err.status !== 403) throw err;
    try {
      await must(api.GET("/v1/workspaces")); // workspace:admin (or admin) without key:read
    } catch (second) {
      if (second instanceof Refusal && second.status === 403) {
        throw new Refusal(403, second.code, "This key holds neither key:read nor workspace:admin (nor admin): the " +
          "console has nothing it may show.");
      }
      throw second;
    }
    return { key: null, scopes: null };
  }
}

function signInPage(message?: string): void {
  me = null;
  document.title = "Sign in — Specway console";
  const input = h("input", { type: "password", name: "key", required: true, autocomplete: "off", spellcheck: "false",
    id: "key", "aria-describedby": "key-hint" });
  const status = h("p", { class: "alert", role: "alert", hidden: !message }, message ?? "");
  const form = h("form", { class: "signin", novalidate: true }, h("h1", {}, "Specway console"),
    h("label", { for: "key" }, "Relay key"), input,
    h("p", { class: "hint", id: "key-hint" }, "A key holding admin or workspace:admin, or key:read to see itself. It stays " +
      "in this tab only (sessionStorage) and is forgotten on sign out."),
    status, h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const secret = input.value.trim();
    if (!secret) {
      status.hidden = false;
      status.textContent = "Enter a relay key.";
      input.focus();
      return;
    }
    session.remember(secret);
    input.value = "";
    whoami().then((who) => {
      me = who;
      render();
    }).catch((err: unknown) => {
      session.forget();
      status.hidden = false;
      status.textContent = err instanceof Refusal && err.status === 401 ? "The gateway does not know this key, or it " +
        "is revoked or expired." : err instanceof Error ? err.message : String(err);
      input.focus();
    });
  });
  root.replaceChildren(h("main", { id: "main", class: "narrow" }, form));
  input.focus();
}

function signOut(): void {
  session.forget();
  signInPage();
}

function shell(who: Me, path: string): HTMLElement {
  const name = who.key ? `${who.key.name} (${who.key.scopes.join(", ")})` : "a key without key:read";
  const current = NAV.filter(([href]) => path === href || path.startsWith(`${href}/`)).pop()?.[0];
  return h("header", { class: "top" },
    h("a", { class: "skip", href: "#main" }, "Skip to content"),
    h("p", { class: "brand" }, "Specway"),
    h("nav", { "aria-label": "Console" }, h("ul", {}, NAV.map(([href, label]) =>
      h("li", {}, h("a", { href, "aria-current": href === current ? "page" : null }, label))))),
    h("div", { class: "who" }, h("span", {}, "Signed in as ", h("strong", {}, name)),
      h("button", { type: "button", class: "secondary", onclick: signOut }, "Sign out")));
}

function go(href: string): void {
  history.pushState(null, "", href);
  render(true);
}

function render(focus = false): void {
  if (!me) return signInPage();
  const ticket = ++rendering;
  const path = location.pathname;
  const [pattern, title, page] = ROUTES.find(([re]) => re.test(path)) ?? [/$/, "Not found", notFound];
  const rest = decodeURIComponent(path.match(pattern)?.[1] ?? "");
  const main = h("main", { id: "main", tabindex: -1, "aria-busy": "true" }, h("p", { class: "loading" }, "Loading…"));
  root.replaceChildren(shell(me, path), main);
  document.title = `${title} — Specway console`;
  const ctx: Ctx = { me, spec: null as unknown as Spec, query: new URLSearchParams(location.search), go,
    rerender: () => render() };
  spec().then((doc) => page({ ...ctx, spec: doc }, rest)).then((node) => {
    if (ticket !== rendering) return;
    main.replaceChildren(node);
  }).catch((err: unknown) => {
    if (ticket !== rendering || !me) return;
    main.replaceChildren(h("h1", { tabindex: -1 }, title), problem(err));
  }).finally(() => {
    main.removeAttribute("aria-busy");
    if (focus && ticket === rendering) (main.querySelector("h1") as HTMLElement | null)?.focus();
  });
}

async function notFound(): Promise<Node> {
  return h("div", {}, h("h1", { tabindex: -1 }, "Not found"), h("p", {}, "No console page here. ",
    h("a", { href: "/console" }, "Back to the overview"), "."));
}

document.addEventListener("click", (event) => {
  const link = (event.target as Element | null)?.closest?.("a");
  const href = link?.getAttribute("href");
  if (!link || !href?.startsWith("/console") || event.defaultPrevented || event.button !== 0 ||
      event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  go(href);
});
window.addEventListener("popstate", () => render(true));
onSignedOut(() => {
  if (!me) return;
  session.forget();
  signInPage("The gateway no longer takes this key (revoked or expired): sign in again.");
});

if (session.key()) {
  whoami().then((who) => {
    me = who;
    render();
  }).catch((err: unknown) => {
    session.forget();
    signInPage(err instanceof Error ? err.message : String(err));
  });
} else {
  signInPage();
}
