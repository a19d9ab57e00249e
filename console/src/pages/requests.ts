// Requests: the decision records (GET /v1/route/decisions), filtered by key, model, outcome and time, newest first,
// a page at a time. The filters are the page's query string, so a filtered list can be linked to (the key never is).

import { api, must, type Schemas } from "../api.js";
import type { operations } from "../schema.js";
import { field, h, table } from "../dom.js";
import * as fmt from "../format.js";
import { attempt, type Ctx, outcomeBadge, problem, title } from "../ui.js";

type Query = NonNullable<operations["list_decisions"]["parameters"]["query"]>;
const FILTERS = ["key_id", "model", "outcome", "start", "end"] as const;
const PAGE = 25;

export async function requests(ctx: Ctx): Promise<Node> {
  const q = ctx.query;
  const query: Query = { limit: PAGE };
  for (const name of FILTERS) {
    const value = q.get(name);
    if (value) query[name] = value;
  }
  const cursor = q.get("cursor");
  if (cursor) query.cursor = cursor;
  const [page, keyList, modelList] = await Promise.all([
    attempt(ctx, "get", "/v1/route/decisions", () => listed(query)),
    attempt(ctx, "get", "/v1/keys", () => must(api.GET("/v1/keys"))),
    attempt(ctx, "get", "/v1/models", () => must(api.GET("/v1/models", { params: { query: { limit: 1000 } } }))),
  ]);
  if (page instanceof Error) return h("div", {}, title("Requests"), problem(page));
  const names = new Map<string, string>();
  if (!(keyList instanceof Error)) for (const k of keyList.data) names.set(k.id, k.name);
  const rows = page.data.map((d) => [
    h("a", { href: `/console/requests/${encodeURIComponent(d.id)}`, "data-decision": d.id }, fmt.time(d.created_at)),
    d.key_id ? names.get(d.key_id) ?? d.key_id : "—",
    d.model ?? h("span", { class: "hint" }, d.requested_model ?? "—"),
    `${d.format}${d.stream ? " (stream)" : ""}`,
    h("span", {}, outcomeBadge(d.outcome), " ", d.status === null || d.status === undefined ? "" : String(d.status)),
    fmt.ms(d.latency_ms), `${fmt.num(d.input_tokens)} / ${fmt.num(d.output_tokens)}`, fmt.money(d.cost),
  ]);
  const base = new URLSearchParams(q);
  base.delete("cursor");
  return h("div", {},
    title("Requests"),
    filters(ctx, keyList instanceof Error ? [] : keyList.data, modelList instanceof Error ? [] : modelList.data),
    page.data.length === 0 ? h("p", { "data-empty": "" }, "No requests match.") :
      table("Requests", ["Time", "Key", "Model", "Format", "Outcome", "Upstream time", "Tokens in / out", "Cost"], rows,
        { "data-table": "requests" }),
    h("nav", { class: "pager", "aria-label": "Pages" },
      cursor ? h("a", { href: `/console/requests?${base}` }, "Newest") : null,
      page.next_cursor ? h("a", { href: `/console/requests?${withCursor(base, page.next_cursor)}`, rel: "next" }, "Older") : null));
}

function listed(query: Query): Promise<Schemas["DecisionList"]> {
  return must(api.GET("/v1/route/decisions", { params: { query } }));
}

function withCursor(base: URLSearchParams, cursor: string): URLSearchParams {
  const next = new URLSearchParams(base);
  next.set("cursor", cursor);
  return next;
}

function filters(ctx: Ctx, keys: Schemas["Key"][], models: Schemas["Model"][]): HTMLElement {
  const q = ctx.query;
  const key = keys.length
    ? h("select", { name: "key_id" }, h("option", { value: "" }, "Any key"),
      keys.map((k) => h("option", { value: k.id, selected: k.id === q.get("key_id") }, `${k.name} (${k.id})`)))
    : h("input", { name: "key_id", value: q.get("key_id") ?? "", placeholder: "key_…" });
  const model = h("input", { name: "model", list: "models-known", value: q.get("model") ?? "" });
  const known = h("datalist", { id: "models-known" }, models.map((m) => h("option", { value: m.id })));
  const codes = ctx.spec.components.schemas.ErrorDetail?.properties?.code?.enum ?? [];
  const outcome = h("input", { name: "outcome", list: "outcomes-known", value: q.get("outcome") ?? "" });
  const outcomes = h("datalist", { id: "outcomes-known" }, ["ok", "error", "cancelled", ...codes].map((c) => h("option", { value: c })));
  const start = h("input", { name: "start", type: "datetime-local", value: fmt.toLocalInput(q.get("start")) });
  const end = h("input", { name: "end", type: "datetime-local", value: fmt.toLocalInput(q.get("end")) });
  const form = h("form", { class: "filters", "aria-label": "Filter requests" },
    field("Key", key), field("Model", model), known, field("Outcome", outcome, "ok, error, or an error code"), outcomes,
    field("From", start), field("Before", end),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Filter"),
      h("a", { href: "/console/requests", class: "button secondary" }, "Clear")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    const values: Record<string, string | undefined> = {
      key_id: (key as HTMLInputElement | HTMLSelectElement).value.trim(), model: model.value.trim(),
      outcome: outcome.value.trim(), start: fmt.fromLocalInput(start.value), end: fmt.fromLocalInput(end.value),
    };
    for (const [name, value] of Object.entries(values)) if (value) next.set(name, value);
    ctx.go(`/console/requests${next.size ? `?${next}` : ""}`);
  });
  return form;
}
