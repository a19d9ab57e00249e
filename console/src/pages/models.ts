// Models: the catalog as the signed-in key may use it (GET /v1/models, every page), with prices, context windows
// and abilities, where each value came from (the config, the known-model data, or a default), the aliases, and
// which keys may use each model (GET /v1/keys: a key's allowlist names its id or any alias, or the key has none).

import { api, must, type Schemas } from "../api.js";
import { h, table } from "../dom.js";
import * as fmt from "../format.js";
import { attempt, badge, type Ctx, problem, title } from "../ui.js";

type Model = Schemas["Model"];
type Source = Schemas["ValueSource"] | undefined;
const FROM: Record<string, string> = {
  config: "set by the configuration", catalog: "from the known-model data", default: "nobody says: a default",
};

export async function models(ctx: Ctx): Promise<Node> {
  const [all, keyList] = await Promise.all([
    attempt(ctx, "get", "/v1/models", catalog), attempt(ctx, "get", "/v1/keys", () => must(api.GET("/v1/keys"))),
  ]);
  if (all instanceof Error) return h("div", {}, title("Models"), problem(all));
  const shown = all.filter((m) => !m.alias_of);
  const live = keyList instanceof Error ? [] : keyList.data.filter((k) => !k.revoked_at);
  return h("div", {},
    title("Models"),
    h("p", { class: "lead" }, "The models the signed-in key may use. Each value says where it came from: ",
      badge("config", "src-config"), " the configuration, ", badge("catalog", "src-catalog"), " the known-model data, ",
      badge("default", "src-default"), " neither."),
    keyList instanceof Error ? problem(`Which keys may use each model is not shown: ${keyList.message}`) : null,
    table("Models", ["Model", "Aliases", "Context window", "Most output", "Price per million tokens", "Abilities",
      "Keys that may use it"], shown.map((m) => [
      h("span", {}, h("strong", {}, m.id), h("br"), h("span", { class: "hint" }, `${m.display_name} · ${m.owned_by}`)),
      m.aliases?.length ? m.aliases.join(", ") : "—",
      valued(fmt.num(m.context_window), m.sources?.context_window),
      valued(fmt.num(m.max_output_tokens), m.sources?.max_output_tokens),
      prices(m),
      abilities(m),
      keyList instanceof Error ? "—" : users(m, live),
    ]), { "data-table": "models" }));
}

async function catalog(): Promise<Model[]> {
  const out: Model[] = [];
  for (let after: string | undefined; ;) {
    const page = await must(api.GET("/v1/models", { params: { query: { limit: 1000, ...(after ? { after_id: after } : {}) } } }));
    out.push(...page.data);
    if (!page.has_more || !page.last_id) return out;
    after = page.last_id;
  }
}

function source(from: Source): HTMLElement | null {
  return from ? h("span", { class: `badge src-${from}`, title: FROM[from] ?? from }, from) : null;
}

function valued(text: string, from: Source): HTMLElement {
  return h("span", { class: "valued" }, text, " ", source(from));
}

function prices(m: Model): HTMLElement {
  const p = m.pricing;
  const s = m.sources;
  return h("dl", { class: "mini" },
    h("dt", {}, "input"), h("dd", {}, valued(p?.input_per_million ?? "—", s?.input_per_million)),
    h("dt", {}, "output"), h("dd", {}, valued(p?.output_per_million ?? "—", s?.output_per_million)),
    h("dt", {}, "cached input"), h("dd", {}, valued(p?.cached_input_per_million ?? "—", s?.cached_input_per_million)),
    h("dt", {}, "cache write"), h("dd", {}, valued(p?.cache_write_per_million ?? "—", s?.cache_write_per_million)));
}

function abilities(m: Model): HTMLElement {
  const c = m.capabilities;
  const s = m.sources;
  const yes = (v: boolean | null | undefined) => (v === null || v === undefined ? "unknown" : v ? "yes" : "no");
  return h("dl", { class: "mini" },
    h("dt", {}, "reasoning"), h("dd", {}, valued(yes(c?.reasoning), s?.reasoning)),
    h("dt", {}, "vision"), h("dd", {}, valued(yes(c?.vision), s?.vision)),
    h("dt", {}, "tool calling"), h("dd", {}, valued(yes(c?.tool_calling), s?.tool_calling)),
    h("dt", {}, "structured output"), h("dd", {}, valued(yes(c?.structured_output), s?.structured_output)));
}

/** The keys whose allowlist admits the model (its id or any alias), or that have none. */
function users(m: Model, keys: Schemas["Key"][]): string {
  const names = new Set([m.id, ...(m.aliases ?? [])]);
  const may = keys.filter((k) => k.models === null || k.models === undefined || k.models.some((n) => names.has(n)));
  if (may.length === keys.length && keys.length > 0) return "every key";
  return may.map((k) => k.name).join(", ") || "no key";
}
