// One request (GET /v1/route/explain/{id}): why it went where it went — the candidates and each one's verdict, every
// upstream attempt with its status and time (drawn to scale), its usage and cost at which prices, the configuration
// revision that routed it, and what was left out on the way.

import { api, must, type Schemas } from "../api.js";
import { bar } from "../chart.js";
import { h, section, table } from "../dom.js";
import * as fmt from "../format.js";
import { attempt, badge, type Ctx, outcomeBadge, problem, title } from "../ui.js";

export async function request(ctx: Ctx, id: string): Promise<Node> {
  const d = await attempt(ctx, "get", "/v1/route/explain/{decisionId}",
    () => must(api.GET("/v1/route/explain/{decisionId}", { params: { path: { decisionId: id } } })));
  if (d instanceof Error) return h("div", {}, title("Request"), problem(d), h("p", {}, h("a", { href: "/console/requests" }, "All requests")));
  return h("div", {},
    title(`Request ${d.id}`),
    h("p", { class: "lead" }, d.explanation),
    section("Summary", facts(d)),
    section("Candidates", candidates(d.candidates)),
    section("Attempts", attempts(d.attempts)),
    section("Usage and cost", usage(d)),
    d.left_out?.length ? section("Left out", h("ul", {}, d.left_out.map((l) => h("li", {}, l)))) : null,
    h("p", {}, h("a", { href: "/console/requests" }, "All requests")));
}

function facts(d: Schemas["Decision"]): HTMLElement {
  const pairs: [string, Node | string][] = [
    ["Time", fmt.time(d.created_at)], ["Outcome", outcomeBadge(d.outcome)], ["Answered by", d.model ?? "nobody"],
    ["Model asked for", d.requested_model ?? "none (the policy chose)"], ["Effort", d.effort ?? "—"],
    ["Policy", d.policy ?? "—"], ["Format", `${d.format}${d.stream ? ", streamed" : ""}`], ["Key", d.key_id ?? "—"],
    ["Workspace", d.workspace_id ?? "—"], ["Configuration revision", d.config_revision ?? "not recorded"],
  ];
  return h("dl", { class: "facts", "data-facts": "request" }, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function candidates(list: Schemas["DecisionCandidate"][]): HTMLElement {
  if (list.length === 0) return h("p", {}, "Routing found no candidate.");
  return table("Candidates", ["#", "Model", "Upstream", "Verdict", "Why"], list.map((c, i) => [
    String(i + 1), c.model ?? "—", c.upstream ?? "—",
    badge(c.verdict ?? "—", c.verdict === "chosen" ? "good" : c.verdict === "skipped" ? "bad" : "warn"), c.reason ?? "",
  ]), { "data-table": "candidates" });
}

function attempts(list: Schemas["DecisionAttempt"][]): HTMLElement {
  if (list.length === 0) return h("p", {}, "No upstream was tried.");
  const longest = Math.max(...list.map((a) => a.latency_ms ?? 0));
  return table("Attempts", ["#", "Model", "Upstream", "Status", "Error", "Time"], list.map((a, i) => [
    String(i + 1), a.model ?? "—", a.upstream ?? "—",
    a.status === null || a.status === undefined ? "no answer" : badge(String(a.status), a.status < 400 ? "good" : "bad"),
    a.error ?? "—",
    h("span", { class: "timing" }, fmt.ms(a.latency_ms), bar(a.latency_ms ?? 0, longest, `attempt ${i + 1}: ${fmt.ms(a.latency_ms)}`)),
  ]), { "data-table": "attempts" });
}

function usage(d: Schemas["Decision"]): HTMLElement {
  const u = d.usage;
  const p = d.pricing;
  const src = (name: keyof NonNullable<Schemas["PriceSources"]>) => p?.sources?.[name] ?? "—";
  return h("div", {},
    h("dl", { class: "facts" },
      h("dt", {}, "Input tokens"), h("dd", {}, fmt.num(u?.input_tokens)),
      h("dt", {}, "Of them from a prompt cache"), h("dd", {}, fmt.num(u?.cached_input_tokens)),
      h("dt", {}, "Of them written to a prompt cache"), h("dd", {}, fmt.num(u?.cache_write_tokens)),
      h("dt", {}, "Output tokens"), h("dd", {}, fmt.num(u?.output_tokens)),
      h("dt", {}, "Estimated"), h("dd", {}, d.usage_estimated ? "yes (the upstream reported no usage)" : "no"),
      h("dt", {}, "Cost"), h("dd", {}, fmt.money(d.cost))),
    p ? table("Prices", ["Per million tokens", "Price", "From"], [
      ["Input", p.input_per_million ?? "—", src("input_per_million")],
      ["Output", p.output_per_million ?? "—", src("output_per_million")],
      ["Cached input", p.cached_input_per_million ?? "—", src("cached_input_per_million")],
      ["Cache write", p.cache_write_per_million ?? "—", src("cache_write_per_million")],
    ], { class: "numbers" }) : null);
}
