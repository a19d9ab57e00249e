// Keys and workspaces: the signed-in key itself (GET /v1/key), the workspaces with their credit (add credit: admin),
// and the keys (GET /v1/keys) with spend, budget, limits and last use; create (the secret shown once), edit, rotate
// (where the served spec has POST /v1/keys/{keyId}/rotate) and revoke.

import { api, must, Refusal, type Schemas, serves, untyped } from "../api.js";
import * as dialog from "../dialog.js";
import { field, h, section, table } from "../dom.js";
import * as fmt from "../format.js";
import { attempt, badge, type Ctx, mayTry, problem, title } from "../ui.js";

type Key = Schemas["Key"];
type Workspace = Schemas["Workspace"];
const ROTATE = "/v1/keys/{keyId}/rotate";
const MONEY = "^[0-9]{1,12}(\\.[0-9]{1,12})?$"; // the spec's Money

export async function keys(ctx: Ctx): Promise<Node> {
  const [workspaces, list] = await Promise.all([
    attempt(ctx, "get", "/v1/workspaces", () => must(api.GET("/v1/workspaces"))),
    attempt(ctx, "get", "/v1/keys", () => must(api.GET("/v1/keys"))),
  ]);
  const spaces = workspaces instanceof Error ? [] : workspaces.data;
  const create = mayTry(ctx.me, "workspace:admin") && !(list instanceof Error)
    ? h("button", { type: "button", onclick: () => keyDialog(ctx, spaces, null) }, "New key") : null;
  return h("div", {},
    title("Keys and workspaces", ...(create ? [create] : [])),
    ctx.me.key ? section("This key", self(ctx.me.key)) : null,
    section("Workspaces", workspaces instanceof Error ? problem(workspaces) : workspaceTable(ctx, workspaces.data)),
    section("Keys", list instanceof Error ? problem(list) : keyTable(ctx, list.data, spaces)),
  );
}

function self(key: Schemas["KeyInfo"]): HTMLElement {
  const lim = key.limits;
  return h("dl", { class: "facts", "data-facts": "self" },
    h("dt", {}, "Name"), h("dd", {}, key.name, " ", h("code", {}, key.id)),
    h("dt", {}, "Workspace"), h("dd", {}, `${key.workspace.name} — credit left ${fmt.money(key.workspace.credit)}`),
    h("dt", {}, "Scopes"), h("dd", {}, key.scopes.join(", ")),
    h("dt", {}, "Models"), h("dd", {}, key.models === null || key.models === undefined ? "every model" : key.models.join(", ") || "none"),
    h("dt", {}, "Budget"), h("dd", {}, lim.budget ? `${fmt.money(lim.budget)} (${lim.budget_period})` : "none"),
    h("dt", {}, "Spent"), h("dd", {}, `${fmt.money(key.spend.total)} in all, ${fmt.money(key.spend.period)} this period`),
    h("dt", {}, "Rate limits"), h("dd", {}, limits(lim)),
    h("dt", {}, "Last used"), h("dd", {}, fmt.time(key.last_used_at)));
}

function limits(lim: Schemas["KeyLimits"]): string {
  const parts = [lim.rpm ? `${fmt.num(lim.rpm)} requests/min` : "", lim.tpm ? `${fmt.num(lim.tpm)} tokens/min` : ""];
  return parts.filter(Boolean).join(", ") || "none";
}

function workspaceTable(ctx: Ctx, list: Workspace[]): HTMLElement {
  const credit = mayTry(ctx.me, "admin");
  return table("Workspaces", ["Workspace", "Credit left", "Held", "Spent in all", credit ? "Credit" : "Created"],
    list.map((w) => [h("span", {}, w.name, h("br"), h("code", {}, w.id)), fmt.money(w.credit), fmt.money(w.reserved),
      fmt.money(w.spend_total),
      credit ? h("button", { type: "button", class: "secondary", "aria-label": `Add credit to ${w.name}`,
        onclick: () => creditDialog(ctx, w) }, "Add credit") : fmt.time(w.created_at)]),
    { class: "numbers", "data-table": "workspaces" });
}

function state(key: Key): HTMLElement {
  if (key.revoked_at) return badge("revoked", "bad");
  if (key.expires_at && Date.parse(key.expires_at) <= Date.now()) return badge("expired", "warn");
  return badge("active", "good");
}

function keyTable(ctx: Ctx, list: Key[], spaces: Workspace[]): HTMLElement {
  if (list.length === 0) return h("p", {}, "No keys.");
  const rotates = serves(ctx.spec, "post", ROTATE);
  const mine = ctx.me.key?.id;
  const rows = list.map((k) => {
    const live = !k.revoked_at;
    const budget = k.limits.budget ? Number(k.limits.budget) : 0;
    const actions = live && k.id !== mine ? [
      h("button", { type: "button", class: "secondary", "aria-label": `Edit ${k.name}`, onclick: () => keyDialog(ctx, spaces, k) }, "Edit"),
      rotates ? h("button", { type: "button", class: "secondary", "aria-label": `Rotate ${k.name}`, onclick: () => rotateDialog(ctx, k) }, "Rotate") : null,
      h("button", { type: "button", class: "danger", "aria-label": `Revoke ${k.name}`, onclick: () => revokeDialog(ctx, k) }, "Revoke"),
    ] : [k.id === mine ? h("span", { class: "hint" }, "this key") : null];
    return [
      h("span", {}, h("strong", {}, k.name), h("br"), h("code", {}, k.id), " ", h("span", { class: "hint" }, k.hint)),
      spaces.find((w) => w.id === k.workspace_id)?.name ?? h("code", {}, k.workspace_id), state(k), k.scopes.join(", "),
      h("span", {}, `${fmt.money(k.spend.total)} in all`, h("br"), `${fmt.money(k.spend.period ?? "0")} this period`),
      k.limits.budget ? h("span", {}, `${fmt.money(k.limits.budget)} ${k.limits.budget_period}`, h("br"),
        h("meter", { min: 0, max: budget, value: Number(k.spend.period ?? 0), "aria-label": `Spent of ${k.name}'s budget` }))
        : "none",
      limits(k.limits), k.models === null || k.models === undefined ? "every model" : k.models.join(", ") || "none",
      fmt.time(k.last_used_at), h("span", { class: "row-actions" }, actions),
    ];
  });
  return table("Keys", ["Key", "Workspace", "State", "Scopes", "Spend", "Budget", "Limits", "Models", "Last used", "Actions"],
    rows, { "data-table": "keys" });
}

function input(attrs: Record<string, string | number | boolean | null | undefined>): HTMLInputElement {
  return h("input", attrs);
}

/** Create (key null) or edit a key. An edit sends only what changed: a key's own fields beyond its name are not the
 * API's to change, and an unchanged field is no change. */
function keyDialog(ctx: Ctx, spaces: Workspace[], key: Key | null): void {
  const all = ctx.spec.components.schemas.Scope?.enum ?? [];
  const name = input({ name: "name", required: true, maxlength: 200, value: key?.name ?? "" });
  const where = h("select", { name: "workspace_id" }, spaces.map((w) =>
    h("option", { value: w.id, selected: w.id === ctx.me.key?.workspace?.id }, `${w.name} (${w.id})`)));
  const held = key?.scopes ?? ["inference", "models:read", "key:read", "explain:read"];
  const boxes = all.map((s) => input({ type: "checkbox", name: "scopes", value: s, checked: held.includes(s) }));
  const scopes = h("fieldset", { class: "checks" }, h("legend", {}, "Scopes"),
    all.map((s, i) => h("label", {}, boxes[i], ` ${s}`)));
  const modelList = h("textarea", { name: "models", rows: 2 }, key?.models?.join("\n") ?? "");
  const policy = input({ name: "policy", value: key?.policy ?? "" });
  const budget = input({ name: "budget", inputmode: "decimal", pattern: MONEY, value: key?.limits.budget ?? "" });
  const period = h("select", { name: "budget_period" }, ["total", "daily", "monthly"].map((p) =>
    h("option", { value: p, selected: p === (key?.limits.budget_period ?? "total") }, p)));
  const rpm = input({ name: "rpm", type: "number", min: 1, step: 1, value: key?.limits.rpm ?? "" });
  const tpm = input({ name: "tpm", type: "number", min: 1, step: 1, value: key?.limits.tpm ?? "" });
  const expires = input({ name: "expires_at", type: "datetime-local", value: fmt.toLocalInput(key?.expires_at) });
  dialog.open(key ? `Edit ${key.name}` : "New key", (d) => dialog.form(d, [
    field("Name", name),
    key || spaces.length === 0 ? null : field("Workspace", where),
    scopes,
    field("Models", modelList, "One model id or alias a line; empty for every model."),
    field("Routing policy", policy, "Empty for the configuration's default policy."),
    h("div", { class: "row" }, field("Budget", budget, "Empty for none."), field("Budget period", period)),
    h("div", { class: "row" }, field("Requests per minute", rpm, "Empty for no limit."),
      field("Tokens per minute", tpm, "Empty for no limit.")),
    field("Expires", expires, "Empty for never."),
  ], key ? "Save" : "Create", async () => {
    const models = modelList.value.split("\n").map((m) => m.trim()).filter(Boolean);
    const wanted = {
      name: name.value.trim(),
      scopes: boxes.filter((b) => b.checked).map((b) => b.value) as Schemas["Scope"][],
      models: models.length ? models : null,
      policy: policy.value.trim() || null,
      expires_at: fmt.fromLocalInput(expires.value) ?? null,
      limits: { budget: budget.value.trim() || null, budget_period: period.value as "total" | "daily" | "monthly",
        rpm: rpm.value ? Number(rpm.value) : null, tpm: tpm.value ? Number(tpm.value) : null },
    };
    if (!key) {
      const made = await must(api.POST("/v1/keys", { body: { ...wanted, workspace_id: where.value || undefined } }));
      dialog.show(d, dialog.secret(d, made.secret, ctx.rerender));
      return;
    }
    const body = changed(key, wanted);
    if (Object.keys(body).length) {
      await must(api.PATCH("/v1/keys/{keyId}", { params: { path: { keyId: key.id } }, body }));
    }
    d.close();
    ctx.rerender();
  }));
}

type Wanted = {
  name: string; scopes: Schemas["Scope"][]; models: string[] | null; policy: string | null; expires_at: string | null;
  limits: Schemas["KeyLimitsInput"];
};

function changed(key: Key, wanted: Wanted): Schemas["KeyUpdate"] {
  const body: Schemas["KeyUpdate"] = {};
  const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
  if (wanted.name !== key.name) body.name = wanted.name;
  if (!same([...wanted.scopes].sort(), [...key.scopes].sort())) body.scopes = wanted.scopes;
  if (!same(wanted.models, key.models ?? null)) body.models = wanted.models;
  if (wanted.policy !== (key.policy ?? null)) body.policy = wanted.policy;
  const expiry = (at: string | null | undefined) => (at ? new Date(at).getTime() : null);
  if (expiry(wanted.expires_at) !== expiry(key.expires_at)) body.expires_at = wanted.expires_at;
  const lim = key.limits;
  const now = { budget: lim.budget ?? null, budget_period: lim.budget_period ?? "total", rpm: lim.rpm ?? null, tpm: lim.tpm ?? null };
  const budgetSame = wanted.limits.budget === now.budget || (wanted.limits.budget !== null && now.budget !== null &&
    Number(wanted.limits.budget) === Number(now.budget));
  if (!budgetSame || wanted.limits.budget_period !== now.budget_period || wanted.limits.rpm !== now.rpm ||
      wanted.limits.tpm !== now.tpm) body.limits = wanted.limits;
  return body;
}

function creditDialog(ctx: Ctx, w: Workspace): void {
  const amount = input({ name: "amount", required: true, inputmode: "decimal", pattern: MONEY });
  dialog.open(`Add credit to ${w.name}`, (d) => dialog.form(d, [
    h("p", {}, `Credit left: ${fmt.money(w.credit)}.`),
    field("Amount", amount, "An exact decimal, such as 10.00."),
  ], "Add credit", async () => {
    await must(api.POST("/v1/workspaces/{workspaceId}/credit", { params: { path: { workspaceId: w.id } },
      body: { amount: amount.value.trim() } }));
    d.close();
    ctx.rerender();
  }));
}

function revokeDialog(ctx: Ctx, k: Key): void {
  dialog.open(`Revoke ${k.name}?`, (d) => dialog.form(d, [
    h("p", {}, "The key stops working at once on this gateway process, and on the others within the key cache time " +
      "(server.key_cache_seconds). It stays listed, with its spend and history."),
  ], "Revoke", async () => {
    await must(api.DELETE("/v1/keys/{keyId}", { params: { path: { keyId: k.id } } }));
    d.close();
    ctx.rerender();
  }));
}

function rotateDialog(ctx: Ctx, k: Key): void {
  dialog.open(`Rotate ${k.name}?`, (d) => dialog.form(d, [
    h("p", {}, "A new secret replaces this key's; the key keeps its id, scopes, limits and history."),
  ], "Rotate", async () => {
    const answer = await untyped("POST", ROTATE.replace("{keyId}", encodeURIComponent(k.id)));
    const body = (answer.data ?? answer.error) as { secret?: string; error?: { code?: string; message?: string } };
    if (!answer.response.ok || !body.secret) {
      throw new Refusal(answer.response.status, body.error?.code ?? "unknown",
        body.error?.message ?? `The gateway answered ${answer.response.status}.`);
    }
    dialog.show(d, dialog.secret(d, body.secret, ctx.rerender));
  }));
}
