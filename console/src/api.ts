// The console's only way to the gateway: the client generated from openapi.json (openapi-typescript's types,
// openapi-fetch's calls), with the signed-in key as the bearer. What a page may show is what these calls answer:
// the API enforces every scope and workspace, the console none.

import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";
import * as session from "./session.js";

export type Schemas = components["schemas"];
export type Spec = {
  paths: Record<string, Record<string, unknown>>;
  components: { schemas: Record<string, { enum?: string[]; properties?: Record<string, { enum?: string[] }> }> };
};

/** An error answer, in the API's one shape. */
export class Refusal extends Error {
  constructor(readonly status: number, readonly code: string, message: string) {
    super(message);
  }
}

let signedOut: () => void = () => {};

/** What happens when the API says the key no longer works (401): the console signs out. */
export function onSignedOut(handler: () => void): void {
  signedOut = handler;
}

export const api = createClient<paths, "application/json">({ baseUrl: location.origin });
api.use({
  onRequest({ request }) {
    const secret = session.key();
    if (secret) request.headers.set("Authorization", `Bearer ${secret}`);
    return request;
  },
});

type Answer<T> = { data?: T; error?: unknown; response: Response };

/** The answer's data, or a Refusal carrying the API's own message. */
export async function must<T>(call: Promise<Answer<T>>): Promise<T> {
  const { data, error, response } = await call;
  if (response.ok && data !== undefined) return data;
  throw refusal(response, error);
}

function refusal(response: Response, body: unknown): Refusal {
  const detail = (body as { error?: { code?: string; message?: string } } | undefined)?.error;
  const code = detail?.code ?? "unknown";
  if (response.status === 401) signedOut();
  return new Refusal(response.status, code, detail?.message ?? `The gateway answered ${response.status}.`);
}

/** An operation another build of the gateway may serve and this client's types do not know yet: it is called only
 * once the served spec names it, or its answer decides whether a panel shows. A 401 signs out, as everywhere. */
export async function untyped(method: "GET" | "POST", path: string): Promise<Answer<unknown>> {
  const secret = session.key();
  const response = await fetch(path, { method, headers: secret ? { Authorization: `Bearer ${secret}` } : {} });
  const json = response.headers.get("content-type")?.startsWith("application/json");
  const body: unknown = json ? await response.json() : undefined;
  if (response.status === 401) signedOut();
  return response.ok ? { data: body, response } : { error: body, response };
}

let served: Promise<Spec> | null = null;

/** The spec this gateway serves: what the console offers follows it (a Rotate button only where rotation exists). */
export function spec(): Promise<Spec> {
  served ??= fetch("/openapi.json").then((r) => r.json() as Promise<Spec>);
  return served;
}

export function serves(doc: Spec, method: string, path: string): boolean {
  return Boolean(doc.paths[path]?.[method]);
}

/** The scope the served spec says an operation needs (its x-scope), if it names one. */
export function scopeOf(doc: Spec, method: string, path: string): string | undefined {
  return (doc.paths[path]?.[method] as { "x-scope"?: string } | undefined)?.["x-scope"];
}
