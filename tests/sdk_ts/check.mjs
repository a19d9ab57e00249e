// The official TypeScript SDKs against a running Specway: one create and one stream helper per API, a stream
// broken mid-way, a bad key and the model lists. Prints one JSON object; tests/test_sdk_typescript.py checks it.
// Usage: SPECWAY_URL=http://127.0.0.1:8080 SPECWAY_KEY=sk-sw-... node check.mjs
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const url = process.env.SPECWAY_URL;
const key = process.env.SPECWAY_KEY;
if (!url || !key) throw new Error("set SPECWAY_URL and SPECWAY_KEY");

const oa = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0, timeout: 10_000 });
const an = new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0, timeout: 10_000 });
// The older style: x-api-key only (null removes the Authorization header the SDK would add).
const xKeySent = [];
const anXKey = new Anthropic({
  baseURL: url, apiKey: "sk-never-sent", maxRetries: 0, timeout: 10_000,
  defaultHeaders: { Authorization: null, "x-api-key": key },
  fetch: (input, init) => {
    const headers = new Headers(init?.headers);
    xKeySent.push({ authorization: headers.has("authorization"), xApiKey: headers.get("x-api-key") === key });
    return fetch(input, init);
  },
});
const user = [{ role: "user", content: "Say hello." }];

const chatUsage = (u) => ({
  input: u.prompt_tokens, output: u.completion_tokens, total: u.total_tokens,
  cached: u.prompt_tokens_details?.cached_tokens ?? null,
});
const responsesUsage = (u) => ({
  input: u.input_tokens, output: u.output_tokens, total: u.total_tokens,
  cached: u.input_tokens_details?.cached_tokens ?? null,
});
const messagesUsage = (u) => ({
  input: u.input_tokens, output: u.output_tokens, cached: u.cache_read_input_tokens ?? null,
});
const messageText = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

const out = {};

const chat = await oa.chat.completions.create({ model: "acme/oa", messages: user, max_tokens: 50 });
out.chat = { id: chat.id, model: chat.model, text: chat.choices[0].message.content, usage: chatUsage(chat.usage) };

{
  let deltas = "";
  const s = oa.chat.completions.stream({
    model: "acme/an", messages: user, max_tokens: 50, stream_options: { include_usage: true },
  });
  s.on("content", (delta) => { deltas += delta; });
  const done = await s.finalChatCompletion();
  out.chatStream = {
    id: done.id, model: done.model, text: done.choices[0].message.content, usage: chatUsage(done.usage), deltas,
  };
}

const resp = await oa.responses.create({ model: "acme/an", input: "Say hello.", max_output_tokens: 50 });
out.responses = { id: resp.id, model: resp.model, text: resp.output_text, usage: responsesUsage(resp.usage) };

{
  let deltas = "";
  const s = oa.responses.stream({ model: "acme/oa", input: "Say hello.", max_output_tokens: 50 });
  s.on("response.output_text.delta", (e) => { deltas += e.delta; });
  const done = await s.finalResponse();
  out.responsesStream = {
    id: done.id, model: done.model, text: done.output_text, usage: responsesUsage(done.usage), deltas,
  };
}

const msg = await an.messages.create({ model: "acme/oa", max_tokens: 50, messages: user });
out.messages = { id: msg.id, model: msg.model, text: messageText(msg), usage: messagesUsage(msg.usage) };

{
  let deltas = "";
  const s = anXKey.messages.stream({ model: "acme/an", max_tokens: 50, messages: user });
  s.on("text", (text) => { deltas += text; });
  const done = await s.finalMessage();
  out.messagesStream = { id: done.id, model: done.model, text: messageText(done), usage: messagesUsage(done.usage), deltas };
}

// A stream the upstream breaks mid-way must reject, not resolve to a short answer.
try {
  const s = oa.chat.completions.stream({ model: "acme/oa", messages: user });
  const done = await s.finalChatCompletion();
  out.chatBroken = `resolved: ${JSON.stringify(done.choices[0].message.content)}`;
} catch (err) {
  out.chatBroken = `${err.constructor.name}: ${err.message}`;
}
try {
  const s = an.messages.stream({ model: "acme/an", max_tokens: 50, messages: user });
  const done = await s.finalMessage();
  out.messagesBroken = `resolved: ${JSON.stringify(messageText(done))}`;
} catch (err) {
  out.messagesBroken = `${err.constructor.name}: ${err.message}`;
}

try {
  const bad = new OpenAI({ baseURL: `${url}/v1`, apiKey: "sk-sw-not-a-real-key", maxRetries: 0 });
  await bad.models.list();
  out.badKey = 200;
} catch (err) {
  out.badKey = err.status ?? `${err.constructor.name}: ${err.message}`;
}

out.openaiModels = [];
for await (const m of oa.models.list()) out.openaiModels.push(m.id);
out.anthropicModels = [];
for await (const m of anXKey.models.list()) {
  out.anthropicModels.push(m.id);
  if (out.anthropicModels.length > 50) break; // has_more ignored: the SDK would page forever
}

out.xKeySent = xKeySent;

process.stdout.write(JSON.stringify(out));
