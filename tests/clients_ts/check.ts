// A typed client generated from the served /openapi.json: openapi-typescript made schema.d.ts, openapi-fetch calls
// every operation with it. tsc type-checks this file (strict) and node runs it against a live Specway; run by
// tests/test_generated_clients.py::test_typescript_client, which asserts on the JSON this prints.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type ChatRequest = components["schemas"]["ChatCompletionRequest"];
type MessagesRequest = components["schemas"]["MessagesRequest"];
type Workspace = components["schemas"]["Workspace"];

declare const process: { env: Record<string, string | undefined>; exitCode: number };

const baseUrl = process.env.SPECWAY_URL ?? "http://127.0.0.1:8080";
// "application/json": the answers' types are the JSON ones (the inference operations also answer
// text/event-stream when the body says stream: true; those streams are read from `response.body` below).
const client = createClient<paths, "application/json">({
  baseUrl,
  headers: { Authorization: `Bearer ${process.env.SPECWAY_KEY}` },
});
const anonymous = createClient<paths>({ baseUrl });
const ECHO = "specway/echo";

function must<T>(data: T | undefined, what: string, error?: unknown): T {
  if (data === undefined) throw new Error(`${what} failed: ${JSON.stringify(error)}`);
  return data;
}

/** The `data:` payloads of a server-sent-event stream. With parseAs "stream" openapi-fetch hands the body over
 * untouched, but types `data` as the spec's SseEvent schema, so the stream is read from `response.body`. */
async function sseData(body: ReadableStream<Uint8Array> | undefined | null): Promise<string[]> {
  if (!body) throw new Error("no stream body");
  const text = await new Response(body).text();
  return text.split("\n").filter((line) => line.startsWith("data: ")).map((line) => line.slice(6));
}

function lastType(events: string[]): string {
  const last = JSON.parse(events[events.length - 1] ?? "{}") as { type?: string };
  return last.type ?? "";
}

async function main(): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};

  const health = await anonymous.GET("/healthz");
  out.healthz = must(health.data, "healthz", health.error).status;
  const ready = await anonymous.GET("/readyz");
  out.readyz = must(ready.data, "readyz", ready.error).status;

  // Inference, plain.
  const chatBody: ChatRequest = { model: ECHO, messages: [{ role: "user", content: "Say hello." }] };
  const chat = await client.POST("/v1/chat/completions", { body: chatBody });
  const completion = must(chat.data, "chat", chat.error);
  const decision = chat.response.headers.get("x-specway-decision-id") ?? "";
  out.chat = { object: completion.object, id: completion.id, decision, text: completion.choices[0]?.message?.content };

  const resp = await client.POST("/v1/responses", { body: { model: ECHO, input: "Say hello." } });
  const answer = must(resp.data, "responses", resp.error);
  out.response = { object: answer.object, id: answer.id, text: answer.output_text };

  const messageBody: MessagesRequest = { model: ECHO, max_tokens: 64, messages: [{ role: "user", content: "Say hello." }] };
  const msg = await client.POST("/v1/messages", {
    body: messageBody,
    params: { header: { "anthropic-version": "2023-06-01" } },
  });
  const message = must(msg.data, "messages", msg.error);
  out.message = { type: message.type, id: message.id };

  const count = await client.POST("/v1/messages/count_tokens", { body: messageBody });
  out.countTokens = must(count.data, "count_tokens", count.error).input_tokens;

  // Inference, streamed: parseAs "stream" gives the body as a ReadableStream of the server-sent events.
  const chatStream = await client.POST("/v1/chat/completions", { body: { ...chatBody, stream: true }, parseAs: "stream" });
  const respStream = await client.POST("/v1/responses", {
    body: { model: ECHO, input: "Say hello.", stream: true },
    parseAs: "stream",
  });
  const msgStream = await client.POST("/v1/messages", { body: { ...messageBody, stream: true }, parseAs: "stream" });
  const chatEvents = await sseData(chatStream.response.body);
  out.streams = {
    chat: chatEvents.slice(-1),
    responses: [lastType(await sseData(respStream.response.body))],
    messages: [lastType(await sseData(msgStream.response.body))],
  };

  // Catalog.
  const models = await client.GET("/v1/models");
  out.models = must(models.data, "models", models.error).data.map((m) => m.id);
  const model = await client.GET("/v1/models/{modelId}", { params: { path: { modelId: ECHO } } });
  out.model = must(model.data, "model", model.error).id;
  const me = await client.GET("/v1/key");
  out.keyScopes = must(me.data, "key", me.error).scopes;
  const explain = await client.GET("/v1/route/explain/{decisionId}", { params: { path: { decisionId: decision } } });
  const record = must(explain.data, "explain", explain.error);
  out.explain = { id: record.id, model: record.model };
  const missing = await client.GET("/v1/route/explain/{decisionId}", {
    params: { path: { decisionId: "0".repeat(32) } },
  });
  out.explainMissing = { status: missing.response.status, code: missing.error?.error.code };

  // Admin, end to end.
  const created = await client.POST("/v1/workspaces", { body: { name: "ts", credit: "1.5" } });
  const ws: Workspace = must(created.data, "create workspace", created.error);
  const path = { path: { workspaceId: ws.id } };
  const credited = await client.POST("/v1/workspaces/{workspaceId}/credit", { params: path, body: { amount: "2" } });
  const wsList = await client.GET("/v1/workspaces");
  const wsGot = await client.GET("/v1/workspaces/{workspaceId}", { params: path });
  const wsRenamed = await client.PATCH("/v1/workspaces/{workspaceId}", { params: path, body: { name: "ts2" } });

  const newKey = await client.POST("/v1/keys", {
    body: { name: "ts-key", workspace_id: ws.id, scopes: ["inference", "key:read"], models: [ECHO] },
  });
  const key = must(newKey.data, "create key", newKey.error);
  const keyPath = { path: { keyId: key.id } };
  const keyList = await client.GET("/v1/keys");
  const keyGot = await client.GET("/v1/keys/{keyId}", { params: keyPath });
  const keyRenamed = await client.PATCH("/v1/keys/{keyId}", { params: keyPath, body: { name: "ts-key2" } });
  const theirs = createClient<paths, "application/json">({ baseUrl, headers: { Authorization: `Bearer ${key.secret}` } });
  const used = await theirs.GET("/v1/key");
  const keyRevoked = await client.DELETE("/v1/keys/{keyId}", { params: keyPath });
  const refused = await theirs.GET("/v1/key");
  out.key = {
    secret: key.secret.startsWith("sk-sw-"),
    listed: must(keyList.data, "list keys", keyList.error).data.some((k) => k.id === key.id),
    got: must(keyGot.data, "get key", keyGot.error).name,
    renamed: must(keyRenamed.data, "update key", keyRenamed.error).name,
    used: must(used.data, "the new key", used.error).id === key.id,
    revoked: Boolean(must(keyRevoked.data, "revoke key", keyRevoked.error).revoked_at),
    refused: refused.response.status,
  };
  const wsRevoked = await client.DELETE("/v1/workspaces/{workspaceId}", { params: path });
  out.workspace = {
    created: ws.name,
    credit: Number(must(credited.data, "credit", credited.error).credit),
    listed: must(wsList.data, "list workspaces", wsList.error).data.some((w) => w.id === ws.id),
    got: must(wsGot.data, "get workspace", wsGot.error).name,
    renamed: must(wsRenamed.data, "update workspace", wsRenamed.error).name,
    revoked: must(wsRevoked.data, "revoke workspace", wsRevoked.error).id === ws.id,
  };

  const metrics = await anonymous.GET("/metrics", { parseAs: "text" });
  out.metrics = must(metrics.data, "metrics", metrics.error).includes("specway_requests_total");
  return out;
}

main().then(
  (out) => console.log(JSON.stringify(out)),
  (err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  },
);
