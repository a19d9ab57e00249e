// What every page shares: who is signed in, the page context, and small pieces of markup.

import { type Schemas, scopeOf, serves, type Spec } from "./api.js";
import { h } from "./dom.js";

/** Who is signed in: the key as GET /v1/key shows it, or null when it lacks key:read (its scopes are then unknown,
 * and the console offers everything, leaving the API to refuse). */
export type Me = { key: Schemas["KeyInfo"] | null; scopes: string[] | null };
export type Ctx = { me: Me; spec: Spec; query: URLSearchParams; go: (href: string) => void; rerender: () => void };

/** Whether to offer what needs `scope`: false only when the key surely lacks it. The API decides in the end. */
export function mayTry(me: Me, scope: string): boolean {
  return me.scopes === null || me.scopes.includes(scope) || (scope === "workspace:admin" && me.scopes.includes("admin"));
}

/** `call`'s answer, or its refusal as an Error; no request at all when the served spec has no such operation or
 * names a scope (x-scope) the signed-in key surely lacks: the API would refuse it, and a page asks only what it may
 * be told. */
export async function attempt<T>(ctx: Ctx, method: "get" | "post", path: string, call: () => Promise<T>): Promise<T | Error> {
  if (!serves(ctx.spec, method, path)) return new Error(`This gateway does not serve ${method.toUpperCase()} ${path}.`);
  const scope = scopeOf(ctx.spec, method, path);
  if (scope && !mayTry(ctx.me, scope)) {
    const also = scope === "workspace:admin" ? " ('admin' also grants it)" : "";
    return new Error(`This key lacks the '${scope}' scope needed here${also}.`);
  }
  return settle(call());
}

/** An error in words, as an alert: the API's own message when it refused. */
export function problem(err: unknown): HTMLElement {
  return h("p", { class: "alert", role: "alert" }, err instanceof Error ? err.message : String(err));
}

/** A short word with a class for its colour and the same word for screen readers. */
export function badge(text: string, kind: string): HTMLElement {
  return h("span", { class: `badge ${kind}` }, text);
}

export function outcomeBadge(outcome: string): HTMLElement {
  return badge(outcome, outcome === "ok" ? "good" : outcome === "cancelled" ? "warn" : "bad");
}

export function title(text: string, ...extra: (Node | string)[]): HTMLElement {
  return h("div", { class: "page-head" }, h("h1", { tabindex: -1 }, text), ...extra);
}

/** Settled results of calls that may each be refused: a page shows what it may and says why for the rest. */
export async function settle<T>(call: Promise<T>): Promise<T | Error> {
  try {
    return await call;
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
}
