// Overview: requests, errors, tokens and cost over the last hour, day or 30 days, broken down by model, key,
// upstream or workspace (GET /v1/usage); credit and spend per workspace (GET /v1/workspaces); and, where the
// gateway serves GET /v1/route/deployments, each deployment's health.

import { api, must, type Schemas, untyped } from "../api.js";
import { columns, type Series } from "../chart.js";
import { add, sum } from "../decimal.js";
import { type Child, h, section, table } from "../dom.js";
import * as fmt from "../format.js";
import { attempt, badge, type Ctx, problem, title } from "../ui.js";

type Row = Schemas["UsageRow"];
type By = "model" | "key" | "upstream" | "workspace";
const HOUR = 3_600_000;
const RANGES: Record<string, { label: string; span: number; bucket: "hour" | "day" }> = {
  hour: { label: "Last hour", span: HOUR, bucket: "hour" },
  day: { label: "Last day", span: 24 * HOUR, bucket: "hour" },
  month: { label: "Last 30 days", span: 30 * 24 * HOUR, bucket: "day" },
};
const BY: By[] = ["model", "key", "upstream", "workspace"];
const FIELD: Record<By, "model" | "key_id" | "upstream" | "workspace_id"> = {
  model: "model", key: "key_id", upstream: "upstream", workspace: "workspace_id",
};
const METRICS: { metric: string; title: string; of: (r: Schemas["UsageCounts"]) => number; text?: (r: Schemas["UsageCounts"]) => string }[] = [
  { metric: "requests", title: "Requests", of: (r) => r.requests },
  { metric: "errors", title: "Errors", of: (r) => r.errors },
  { metric: "tokens", title: "Tokens (input + output)", of: (r) => r.input_tokens + r.output_tokens },
  { metric: "cost", title: "Cost", of: (r) => Number(r.cost), text: (r) => r.cost },
];
const TOP = 6; // groups drawn apart; the rest are "other"
const DEPLOYMENTS = "/v1/route/deployments"; // served once the routing work lands: the panel shows from then on

export async function overview(ctx: Ctx): Promise<Node> {
  const rangeName = RANGES[ctx.query.get("range") ?? ""] ? (ctx.query.get("range") as string) : "day";
  const range = RANGES[rangeName] as (typeof RANGES)[string];
  const by = BY.find((b) => b === ctx.query.get("by")) ?? "model";
  const start = new Date(Date.now() - range.span).toISOString();
  const query = { start, bucket: range.bucket };
  const [usage, byWorkspace, workspaces, keyList, deployments] = await Promise.all([
    attempt(ctx, "get", "/v1/usage", () => must(api.GET("/v1/usage", { params: { query: { ...query, group_by: by } } }))),
    attempt(ctx, "get", "/v1/usage", () => must(api.GET("/v1/usage", { params: { query: { ...query, group_by: "workspace" } } }))),
    attempt(ctx, "get", "/v1/workspaces", () => must(api.GET("/v1/workspaces"))),
    attempt(ctx, "get", "/v1/keys", () => must(api.GET("/v1/keys"))),
    attempt(ctx, "get", DEPLOYMENTS, () => untyped("GET", DEPLOYMENTS)),
  ]);
  const names = new Map<string, string>();
  if (!(keyList instanceof Error)) for (const k of keyList.data) names.set(k.id, `${k.name} (${k.id})`);
  if (!(workspaces instanceof Error)) for (const w of workspaces.data) names.set(w.id, `${w.name} (${w.id})`);
  const label = (row: Row): string => {
    const value = row[FIELD[by]] ?? "";
    return names.get(value) ?? (value || "(none)");
  };
  return h("div", {},
    title("Overview"),
    controls(ctx, rangeName, by),
    usage instanceof Error ? problem(usage) : charts(usage, range.bucket, label),
    usage instanceof Error ? null : section(`By ${by}`, byTable(usage, label, by)),
    section("Workspaces", workspaces instanceof Error ? problem(workspaces) : workspaceTable(workspaces.data, byWorkspace)),
    deploymentPanel(deployments),
  );
}

function charts(usage: Schemas["UsageReport"], bucket: "hour" | "day", label: (r: Row) => string): HTMLElement {
  const buckets = bucketsOf(usage, bucket);
  const groups = ranked(usage.data, label);
  return h("div", { class: "charts" }, METRICS.map((m) => columns({
    metric: m.metric, title: m.title, total: m.text ? fmt.money(m.text(usage.totals)) : fmt.num(m.of(usage.totals)),
    buckets: buckets.map((b) => ({ start: new Date(b).toISOString(), label: bucketLabel(b, bucket) })),
    series: series(usage.data, groups, buckets, label, m),
  })));
}

function controls(ctx: Ctx, range: string, by: By): HTMLElement {
  const rangeSelect = h("select", { name: "range" }, Object.entries(RANGES).map(([value, r]) =>
    h("option", { value, selected: value === range }, r.label)));
  const bySelect = h("select", { name: "by" }, BY.map((b) => h("option", { value: b, selected: b === by }, b)));
  const form = h("form", { class: "controls", "aria-label": "What the charts show" },
    h("label", {}, "Period ", rangeSelect), h("label", {}, "Break down by ", bySelect));
  form.addEventListener("change", () => ctx.go(`/console?range=${rangeSelect.value}&by=${bySelect.value}`));
  form.addEventListener("submit", (event) => event.preventDefault());
  return form;
}

function bucketsOf(usage: Schemas["UsageReport"], bucket: "hour" | "day"): number[] {
  const step = bucket === "hour" ? HOUR : 24 * HOUR;
  let at = Date.parse(usage.start);
  if (bucket === "day") at -= at % step; // a day's rows start at 00:00 UTC
  const out: number[] = [];
  for (const end = Date.parse(usage.end); at < end; at += step) out.push(at);
  return out;
}

function bucketLabel(at: number, bucket: "hour" | "day"): string {
  const when = new Date(at);
  return bucket === "day"
    ? when.toLocaleDateString(undefined, { month: "short", day: "numeric", timeZone: "UTC" })
    : when.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

/** The groups in order of requests (then cost), the first TOP of them drawn apart. */
function ranked(rows: Row[], label: (r: Row) => string): string[] {
  const totals = new Map<string, [number, number]>();
  for (const r of rows) {
    const [n, c] = totals.get(label(r)) ?? [0, 0];
    totals.set(label(r), [n + r.requests, c + Number(r.cost)]);
  }
  return [...totals.entries()].sort((a, b) => b[1][0] - a[1][0] || b[1][1] - a[1][1] || a[0].localeCompare(b[0]))
    .map(([name]) => name);
}

function series(rows: Row[], groups: string[], buckets: number[], label: (r: Row) => string,
                metric: (typeof METRICS)[number]): Series[] {
  const shown = groups.slice(0, TOP);
  const names = groups.length > TOP ? [...shown, "other"] : shown;
  const index = new Map(buckets.map((b, i) => [b, i]));
  const values = names.map(() => buckets.map(() => ({ value: 0, text: "0" })));
  for (const r of rows) {
    const i = index.get(Date.parse(r.start));
    const g = shown.includes(label(r)) ? shown.indexOf(label(r)) : names.length - 1;
    const cell = i === undefined ? undefined : values[g]?.[i];
    if (!cell) continue;
    cell.value += metric.of(r);
    cell.text = metric.text ? add(cell.text, metric.text(r)) : String(cell.value);
  }
  return names.map((name, g) => ({ label: name, cells: values[g] ?? [] }));
}

function byTable(usage: Schemas["UsageReport"], label: (r: Row) => string, by: By): HTMLElement {
  const groups = new Map<string, Row[]>();
  for (const r of usage.data) groups.set(label(r), [...(groups.get(label(r)) ?? []), r]);
  const count = (rows: Row[], f: (r: Row) => number) => fmt.num(rows.reduce((n, r) => n + f(r), 0));
  const rows: Child[][] = [...groups.entries()].map(([name, rs]) => [name, count(rs, (r) => r.requests), count(rs, (r) => r.errors),
    count(rs, (r) => r.input_tokens), count(rs, (r) => r.output_tokens), fmt.money(sum(rs.map((r) => r.cost)))]);
  const t = usage.totals;
  rows.push([h("strong", {}, "Total"), fmt.num(t.requests), fmt.num(t.errors), fmt.num(t.input_tokens),
    fmt.num(t.output_tokens), fmt.money(t.cost)]);
  return table(`Usage by ${by}`, [by, "Requests", "Errors", "Input tokens", "Output tokens", "Cost"], rows,
    { class: "numbers", "data-table": "usage" });
}

function workspaceTable(list: Schemas["Workspace"][], usage: Schemas["UsageReport"] | Error): HTMLElement {
  const spent = new Map<string, string>();
  if (!(usage instanceof Error)) {
    for (const r of usage.data) spent.set(r.workspace_id ?? "", add(spent.get(r.workspace_id ?? "") ?? "0", r.cost));
  }
  return table("Workspaces", ["Workspace", "Credit left", "Held by requests in flight", "Spent in all", "Spent in this period"],
    list.map((w) => [h("span", {}, w.name, h("br"), h("code", {}, w.id)), fmt.money(w.credit), fmt.money(w.reserved),
      fmt.money(w.spend_total), usage instanceof Error ? "—" : fmt.money(spent.get(w.id) ?? "0")]),
    { class: "numbers", "data-table": "workspaces" });
}

/** Shown only when the gateway answers GET /v1/route/deployments: its columns are whatever each deployment reports. */
function deploymentPanel(answer: Awaited<ReturnType<typeof untyped>> | Error): HTMLElement | null {
  if (answer instanceof Error) return null; // not served by this gateway, or not to this key
  if (answer.response.status === 403) { // served, but not to this key: say so in the API's words
    const refused = answer.error as { error?: { message?: string } } | undefined;
    return section("Deployments", problem(refused?.error?.message ?? "This key may not read deployments."));
  }
  if (!answer.response.ok) return null; // not served by this gateway (404), or not answering: no panel
  const body = answer.data as { data?: Record<string, unknown>[] } | Record<string, unknown>[];
  const items = Array.isArray(body) ? body : body.data ?? [];
  const names = [...new Set(items.flatMap((item) => Object.keys(item)))].filter((n) => n !== "object");
  return section("Deployments", items.length === 0 ? h("p", {}, "No deployments.") :
    table("Deployments", names.map((n) => n.replaceAll("_", " ")), items.map((item) => names.map((n) => cell(n, item[n]))),
      { "data-table": "deployments" }));
}

function cell(name: string, value: unknown): Node | string {
  if (value === null || value === undefined) return "—";
  if (name === "state" && typeof value === "string") {
    return badge(value, value === "healthy" ? "good" : value === "open" ? "bad" : "warn");
  }
  if (Array.isArray(value)) return value.join(", ");
  if (typeof value === "string" && /(_until|_at)$/.test(name)) return fmt.time(value);
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}
