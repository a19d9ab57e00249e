// Built by `make console` from console/src -- do not edit (tests/test_console_build.py checks it).
// Bundles openapi-fetch 0.17.0:
// MIT License
//
// Copyright (c) 2023 Drew Powers
//
// Permission is hereby granted, free of charge, to any person obtaining a copy
// of this software and associated documentation files (the "Software"), to deal
// in the Software without restriction, including without limitation the rights
// to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
// copies of the Software, and to permit persons to whom the Software is
// furnished to do so, subject to the following conditions:
//
// The above copyright notice and this permission notice shall be included in all
// copies or substantial portions of the Software.
//
// THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
// IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
// FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
// AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
// LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
// OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
// SOFTWARE.

// node_modules/openapi-fetch/dist/index.mjs
var PATH_PARAM_RE = /\{[^{}]+\}/g;
var supportsRequestInitExt = () => {
  return typeof process === "object" && Number.parseInt(process?.versions?.node?.substring(0, 2)) >= 18 && process.versions.undici;
};
function randomID() {
  return Math.random().toString(36).slice(2, 11);
}
function createClient(clientOptions) {
  let {
    baseUrl = "",
    Request: CustomRequest = globalThis.Request,
    fetch: baseFetch = globalThis.fetch,
    querySerializer: globalQuerySerializer,
    bodySerializer: globalBodySerializer,
    pathSerializer: globalPathSerializer,
    headers: baseHeaders,
    requestInitExt = void 0,
    ...baseOptions
  } = { ...clientOptions };
  requestInitExt = supportsRequestInitExt() ? requestInitExt : void 0;
  baseUrl = removeTrailingSlash(baseUrl);
  const globalMiddlewares = [];
  async function coreFetch(schemaPath, fetchOptions) {
    const {
      baseUrl: localBaseUrl,
      fetch: fetch2 = baseFetch,
      Request = CustomRequest,
      headers,
      params = {},
      parseAs = "json",
      querySerializer: requestQuerySerializer,
      bodySerializer = globalBodySerializer ?? defaultBodySerializer,
      pathSerializer: requestPathSerializer,
      body,
      middleware: requestMiddlewares = [],
      ...init
    } = fetchOptions || {};
    let finalBaseUrl = baseUrl;
    if (localBaseUrl) {
      finalBaseUrl = removeTrailingSlash(localBaseUrl) ?? baseUrl;
    }
    let querySerializer = typeof globalQuerySerializer === "function" ? globalQuerySerializer : createQuerySerializer(globalQuerySerializer);
    if (requestQuerySerializer) {
      querySerializer = typeof requestQuerySerializer === "function" ? requestQuerySerializer : createQuerySerializer({
        ...typeof globalQuerySerializer === "object" ? globalQuerySerializer : {},
        ...requestQuerySerializer
      });
    }
    const pathSerializer = requestPathSerializer || globalPathSerializer || defaultPathSerializer;
    const serializedBody = body === void 0 ? void 0 : bodySerializer(
      body,
      // Note: we declare mergeHeaders() both here and below because it’s a bit of a chicken-or-egg situation:
      // bodySerializer() needs all headers so we aren’t dropping ones set by the user, however,
      // the result of this ALSO sets the lowest-priority content-type header. So we re-merge below,
      // setting the content-type at the very beginning to be overwritten.
      // Lastly, based on the way headers work, it’s not a simple “present-or-not” check becauase null intentionally un-sets headers.
      mergeHeaders(baseHeaders, headers, params.header)
    );
    const finalHeaders = mergeHeaders(
      // with no body, we should not to set Content-Type
      serializedBody === void 0 || // if serialized body is FormData; browser will correctly set Content-Type & boundary expression
      serializedBody instanceof FormData ? {} : {
        "Content-Type": "application/json"
      },
      baseHeaders,
      headers,
      params.header
    );
    const finalMiddlewares = [...globalMiddlewares, ...requestMiddlewares];
    const requestInit = {
      redirect: "follow",
      ...baseOptions,
      ...init,
      body: serializedBody,
      headers: finalHeaders
    };
    let id;
    let options;
    let request2 = new Request(
      createFinalURL(schemaPath, { baseUrl: finalBaseUrl, params, querySerializer, pathSerializer }),
      requestInit
    );
    let response;
    for (const key2 in init) {
      if (!(key2 in request2)) {
        request2[key2] = init[key2];
      }
    }
    if (finalMiddlewares.length) {
      id = randomID();
      options = Object.freeze({
        baseUrl: finalBaseUrl,
        fetch: fetch2,
        parseAs,
        querySerializer,
        bodySerializer,
        pathSerializer
      });
      for (const m of finalMiddlewares) {
        if (m && typeof m === "object" && typeof m.onRequest === "function") {
          const result = await m.onRequest({
            request: request2,
            schemaPath,
            params,
            options,
            id
          });
          if (result) {
            if (result instanceof Request) {
              request2 = result;
            } else if (result instanceof Response) {
              response = result;
              break;
            } else {
              throw new Error("onRequest: must return new Request() or Response() when modifying the request");
            }
          }
        }
      }
    }
    if (!response) {
      try {
        response = await fetch2(request2, requestInitExt);
      } catch (error2) {
        let errorAfterMiddleware = error2;
        if (finalMiddlewares.length) {
          for (let i = finalMiddlewares.length - 1; i >= 0; i--) {
            const m = finalMiddlewares[i];
            if (m && typeof m === "object" && typeof m.onError === "function") {
              const result = await m.onError({
                request: request2,
                error: errorAfterMiddleware,
                schemaPath,
                params,
                options,
                id
              });
              if (result) {
                if (result instanceof Response) {
                  errorAfterMiddleware = void 0;
                  response = result;
                  break;
                }
                if (result instanceof Error) {
                  errorAfterMiddleware = result;
                  continue;
                }
                throw new Error("onError: must return new Response() or instance of Error");
              }
            }
          }
        }
        if (errorAfterMiddleware) {
          throw errorAfterMiddleware;
        }
      }
      if (finalMiddlewares.length) {
        for (let i = finalMiddlewares.length - 1; i >= 0; i--) {
          const m = finalMiddlewares[i];
          if (m && typeof m === "object" && typeof m.onResponse === "function") {
            const result = await m.onResponse({
              request: request2,
              response,
              schemaPath,
              params,
              options,
              id
            });
            if (result) {
              if (!(result instanceof Response)) {
                throw new Error("onResponse: must return new Response() when modifying the response");
              }
              response = result;
            }
          }
        }
      }
    }
    const contentLength = response.headers.get("Content-Length");
    if (response.status === 204 || request2.method === "HEAD" || contentLength === "0" && !response.headers.get("Transfer-Encoding")?.includes("chunked")) {
      return response.ok ? { data: void 0, response } : { error: void 0, response };
    }
    if (response.ok) {
      const getResponseData = async () => {
        if (parseAs === "stream") {
          return response.body;
        }
        if (parseAs === "json" && !contentLength) {
          const raw = await response.text();
          return raw ? JSON.parse(raw) : void 0;
        }
        return await response[parseAs]();
      };
      return { data: await getResponseData(), response };
    }
    let error = await response.text();
    try {
      error = JSON.parse(error);
    } catch {
    }
    return { error, response };
  }
  return {
    request(method, url, init) {
      return coreFetch(url, { ...init, method: method.toUpperCase() });
    },
    /** Call a GET endpoint */
    GET(url, init) {
      return coreFetch(url, { ...init, method: "GET" });
    },
    /** Call a PUT endpoint */
    PUT(url, init) {
      return coreFetch(url, { ...init, method: "PUT" });
    },
    /** Call a POST endpoint */
    POST(url, init) {
      return coreFetch(url, { ...init, method: "POST" });
    },
    /** Call a DELETE endpoint */
    DELETE(url, init) {
      return coreFetch(url, { ...init, method: "DELETE" });
    },
    /** Call a OPTIONS endpoint */
    OPTIONS(url, init) {
      return coreFetch(url, { ...init, method: "OPTIONS" });
    },
    /** Call a HEAD endpoint */
    HEAD(url, init) {
      return coreFetch(url, { ...init, method: "HEAD" });
    },
    /** Call a PATCH endpoint */
    PATCH(url, init) {
      return coreFetch(url, { ...init, method: "PATCH" });
    },
    /** Call a TRACE endpoint */
    TRACE(url, init) {
      return coreFetch(url, { ...init, method: "TRACE" });
    },
    /** Register middleware */
    use(...middleware) {
      for (const m of middleware) {
        if (!m) {
          continue;
        }
        if (typeof m !== "object" || !("onRequest" in m || "onResponse" in m || "onError" in m)) {
          throw new Error("Middleware must be an object with one of `onRequest()`, `onResponse() or `onError()`");
        }
        globalMiddlewares.push(m);
      }
    },
    /** Unregister middleware */
    eject(...middleware) {
      for (const m of middleware) {
        const i = globalMiddlewares.indexOf(m);
        if (i !== -1) {
          globalMiddlewares.splice(i, 1);
        }
      }
    }
  };
}
function serializePrimitiveParam(name, value, options) {
  if (value === void 0 || value === null) {
    return "";
  }
  if (typeof value === "object") {
    throw new Error(
      "Deeply-nested arrays/objects aren’t supported. Provide your own `querySerializer()` to handle these."
    );
  }
  return `${name}=${options?.allowReserved === true ? value : encodeURIComponent(value)}`;
}
function serializeObjectParam(name, value, options) {
  if (!value || typeof value !== "object") {
    return "";
  }
  const values = [];
  const joiner = {
    simple: ",",
    label: ".",
    matrix: ";"
  }[options.style] || "&";
  if (options.style !== "deepObject" && options.explode === false) {
    for (const k in value) {
      values.push(k, options.allowReserved === true ? value[k] : encodeURIComponent(value[k]));
    }
    const final2 = values.join(",");
    switch (options.style) {
      case "form": {
        return `${name}=${final2}`;
      }
      case "label": {
        return `.${final2}`;
      }
      case "matrix": {
        return `;${name}=${final2}`;
      }
      default: {
        return final2;
      }
    }
  }
  for (const k in value) {
    const finalName = options.style === "deepObject" ? `${name}[${k}]` : k;
    values.push(serializePrimitiveParam(finalName, value[k], options));
  }
  const final = values.join(joiner);
  return options.style === "label" || options.style === "matrix" ? `${joiner}${final}` : final;
}
function serializeArrayParam(name, value, options) {
  if (!Array.isArray(value)) {
    return "";
  }
  if (options.explode === false) {
    const joiner2 = { form: ",", spaceDelimited: "%20", pipeDelimited: "|" }[options.style] || ",";
    const final = (options.allowReserved === true ? value : value.map((v) => encodeURIComponent(v))).join(joiner2);
    switch (options.style) {
      case "simple": {
        return final;
      }
      case "label": {
        return `.${final}`;
      }
      case "matrix": {
        return `;${name}=${final}`;
      }
      // case "spaceDelimited":
      // case "pipeDelimited":
      default: {
        return `${name}=${final}`;
      }
    }
  }
  const joiner = { simple: ",", label: ".", matrix: ";" }[options.style] || "&";
  const values = [];
  for (const v of value) {
    if (options.style === "simple" || options.style === "label") {
      values.push(options.allowReserved === true ? v : encodeURIComponent(v));
    } else {
      values.push(serializePrimitiveParam(name, v, options));
    }
  }
  return options.style === "label" || options.style === "matrix" ? `${joiner}${values.join(joiner)}` : values.join(joiner);
}
function createQuerySerializer(options) {
  return function querySerializer(queryParams) {
    const search = [];
    if (queryParams && typeof queryParams === "object") {
      for (const name in queryParams) {
        const value = queryParams[name];
        if (value === void 0 || value === null) {
          continue;
        }
        if (Array.isArray(value)) {
          if (value.length === 0) {
            continue;
          }
          search.push(
            serializeArrayParam(name, value, {
              style: "form",
              explode: true,
              ...options?.array,
              allowReserved: options?.allowReserved || false
            })
          );
          continue;
        }
        if (typeof value === "object") {
          search.push(
            serializeObjectParam(name, value, {
              style: "deepObject",
              explode: true,
              ...options?.object,
              allowReserved: options?.allowReserved || false
            })
          );
          continue;
        }
        search.push(serializePrimitiveParam(name, value, options));
      }
    }
    return search.join("&");
  };
}
function defaultPathSerializer(pathname, pathParams) {
  let nextURL = pathname;
  for (const match of pathname.match(PATH_PARAM_RE) ?? []) {
    let name = match.substring(1, match.length - 1);
    let explode = false;
    let style = "simple";
    if (name.endsWith("*")) {
      explode = true;
      name = name.substring(0, name.length - 1);
    }
    if (name.startsWith(".")) {
      style = "label";
      name = name.substring(1);
    } else if (name.startsWith(";")) {
      style = "matrix";
      name = name.substring(1);
    }
    if (!pathParams || pathParams[name] === void 0 || pathParams[name] === null) {
      continue;
    }
    const value = pathParams[name];
    if (Array.isArray(value)) {
      nextURL = nextURL.replace(match, serializeArrayParam(name, value, { style, explode }));
      continue;
    }
    if (typeof value === "object") {
      nextURL = nextURL.replace(match, serializeObjectParam(name, value, { style, explode }));
      continue;
    }
    if (style === "matrix") {
      nextURL = nextURL.replace(match, `;${serializePrimitiveParam(name, value)}`);
      continue;
    }
    nextURL = nextURL.replace(match, style === "label" ? `.${encodeURIComponent(value)}` : encodeURIComponent(value));
  }
  return nextURL;
}
function defaultBodySerializer(body, headers) {
  if (body instanceof FormData) {
    return body;
  }
  if (headers) {
    const contentType = headers.get instanceof Function ? headers.get("Content-Type") ?? headers.get("content-type") : headers["Content-Type"] ?? headers["content-type"];
    if (contentType === "application/x-www-form-urlencoded") {
      return new URLSearchParams(body).toString();
    }
  }
  return JSON.stringify(body);
}
function createFinalURL(pathname, options) {
  let finalURL = `${options.baseUrl}${pathname}`;
  if (options.params?.path) {
    finalURL = options.pathSerializer(finalURL, options.params.path);
  }
  let search = options.querySerializer(options.params.query ?? {});
  if (search.startsWith("?")) {
    search = search.substring(1);
  }
  if (search) {
    finalURL += `?${search}`;
  }
  return finalURL;
}
function mergeHeaders(...allHeaders) {
  const finalHeaders = new Headers();
  for (const h2 of allHeaders) {
    if (!h2 || typeof h2 !== "object") {
      continue;
    }
    const iterator = h2 instanceof Headers ? h2.entries() : Object.entries(h2);
    for (const [k, v] of iterator) {
      if (v === null) {
        finalHeaders.delete(k);
      } else if (Array.isArray(v)) {
        for (const v2 of v) {
          finalHeaders.append(k, v2);
        }
      } else if (v !== void 0) {
        finalHeaders.set(k, v);
      }
    }
  }
  return finalHeaders;
}
function removeTrailingSlash(url) {
  if (url.endsWith("/")) {
    return url.substring(0, url.length - 1);
  }
  return url;
}

// src/session.ts
var SLOT = "specway.console.key";
function key() {
  return sessionStorage.getItem(SLOT);
}
function remember(secret2) {
  sessionStorage.setItem(SLOT, secret2);
}
function forget() {
  sessionStorage.removeItem(SLOT);
}

// src/api.ts
var Refusal = class extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  status;
  code;
};
var signedOut = () => {
};
function onSignedOut(handler) {
  signedOut = handler;
}
var api = createClient({ baseUrl: location.origin });
api.use({
  onRequest({ request: request2 }) {
    const secret2 = key();
    if (secret2) request2.headers.set("Authorization", `Bearer ${secret2}`);
    return request2;
  }
});
async function must(call) {
  const { data, error, response } = await call;
  if (response.ok && data !== void 0) return data;
  throw refusal(response, error);
}
function refusal(response, body) {
  const detail = body?.error;
  const code = detail?.code ?? "unknown";
  if (response.status === 401) signedOut();
  return new Refusal(response.status, code, detail?.message ?? `The gateway answered ${response.status}.`);
}
async function untyped(method, path) {
  const secret2 = key();
  const response = await fetch(path, { method, headers: secret2 ? { Authorization: `Bearer ${secret2}` } : {} });
  const json = response.headers.get("content-type")?.startsWith("application/json");
  const body = json ? await response.json() : void 0;
  if (response.status === 401) signedOut();
  return response.ok ? { data: body, response } : { error: body, response };
}
var served = null;
function spec() {
  served ??= fetch("/openapi.json").then((r) => r.json());
  return served;
}
function serves(doc, method, path) {
  return Boolean(doc.paths[path]?.[method]);
}
function scopeOf(doc, method, path) {
  return doc.paths[path]?.[method]?.["x-scope"];
}

// src/dom.ts
function fill(el, attrs, children) {
  for (const [name, value] of Object.entries(attrs)) {
    if (typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else if (value !== false && value !== null && value !== void 0) el.setAttribute(name, String(value));
  }
  append(el, children);
}
function append(el, children) {
  for (const child of children) {
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else if (child !== null && child !== void 0 && child !== false) el.appendChild(document.createTextNode(String(child)));
  }
}
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  fill(el, attrs, children);
  return el;
}
function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  fill(el, attrs, children);
  return el;
}
function table(caption, head, rows, attrs = {}) {
  const wrap = h("div", { class: "table-wrap", tabindex: 0, role: "region", "aria-label": caption });
  wrap.appendChild(
    h(
      "table",
      attrs,
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, head.map((cell2) => h("th", { scope: "col" }, cell2)))),
      h("tbody", {}, rows.map((row) => h("tr", {}, row.map((cell2) => h("td", {}, cell2)))))
    )
  );
  return wrap;
}
var fields = 0;
function field(label, control, hint) {
  const id = control.id || `field-${++fields}`;
  control.id = id;
  const hintId = hint ? `${id}-hint` : void 0;
  if (hintId) control.setAttribute("aria-describedby", hintId);
  return h("div", { class: "field" }, h("label", { for: id }, label), control, hint ? h("p", { class: "hint", id: hintId }, hint) : null);
}
function section(title2, ...children) {
  return h("section", { class: "panel" }, h("h2", {}, title2), ...children);
}

// src/dialog.ts
var opened = 0;
function open(title2, content) {
  const opener = document.activeElement;
  const body = h("div", { class: "dialog-body" });
  const heading = h("h2", { id: `dialog-${++opened}` }, title2);
  const el = h("dialog", { "aria-labelledby": heading.id }, heading, body);
  const d = { el, body, close: () => el.close() };
  el.addEventListener("close", () => {
    el.remove();
    opener?.focus();
  });
  append(body, [content(d)]);
  document.body.appendChild(el);
  el.showModal();
  el.querySelector("input, select, textarea, button")?.focus();
  return d;
}
function show(d, content) {
  d.body.replaceChildren();
  append(d.body, [content]);
  d.body.querySelector("input, button")?.focus();
}
function form(d, fields2, action, submit) {
  const status = h("p", { class: "alert", role: "alert", hidden: true });
  const button = h("button", { type: "submit" }, action);
  const f = h(
    "form",
    { novalidate: true },
    fields2,
    status,
    h("div", { class: "actions" }, button, h("button", { type: "button", class: "secondary", onclick: d.close }, "Cancel"))
  );
  f.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!f.reportValidity()) return;
    button.disabled = true;
    submit().catch((err) => {
      status.hidden = false;
      status.textContent = err instanceof Error ? err.message : String(err);
    }).finally(() => {
      button.disabled = false;
    });
  });
  return f;
}
function secret(d, value, done) {
  d.el.addEventListener("close", done, { once: true });
  const input2 = h("input", {
    type: "text",
    readonly: true,
    value,
    class: "mono",
    "aria-label": "The new secret",
    "data-secret": ""
  });
  const said = h("p", { class: "hint", "aria-live": "polite" });
  const copy = h("button", { type: "button", onclick: () => {
    input2.select();
    const copied = navigator.clipboard?.writeText(value) ?? Promise.reject(new Error("no clipboard"));
    copied.then(() => {
      said.textContent = "Copied.";
    }).catch(() => {
      said.textContent = "Select the secret and copy it by hand (this page has no clipboard access).";
    });
  } }, "Copy");
  return [
    h("p", {}, "Copy the secret now: it is shown only this once, and the gateway keeps only its hash."),
    h("div", { class: "secret" }, input2, copy),
    said,
    h("div", { class: "actions" }, h("button", { type: "button", onclick: d.close }, "Done"))
  ];
}

// src/decimal.ts
function parts(text) {
  const [mantissa = "0", exponent = "0"] = text.toUpperCase().split("E");
  const negative = mantissa.startsWith("-");
  const [whole = "0", fraction = ""] = (negative ? mantissa.slice(1) : mantissa).split(".");
  let scaled = BigInt(`${whole}${fraction}` || "0");
  let scale = fraction.length - Number(exponent);
  if (scale < 0) {
    scaled *= 10n ** BigInt(-scale);
    scale = 0;
  }
  return [negative ? -scaled : scaled, scale];
}
function add(a, b) {
  const [x, xs] = parts(a);
  const [y, ys] = parts(b);
  const scale = Math.max(xs, ys, 2);
  const sum2 = x * 10n ** BigInt(scale - xs) + y * 10n ** BigInt(scale - ys);
  const digits = (sum2 < 0n ? -sum2 : sum2).toString().padStart(scale + 1, "0");
  const text = `${digits.slice(0, -scale)}.${digits.slice(-scale)}`;
  return `${sum2 < 0n ? "-" : ""}${text.replace(/(\.\d\d\d*?)0+$/, "$1")}`;
}
function sum(values) {
  return values.reduce(add, "0");
}

// src/format.ts
var when = new Intl.DateTimeFormat(void 0, { dateStyle: "medium", timeStyle: "medium" });
var count = new Intl.NumberFormat();
function time(iso) {
  if (!iso) return "—";
  const at = new Date(iso);
  return Number.isNaN(at.getTime()) ? iso : when.format(at);
}
function num(value) {
  return value === null || value === void 0 ? "—" : count.format(value);
}
function ms(value) {
  return value === null || value === void 0 ? "—" : `${count.format(Math.round(value * 10) / 10)} ms`;
}
function money(value) {
  return value === null || value === void 0 || value === "" ? "—" : add("0", value);
}
function fromLocalInput(value) {
  if (!value) return void 0;
  const at = new Date(value);
  return Number.isNaN(at.getTime()) ? void 0 : at.toISOString();
}
function toLocalInput(iso) {
  if (!iso) return "";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return "";
  const local = new Date(at.getTime() - at.getTimezoneOffset() * 6e4);
  return local.toISOString().slice(0, 16);
}

// src/ui.ts
function mayTry(me2, scope) {
  return me2.scopes === null || me2.scopes.includes(scope) || scope === "workspace:admin" && me2.scopes.includes("admin");
}
async function attempt(ctx, method, path, call) {
  if (!serves(ctx.spec, method, path)) return new Error(`This gateway does not serve ${method.toUpperCase()} ${path}.`);
  const scope = scopeOf(ctx.spec, method, path);
  if (scope && !mayTry(ctx.me, scope)) {
    const also = scope === "workspace:admin" ? " ('admin' also grants it)" : "";
    return new Error(`This key lacks the '${scope}' scope needed here${also}.`);
  }
  return settle(call());
}
function problem(err) {
  return h("p", { class: "alert", role: "alert" }, err instanceof Error ? err.message : String(err));
}
function badge(text, kind) {
  return h("span", { class: `badge ${kind}` }, text);
}
function outcomeBadge(outcome) {
  return badge(outcome, outcome === "ok" ? "good" : outcome === "cancelled" ? "warn" : "bad");
}
function title(text, ...extra) {
  return h("div", { class: "page-head" }, h("h1", { tabindex: -1 }, text), ...extra);
}
async function settle(call) {
  try {
    return await call;
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
}

// src/pages/keys.ts
var ROTATE = "/v1/keys/{keyId}/rotate";
var MONEY = "^[0-9]{1,12}(\\.[0-9]{1,12})?$";
async function keys(ctx) {
  const [workspaces, list] = await Promise.all([
    attempt(ctx, "get", "/v1/workspaces", () => must(api.GET("/v1/workspaces"))),
    attempt(ctx, "get", "/v1/keys", () => must(api.GET("/v1/keys")))
  ]);
  const spaces = workspaces instanceof Error ? [] : workspaces.data;
  const create = mayTry(ctx.me, "workspace:admin") && !(list instanceof Error) ? h("button", { type: "button", onclick: () => keyDialog(ctx, spaces, null) }, "New key") : null;
  return h(
    "div",
    {},
    title("Keys and workspaces", ...create ? [create] : []),
    ctx.me.key ? section("This key", self(ctx.me.key)) : null,
    section("Workspaces", workspaces instanceof Error ? problem(workspaces) : workspaceTable(ctx, workspaces.data)),
    section("Keys", list instanceof Error ? problem(list) : keyTable(ctx, list.data, spaces))
  );
}
function self(key2) {
  const lim = key2.limits;
  return h(
    "dl",
    { class: "facts", "data-facts": "self" },
    h("dt", {}, "Name"),
    h("dd", {}, key2.name, " ", h("code", {}, key2.id)),
    h("dt", {}, "Workspace"),
    h("dd", {}, `${key2.workspace.name} — credit left ${money(key2.workspace.credit)}`),
    h("dt", {}, "Scopes"),
    h("dd", {}, key2.scopes.join(", ")),
    h("dt", {}, "Models"),
    h("dd", {}, key2.models === null || key2.models === void 0 ? "every model" : key2.models.join(", ") || "none"),
    h("dt", {}, "Budget"),
    h("dd", {}, lim.budget ? `${money(lim.budget)} (${lim.budget_period})` : "none"),
    h("dt", {}, "Spent"),
    h("dd", {}, `${money(key2.spend.total)} in all, ${money(key2.spend.period)} this period`),
    h("dt", {}, "Rate limits"),
    h("dd", {}, limits(lim)),
    h("dt", {}, "Last used"),
    h("dd", {}, time(key2.last_used_at))
  );
}
function limits(lim) {
  const parts2 = [lim.rpm ? `${num(lim.rpm)} requests/min` : "", lim.tpm ? `${num(lim.tpm)} tokens/min` : ""];
  return parts2.filter(Boolean).join(", ") || "none";
}
function workspaceTable(ctx, list) {
  const credit = mayTry(ctx.me, "admin");
  return table(
    "Workspaces",
    ["Workspace", "Credit left", "Held", "Spent in all", credit ? "Credit" : "Created"],
    list.map((w) => [
      h("span", {}, w.name, h("br"), h("code", {}, w.id)),
      money(w.credit),
      money(w.reserved),
      money(w.spend_total),
      credit ? h("button", {
        type: "button",
        class: "secondary",
        "aria-label": `Add credit to ${w.name}`,
        onclick: () => creditDialog(ctx, w)
      }, "Add credit") : time(w.created_at)
    ]),
    { class: "numbers", "data-table": "workspaces" }
  );
}
function state(key2) {
  if (key2.revoked_at) return badge("revoked", "bad");
  if (key2.expires_at && Date.parse(key2.expires_at) <= Date.now()) return badge("expired", "warn");
  return badge("active", "good");
}
function keyTable(ctx, list, spaces) {
  if (list.length === 0) return h("p", {}, "No keys.");
  const rotates = serves(ctx.spec, "post", ROTATE);
  const mine = ctx.me.key?.id;
  const rows = list.map((k) => {
    const live = !k.revoked_at;
    const budget = k.limits.budget ? Number(k.limits.budget) : 0;
    const actions = live && k.id !== mine ? [
      h("button", { type: "button", class: "secondary", "aria-label": `Edit ${k.name}`, onclick: () => keyDialog(ctx, spaces, k) }, "Edit"),
      rotates ? h("button", { type: "button", class: "secondary", "aria-label": `Rotate ${k.name}`, onclick: () => rotateDialog(ctx, k) }, "Rotate") : null,
      h("button", { type: "button", class: "danger", "aria-label": `Revoke ${k.name}`, onclick: () => revokeDialog(ctx, k) }, "Revoke")
    ] : [k.id === mine ? h("span", { class: "hint" }, "this key") : null];
    return [
      h("span", {}, h("strong", {}, k.name), h("br"), h("code", {}, k.id), " ", h("span", { class: "hint" }, k.hint)),
      spaces.find((w) => w.id === k.workspace_id)?.name ?? h("code", {}, k.workspace_id),
      state(k),
      k.scopes.join(", "),
      h("span", {}, `${money(k.spend.total)} in all`, h("br"), `${money(k.spend.period ?? "0")} this period`),
      k.limits.budget ? h(
        "span",
        {},
        `${money(k.limits.budget)} ${k.limits.budget_period}`,
        h("br"),
        h("meter", { min: 0, max: budget, value: Number(k.spend.period ?? 0), "aria-label": `Spent of ${k.name}'s budget` })
      ) : "none",
      limits(k.limits),
      k.models === null || k.models === void 0 ? "every model" : k.models.join(", ") || "none",
      time(k.last_used_at),
      h("span", { class: "row-actions" }, actions)
    ];
  });
  return table(
    "Keys",
    ["Key", "Workspace", "State", "Scopes", "Spend", "Budget", "Limits", "Models", "Last used", "Actions"],
    rows,
    { "data-table": "keys" }
  );
}
function input(attrs) {
  return h("input", attrs);
}
function keyDialog(ctx, spaces, key2) {
  const all = ctx.spec.components.schemas.Scope?.enum ?? [];
  const name = input({ name: "name", required: true, maxlength: 200, value: key2?.name ?? "" });
  const where = h("select", { name: "workspace_id" }, spaces.map((w) => h("option", { value: w.id, selected: w.id === ctx.me.key?.workspace?.id }, `${w.name} (${w.id})`)));
  const held = key2?.scopes ?? ["inference", "models:read", "key:read", "explain:read"];
  const boxes = all.map((s) => input({ type: "checkbox", name: "scopes", value: s, checked: held.includes(s) }));
  const scopes = h(
    "fieldset",
    { class: "checks" },
    h("legend", {}, "Scopes"),
    all.map((s, i) => h("label", {}, boxes[i], ` ${s}`))
  );
  const modelList = h("textarea", { name: "models", rows: 2 }, key2?.models?.join("\n") ?? "");
  const policy = input({ name: "policy", value: key2?.policy ?? "" });
  const budget = input({ name: "budget", inputmode: "decimal", pattern: MONEY, value: key2?.limits.budget ?? "" });
  const period = h("select", { name: "budget_period" }, ["total", "daily", "monthly"].map((p) => h("option", { value: p, selected: p === (key2?.limits.budget_period ?? "total") }, p)));
  const rpm = input({ name: "rpm", type: "number", min: 1, step: 1, value: key2?.limits.rpm ?? "" });
  const tpm = input({ name: "tpm", type: "number", min: 1, step: 1, value: key2?.limits.tpm ?? "" });
  const expires = input({ name: "expires_at", type: "datetime-local", value: toLocalInput(key2?.expires_at) });
  open(key2 ? `Edit ${key2.name}` : "New key", (d) => form(d, [
    field("Name", name),
    key2 || spaces.length === 0 ? null : field("Workspace", where),
    scopes,
    field("Models", modelList, "One model id or alias a line; empty for every model."),
    field("Routing policy", policy, "Empty for the configuration's default policy."),
    h("div", { class: "row" }, field("Budget", budget, "Empty for none."), field("Budget period", period)),
    h(
      "div",
      { class: "row" },
      field("Requests per minute", rpm, "Empty for no limit."),
      field("Tokens per minute", tpm, "Empty for no limit.")
    ),
    field("Expires", expires, "Empty for never.")
  ], key2 ? "Save" : "Create", async () => {
    const models2 = modelList.value.split("\n").map((m) => m.trim()).filter(Boolean);
    const wanted = {
      name: name.value.trim(),
      scopes: boxes.filter((b) => b.checked).map((b) => b.value),
      models: models2.length ? models2 : null,
      policy: policy.value.trim() || null,
      expires_at: fromLocalInput(expires.value) ?? null,
      limits: {
        budget: budget.value.trim() || null,
        budget_period: period.value,
        rpm: rpm.value ? Number(rpm.value) : null,
        tpm: tpm.value ? Number(tpm.value) : null
      }
    };
    if (!key2) {
      const made = await must(api.POST("/v1/keys", { body: { ...wanted, workspace_id: where.value || void 0 } }));
      show(d, secret(d, made.secret, ctx.rerender));
      return;
    }
    const body = changed(key2, wanted);
    if (Object.keys(body).length) {
      await must(api.PATCH("/v1/keys/{keyId}", { params: { path: { keyId: key2.id } }, body }));
    }
    d.close();
    ctx.rerender();
  }));
}
function changed(key2, wanted) {
  const body = {};
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  if (wanted.name !== key2.name) body.name = wanted.name;
  if (!same([...wanted.scopes].sort(), [...key2.scopes].sort())) body.scopes = wanted.scopes;
  if (!same(wanted.models, key2.models ?? null)) body.models = wanted.models;
  if (wanted.policy !== (key2.policy ?? null)) body.policy = wanted.policy;
  const expiry = (at) => at ? new Date(at).getTime() : null;
  if (expiry(wanted.expires_at) !== expiry(key2.expires_at)) body.expires_at = wanted.expires_at;
  const lim = key2.limits;
  const now = { budget: lim.budget ?? null, budget_period: lim.budget_period ?? "total", rpm: lim.rpm ?? null, tpm: lim.tpm ?? null };
  const budgetSame = wanted.limits.budget === now.budget || wanted.limits.budget !== null && now.budget !== null && Number(wanted.limits.budget) === Number(now.budget);
  if (!budgetSame || wanted.limits.budget_period !== now.budget_period || wanted.limits.rpm !== now.rpm || wanted.limits.tpm !== now.tpm) body.limits = wanted.limits;
  return body;
}
function creditDialog(ctx, w) {
  const amount = input({ name: "amount", required: true, inputmode: "decimal", pattern: MONEY });
  open(`Add credit to ${w.name}`, (d) => form(d, [
    h("p", {}, `Credit left: ${money(w.credit)}.`),
    field("Amount", amount, "An exact decimal, such as 10.00.")
  ], "Add credit", async () => {
    await must(api.POST("/v1/workspaces/{workspaceId}/credit", {
      params: { path: { workspaceId: w.id } },
      body: { amount: amount.value.trim() }
    }));
    d.close();
    ctx.rerender();
  }));
}
function revokeDialog(ctx, k) {
  open(`Revoke ${k.name}?`, (d) => form(d, [
    h("p", {}, "The key stops working at once on this gateway process, and on the others within the key cache time (server.key_cache_seconds). It stays listed, with its spend and history.")
  ], "Revoke", async () => {
    await must(api.DELETE("/v1/keys/{keyId}", { params: { path: { keyId: k.id } } }));
    d.close();
    ctx.rerender();
  }));
}
function rotateDialog(ctx, k) {
  open(`Rotate ${k.name}?`, (d) => form(d, [
    h("p", {}, "A new secret replaces this key's; the key keeps its id, scopes, limits and history.")
  ], "Rotate", async () => {
    const answer = await untyped("POST", ROTATE.replace("{keyId}", encodeURIComponent(k.id)));
    const body = answer.data ?? answer.error;
    if (!answer.response.ok || !body.secret) {
      throw new Refusal(
        answer.response.status,
        body.error?.code ?? "unknown",
        body.error?.message ?? `The gateway answered ${answer.response.status}.`
      );
    }
    show(d, secret(d, body.secret, ctx.rerender));
  }));
}

// src/pages/models.ts
var FROM = {
  config: "set by the configuration",
  catalog: "from the known-model data",
  default: "nobody says: a default"
};
async function models(ctx) {
  const [all, keyList] = await Promise.all([
    attempt(ctx, "get", "/v1/models", catalog),
    attempt(ctx, "get", "/v1/keys", () => must(api.GET("/v1/keys")))
  ]);
  if (all instanceof Error) return h("div", {}, title("Models"), problem(all));
  const shown = all.filter((m) => !m.alias_of);
  const live = keyList instanceof Error ? [] : keyList.data.filter((k) => !k.revoked_at);
  return h(
    "div",
    {},
    title("Models"),
    h(
      "p",
      { class: "lead" },
      "The models the signed-in key may use. Each value says where it came from: ",
      badge("config", "src-config"),
      " the configuration, ",
      badge("catalog", "src-catalog"),
      " the known-model data, ",
      badge("default", "src-default"),
      " neither."
    ),
    keyList instanceof Error ? problem(`Which keys may use each model is not shown: ${keyList.message}`) : null,
    table("Models", [
      "Model",
      "Aliases",
      "Context window",
      "Most output",
      "Price per million tokens",
      "Abilities",
      "Keys that may use it"
    ], shown.map((m) => [
      h("span", {}, h("strong", {}, m.id), h("br"), h("span", { class: "hint" }, `${m.display_name} · ${m.owned_by}`)),
      m.aliases?.length ? m.aliases.join(", ") : "—",
      valued(num(m.context_window), m.sources?.context_window),
      valued(num(m.max_output_tokens), m.sources?.max_output_tokens),
      prices(m),
      abilities(m),
      keyList instanceof Error ? "—" : users(m, live)
    ]), { "data-table": "models" })
  );
}
async function catalog() {
  const out = [];
  for (let after; ; ) {
    const page = await must(api.GET("/v1/models", { params: { query: { limit: 1e3, ...after ? { after_id: after } : {} } } }));
    out.push(...page.data);
    if (!page.has_more || !page.last_id) return out;
    after = page.last_id;
  }
}
function source(from) {
  return from ? h("span", { class: `badge src-${from}`, title: FROM[from] ?? from }, from) : null;
}
function valued(text, from) {
  return h("span", { class: "valued" }, text, " ", source(from));
}
function prices(m) {
  const p = m.pricing;
  const s = m.sources;
  return h(
    "dl",
    { class: "mini" },
    h("dt", {}, "input"),
    h("dd", {}, valued(p?.input_per_million ?? "—", s?.input_per_million)),
    h("dt", {}, "output"),
    h("dd", {}, valued(p?.output_per_million ?? "—", s?.output_per_million)),
    h("dt", {}, "cached input"),
    h("dd", {}, valued(p?.cached_input_per_million ?? "—", s?.cached_input_per_million)),
    h("dt", {}, "cache write"),
    h("dd", {}, valued(p?.cache_write_per_million ?? "—", s?.cache_write_per_million))
  );
}
function abilities(m) {
  const c = m.capabilities;
  const s = m.sources;
  const yes = (v) => v === null || v === void 0 ? "unknown" : v ? "yes" : "no";
  return h(
    "dl",
    { class: "mini" },
    h("dt", {}, "reasoning"),
    h("dd", {}, valued(yes(c?.reasoning), s?.reasoning)),
    h("dt", {}, "vision"),
    h("dd", {}, valued(yes(c?.vision), s?.vision)),
    h("dt", {}, "tool calling"),
    h("dd", {}, valued(yes(c?.tool_calling), s?.tool_calling)),
    h("dt", {}, "structured output"),
    h("dd", {}, valued(yes(c?.structured_output), s?.structured_output))
  );
}
function users(m, keys2) {
  const names = /* @__PURE__ */ new Set([m.id, ...m.aliases ?? []]);
  const may = keys2.filter((k) => k.models === null || k.models === void 0 || k.models.some((n) => names.has(n)));
  if (may.length === keys2.length && keys2.length > 0) return "every key";
  return may.map((k) => k.name).join(", ") || "no key";
}

// src/chart.ts
var COLOURS = 7;
var SLOT2 = 10;
var HEIGHT = 100;
function columns(chart) {
  const sums = chart.buckets.map((_, i) => chart.series.reduce((sum2, s) => sum2 + (s.cells[i]?.value ?? 0), 0));
  const top = Math.max(0, ...sums);
  const bars = [];
  chart.buckets.forEach((bucket, i) => {
    let y = HEIGHT;
    chart.series.forEach((series2, n) => {
      const cell2 = series2.cells[i];
      if (!cell2 || cell2.value <= 0 || top <= 0) return;
      const height = cell2.value / top * HEIGHT;
      y -= height;
      bars.push(svg(
        "rect",
        {
          x: i * SLOT2 + 1,
          y,
          width: SLOT2 - 2,
          height,
          class: `c${Math.min(n, COLOURS - 1)}`,
          "data-series": series2.label,
          "data-bucket": bucket.start,
          "data-value": cell2.text
        },
        svg("title", {}, `${bucket.label} · ${series2.label}: ${cell2.text}`)
      ));
    });
  });
  const width = Math.max(chart.buckets.length, 1) * SLOT2;
  const first = chart.buckets[0]?.label ?? "";
  const last = chart.buckets[chart.buckets.length - 1]?.label ?? "";
  return h(
    "figure",
    { class: "chart", "data-metric": chart.metric },
    h(
      "figcaption",
      {},
      h("span", { class: "chart-title" }, chart.title),
      " ",
      h("span", { class: "chart-total" }, chart.total)
    ),
    svg(
      "svg",
      {
        viewBox: `0 0 ${width} ${HEIGHT}`,
        preserveAspectRatio: "none",
        role: "img",
        "aria-label": `${chart.title}: ${chart.total} from ${first} to ${last}; the table below has each value.`
      },
      svg("line", { x1: 0, y1: HEIGHT, x2: width, y2: HEIGHT, class: "baseline" }),
      bars
    ),
    h(
      "div",
      { class: "axis", "aria-hidden": "true" },
      h("span", {}, first),
      h("span", {}, `highest ${top.toLocaleString(void 0, { maximumSignificantDigits: 4 })}`),
      h("span", {}, last)
    ),
    h("ul", { class: "legend" }, chart.series.map((s, n) => h("li", {}, h("span", { class: `swatch c${Math.min(n, COLOURS - 1)}`, "aria-hidden": "true" }), s.label)))
  );
}
function bar(value, max, label) {
  const width = max > 0 ? Math.max(1, value / max * 100) : 0;
  return svg(
    "svg",
    { class: "hbar", viewBox: "0 0 100 4", preserveAspectRatio: "none", role: "img", "aria-label": label },
    svg("rect", { x: 0, y: 0, width, height: 4, class: "c0" })
  );
}

// src/pages/overview.ts
var HOUR = 36e5;
var RANGES = {
  hour: { label: "Last hour", span: HOUR, bucket: "hour" },
  day: { label: "Last day", span: 24 * HOUR, bucket: "hour" },
  month: { label: "Last 30 days", span: 30 * 24 * HOUR, bucket: "day" }
};
var BY = ["model", "key", "upstream", "workspace"];
var FIELD = {
  model: "model",
  key: "key_id",
  upstream: "upstream",
  workspace: "workspace_id"
};
var METRICS = [
  { metric: "requests", title: "Requests", of: (r) => r.requests },
  { metric: "errors", title: "Errors", of: (r) => r.errors },
  { metric: "tokens", title: "Tokens (input + output)", of: (r) => r.input_tokens + r.output_tokens },
  { metric: "cost", title: "Cost", of: (r) => Number(r.cost), text: (r) => r.cost }
];
var TOP = 6;
var DEPLOYMENTS = "/v1/route/deployments";
async function overview(ctx) {
  const rangeName = RANGES[ctx.query.get("range") ?? ""] ? ctx.query.get("range") : "day";
  const range = RANGES[rangeName];
  const by = BY.find((b) => b === ctx.query.get("by")) ?? "model";
  const start = new Date(Date.now() - range.span).toISOString();
  const query = { start, bucket: range.bucket };
  const [usage2, byWorkspace, workspaces, keyList, deployments] = await Promise.all([
    attempt(ctx, "get", "/v1/usage", () => must(api.GET("/v1/usage", { params: { query: { ...query, group_by: by } } }))),
    attempt(ctx, "get", "/v1/usage", () => must(api.GET("/v1/usage", { params: { query: { ...query, group_by: "workspace" } } }))),
    attempt(ctx, "get", "/v1/workspaces", () => must(api.GET("/v1/workspaces"))),
    attempt(ctx, "get", "/v1/keys", () => must(api.GET("/v1/keys"))),
    attempt(ctx, "get", DEPLOYMENTS, () => untyped("GET", DEPLOYMENTS))
  ]);
  const names = /* @__PURE__ */ new Map();
  if (!(keyList instanceof Error)) for (const k of keyList.data) names.set(k.id, `${k.name} (${k.id})`);
  if (!(workspaces instanceof Error)) for (const w of workspaces.data) names.set(w.id, `${w.name} (${w.id})`);
  const label = (row) => {
    const value = row[FIELD[by]] ?? "";
    return names.get(value) ?? (value || "(none)");
  };
  return h(
    "div",
    {},
    title("Overview"),
    controls(ctx, rangeName, by),
    usage2 instanceof Error ? problem(usage2) : charts(usage2, range.bucket, label),
    usage2 instanceof Error ? null : section(`By ${by}`, byTable(usage2, label, by)),
    section("Workspaces", workspaces instanceof Error ? problem(workspaces) : workspaceTable2(workspaces.data, byWorkspace)),
    deploymentPanel(deployments)
  );
}
function charts(usage2, bucket, label) {
  const buckets = bucketsOf(usage2, bucket);
  const groups = ranked(usage2.data, label);
  return h("div", { class: "charts" }, METRICS.map((m) => columns({
    metric: m.metric,
    title: m.title,
    total: m.text ? money(m.text(usage2.totals)) : num(m.of(usage2.totals)),
    buckets: buckets.map((b) => ({ start: new Date(b).toISOString(), label: bucketLabel(b, bucket) })),
    series: series(usage2.data, groups, buckets, label, m)
  })));
}
function controls(ctx, range, by) {
  const rangeSelect = h("select", { name: "range" }, Object.entries(RANGES).map(([value, r]) => h("option", { value, selected: value === range }, r.label)));
  const bySelect = h("select", { name: "by" }, BY.map((b) => h("option", { value: b, selected: b === by }, b)));
  const form2 = h(
    "form",
    { class: "controls", "aria-label": "What the charts show" },
    h("label", {}, "Period ", rangeSelect),
    h("label", {}, "Break down by ", bySelect)
  );
  form2.addEventListener("change", () => ctx.go(`/console?range=${rangeSelect.value}&by=${bySelect.value}`));
  form2.addEventListener("submit", (event) => event.preventDefault());
  return form2;
}
function bucketsOf(usage2, bucket) {
  const step = bucket === "hour" ? HOUR : 24 * HOUR;
  let at = Date.parse(usage2.start);
  if (bucket === "day") at -= at % step;
  const out = [];
  for (const end = Date.parse(usage2.end); at < end; at += step) out.push(at);
  return out;
}
function bucketLabel(at, bucket) {
  const when2 = new Date(at);
  return bucket === "day" ? when2.toLocaleDateString(void 0, { month: "short", day: "numeric", timeZone: "UTC" }) : when2.toLocaleString(void 0, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}
function ranked(rows, label) {
  const totals = /* @__PURE__ */ new Map();
  for (const r of rows) {
    const [n, c] = totals.get(label(r)) ?? [0, 0];
    totals.set(label(r), [n + r.requests, c + Number(r.cost)]);
  }
  return [...totals.entries()].sort((a, b) => b[1][0] - a[1][0] || b[1][1] - a[1][1] || a[0].localeCompare(b[0])).map(([name]) => name);
}
function series(rows, groups, buckets, label, metric) {
  const shown = groups.slice(0, TOP);
  const names = groups.length > TOP ? [...shown, "other"] : shown;
  const index = new Map(buckets.map((b, i) => [b, i]));
  const values = names.map(() => buckets.map(() => ({ value: 0, text: "0" })));
  for (const r of rows) {
    const i = index.get(Date.parse(r.start));
    const g = shown.includes(label(r)) ? shown.indexOf(label(r)) : names.length - 1;
    const cell2 = i === void 0 ? void 0 : values[g]?.[i];
    if (!cell2) continue;
    cell2.value += metric.of(r);
    cell2.text = metric.text ? add(cell2.text, metric.text(r)) : String(cell2.value);
  }
  return names.map((name, g) => ({ label: name, cells: values[g] ?? [] }));
}
function byTable(usage2, label, by) {
  const groups = /* @__PURE__ */ new Map();
  for (const r of usage2.data) groups.set(label(r), [...groups.get(label(r)) ?? [], r]);
  const count2 = (rows2, f) => num(rows2.reduce((n, r) => n + f(r), 0));
  const rows = [...groups.entries()].map(([name, rs]) => [
    name,
    count2(rs, (r) => r.requests),
    count2(rs, (r) => r.errors),
    count2(rs, (r) => r.input_tokens),
    count2(rs, (r) => r.output_tokens),
    money(sum(rs.map((r) => r.cost)))
  ]);
  const t = usage2.totals;
  rows.push([
    h("strong", {}, "Total"),
    num(t.requests),
    num(t.errors),
    num(t.input_tokens),
    num(t.output_tokens),
    money(t.cost)
  ]);
  return table(
    `Usage by ${by}`,
    [by, "Requests", "Errors", "Input tokens", "Output tokens", "Cost"],
    rows,
    { class: "numbers", "data-table": "usage" }
  );
}
function workspaceTable2(list, usage2) {
  const spent = /* @__PURE__ */ new Map();
  if (!(usage2 instanceof Error)) {
    for (const r of usage2.data) spent.set(r.workspace_id ?? "", add(spent.get(r.workspace_id ?? "") ?? "0", r.cost));
  }
  return table(
    "Workspaces",
    ["Workspace", "Credit left", "Held by requests in flight", "Spent in all", "Spent in this period"],
    list.map((w) => [
      h("span", {}, w.name, h("br"), h("code", {}, w.id)),
      money(w.credit),
      money(w.reserved),
      money(w.spend_total),
      usage2 instanceof Error ? "—" : money(spent.get(w.id) ?? "0")
    ]),
    { class: "numbers", "data-table": "workspaces" }
  );
}
function deploymentPanel(answer) {
  if (answer instanceof Error) return null;
  if (answer.response.status === 403) {
    const refused = answer.error;
    return section("Deployments", problem(refused?.error?.message ?? "This key may not read deployments."));
  }
  if (!answer.response.ok) return null;
  const body = answer.data;
  const items = Array.isArray(body) ? body : body.data ?? [];
  const names = [...new Set(items.flatMap((item) => Object.keys(item)))].filter((n) => n !== "object");
  return section("Deployments", items.length === 0 ? h("p", {}, "No deployments.") : table(
    "Deployments",
    names.map((n) => n.replaceAll("_", " ")),
    items.map((item) => names.map((n) => cell(n, item[n]))),
    { "data-table": "deployments" }
  ));
}
function cell(name, value) {
  if (value === null || value === void 0) return "—";
  if (name === "state" && typeof value === "string") {
    return badge(value, value === "healthy" ? "good" : value === "open" ? "bad" : "warn");
  }
  if (Array.isArray(value)) return value.join(", ");
  if (typeof value === "string" && /(_until|_at)$/.test(name)) return time(value);
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

// src/pages/request.ts
async function request(ctx, id) {
  const d = await attempt(
    ctx,
    "get",
    "/v1/route/explain/{decisionId}",
    () => must(api.GET("/v1/route/explain/{decisionId}", { params: { path: { decisionId: id } } }))
  );
  if (d instanceof Error) return h("div", {}, title("Request"), problem(d), h("p", {}, h("a", { href: "/console/requests" }, "All requests")));
  return h(
    "div",
    {},
    title(`Request ${d.id}`),
    h("p", { class: "lead" }, d.explanation),
    section("Summary", facts(d)),
    section("Candidates", candidates(d.candidates)),
    section("Attempts", attempts(d.attempts)),
    section("Usage and cost", usage(d)),
    d.left_out?.length ? section("Left out", h("ul", {}, d.left_out.map((l) => h("li", {}, l)))) : null,
    h("p", {}, h("a", { href: "/console/requests" }, "All requests"))
  );
}
function facts(d) {
  const pairs = [
    ["Time", time(d.created_at)],
    ["Outcome", outcomeBadge(d.outcome)],
    ["Answered by", d.model ?? "nobody"],
    ["Model asked for", d.requested_model ?? "none (the policy chose)"],
    ["Effort", d.effort ?? "—"],
    ["Policy", d.policy ?? "—"],
    ["Format", `${d.format}${d.stream ? ", streamed" : ""}`],
    ["Key", d.key_id ?? "—"],
    ["Workspace", d.workspace_id ?? "—"],
    ["Configuration revision", d.config_revision ?? "not recorded"]
  ];
  return h("dl", { class: "facts", "data-facts": "request" }, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}
function candidates(list) {
  if (list.length === 0) return h("p", {}, "Routing found no candidate.");
  return table("Candidates", ["#", "Model", "Upstream", "Verdict", "Why"], list.map((c, i) => [
    String(i + 1),
    c.model ?? "—",
    c.upstream ?? "—",
    badge(c.verdict ?? "—", c.verdict === "chosen" ? "good" : c.verdict === "skipped" ? "bad" : "warn"),
    c.reason ?? ""
  ]), { "data-table": "candidates" });
}
function attempts(list) {
  if (list.length === 0) return h("p", {}, "No upstream was tried.");
  const longest = Math.max(...list.map((a) => a.latency_ms ?? 0));
  return table("Attempts", ["#", "Model", "Upstream", "Status", "Error", "Time"], list.map((a, i) => [
    String(i + 1),
    a.model ?? "—",
    a.upstream ?? "—",
    a.status === null || a.status === void 0 ? "no answer" : badge(String(a.status), a.status < 400 ? "good" : "bad"),
    a.error ?? "—",
    h("span", { class: "timing" }, ms(a.latency_ms), bar(a.latency_ms ?? 0, longest, `attempt ${i + 1}: ${ms(a.latency_ms)}`))
  ]), { "data-table": "attempts" });
}
function usage(d) {
  const u = d.usage;
  const p = d.pricing;
  const src = (name) => p?.sources?.[name] ?? "—";
  return h(
    "div",
    {},
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Input tokens"),
      h("dd", {}, num(u?.input_tokens)),
      h("dt", {}, "Of them from a prompt cache"),
      h("dd", {}, num(u?.cached_input_tokens)),
      h("dt", {}, "Of them written to a prompt cache"),
      h("dd", {}, num(u?.cache_write_tokens)),
      h("dt", {}, "Output tokens"),
      h("dd", {}, num(u?.output_tokens)),
      h("dt", {}, "Estimated"),
      h("dd", {}, d.usage_estimated ? "yes (the upstream reported no usage)" : "no"),
      h("dt", {}, "Cost"),
      h("dd", {}, money(d.cost))
    ),
    p ? table("Prices", ["Per million tokens", "Price", "From"], [
      ["Input", p.input_per_million ?? "—", src("input_per_million")],
      ["Output", p.output_per_million ?? "—", src("output_per_million")],
      ["Cached input", p.cached_input_per_million ?? "—", src("cached_input_per_million")],
      ["Cache write", p.cache_write_per_million ?? "—", src("cache_write_per_million")]
    ], { class: "numbers" }) : null
  );
}

// src/pages/requests.ts
var FILTERS = ["key_id", "model", "outcome", "start", "end"];
var PAGE = 25;
async function requests(ctx) {
  const q = ctx.query;
  const query = { limit: PAGE };
  for (const name of FILTERS) {
    const value = q.get(name);
    if (value) query[name] = value;
  }
  const cursor = q.get("cursor");
  if (cursor) query.cursor = cursor;
  const [page, keyList, modelList] = await Promise.all([
    attempt(ctx, "get", "/v1/route/decisions", () => listed(query)),
    attempt(ctx, "get", "/v1/keys", () => must(api.GET("/v1/keys"))),
    attempt(ctx, "get", "/v1/models", () => must(api.GET("/v1/models", { params: { query: { limit: 1e3 } } })))
  ]);
  if (page instanceof Error) return h("div", {}, title("Requests"), problem(page));
  const names = /* @__PURE__ */ new Map();
  if (!(keyList instanceof Error)) for (const k of keyList.data) names.set(k.id, k.name);
  const rows = page.data.map((d) => [
    h("a", { href: `/console/requests/${encodeURIComponent(d.id)}`, "data-decision": d.id }, time(d.created_at)),
    d.key_id ? names.get(d.key_id) ?? d.key_id : "—",
    d.model ?? h("span", { class: "hint" }, d.requested_model ?? "—"),
    `${d.format}${d.stream ? " (stream)" : ""}`,
    h("span", {}, outcomeBadge(d.outcome), " ", d.status === null || d.status === void 0 ? "" : String(d.status)),
    ms(d.latency_ms),
    `${num(d.input_tokens)} / ${num(d.output_tokens)}`,
    money(d.cost)
  ]);
  const base = new URLSearchParams(q);
  base.delete("cursor");
  return h(
    "div",
    {},
    title("Requests"),
    filters(ctx, keyList instanceof Error ? [] : keyList.data, modelList instanceof Error ? [] : modelList.data),
    page.data.length === 0 ? h("p", { "data-empty": "" }, "No requests match.") : table(
      "Requests",
      ["Time", "Key", "Model", "Format", "Outcome", "Upstream time", "Tokens in / out", "Cost"],
      rows,
      { "data-table": "requests" }
    ),
    h(
      "nav",
      { class: "pager", "aria-label": "Pages" },
      cursor ? h("a", { href: `/console/requests?${base}` }, "Newest") : null,
      page.next_cursor ? h("a", { href: `/console/requests?${withCursor(base, page.next_cursor)}`, rel: "next" }, "Older") : null
    )
  );
}
function listed(query) {
  return must(api.GET("/v1/route/decisions", { params: { query } }));
}
function withCursor(base, cursor) {
  const next = new URLSearchParams(base);
  next.set("cursor", cursor);
  return next;
}
function filters(ctx, keys2, models2) {
  const q = ctx.query;
  const key2 = keys2.length ? h(
    "select",
    { name: "key_id" },
    h("option", { value: "" }, "Any key"),
    keys2.map((k) => h("option", { value: k.id, selected: k.id === q.get("key_id") }, `${k.name} (${k.id})`))
  ) : h("input", { name: "key_id", value: q.get("key_id") ?? "", placeholder: "key_…" });
  const model = h("input", { name: "model", list: "models-known", value: q.get("model") ?? "" });
  const known = h("datalist", { id: "models-known" }, models2.map((m) => h("option", { value: m.id })));
  const codes = ctx.spec.components.schemas.ErrorDetail?.properties?.code?.enum ?? [];
  const outcome = h("input", { name: "outcome", list: "outcomes-known", value: q.get("outcome") ?? "" });
  const outcomes = h("datalist", { id: "outcomes-known" }, ["ok", "error", "cancelled", ...codes].map((c) => h("option", { value: c })));
  const start = h("input", { name: "start", type: "datetime-local", value: toLocalInput(q.get("start")) });
  const end = h("input", { name: "end", type: "datetime-local", value: toLocalInput(q.get("end")) });
  const form2 = h(
    "form",
    { class: "filters", "aria-label": "Filter requests" },
    field("Key", key2),
    field("Model", model),
    known,
    field("Outcome", outcome, "ok, error, or an error code"),
    outcomes,
    field("From", start),
    field("Before", end),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit" }, "Filter"),
      h("a", { href: "/console/requests", class: "button secondary" }, "Clear")
    )
  );
  form2.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    const values = {
      key_id: key2.value.trim(),
      model: model.value.trim(),
      outcome: outcome.value.trim(),
      start: fromLocalInput(start.value),
      end: fromLocalInput(end.value)
    };
    for (const [name, value] of Object.entries(values)) if (value) next.set(name, value);
    ctx.go(`/console/requests${next.size ? `?${next}` : ""}`);
  });
  return form2;
}

// src/main.ts
var NAV = [
  ["/console", "Overview"],
  ["/console/keys", "Keys and workspaces"],
  ["/console/requests", "Requests"],
  ["/console/models", "Models"]
];
var ROUTES = [
  [/^\/console\/?$/, "Overview", overview],
  [/^\/console\/keys\/?$/, "Keys and workspaces", keys],
  [/^\/console\/requests\/?$/, "Requests", requests],
  [/^\/console\/requests\/([^/]+)$/, "Request", request],
  [/^\/console\/models\/?$/, "Models", models]
];
var root = document.getElementById("app");
var me = null;
var rendering = 0;
async function whoami() {
  try {
    const key2 = await must(api.GET("/v1/key"));
    return { key: key2, scopes: key2.scopes };
  } catch (err) {
    if (!(err instanceof Refusal) || err.status !== 403) throw err;
    try {
      await must(api.GET("/v1/workspaces"));
    } catch (second) {
      if (second instanceof Refusal && second.status === 403) {
        throw new Refusal(403, second.code, "This key holds neither key:read nor workspace:admin (nor admin): the console has nothing it may show.");
      }
      throw second;
    }
    return { key: null, scopes: null };
  }
}
function signInPage(message) {
  me = null;
  document.title = "Sign in — Specway console";
  const input2 = h("input", {
    type: "password",
    name: "key",
    required: true,
    autocomplete: "off",
    spellcheck: "false",
    id: "key",
    "aria-describedby": "key-hint"
  });
  const status = h("p", { class: "alert", role: "alert", hidden: !message }, message ?? "");
  const form2 = h(
    "form",
    { class: "signin", novalidate: true },
    h("h1", {}, "Specway console"),
    h("label", { for: "key" }, "Relay key"),
    input2,
    h("p", { class: "hint", id: "key-hint" }, "A key holding admin or workspace:admin, or key:read to see itself. It stays in this tab only (sessionStorage) and is forgotten on sign out."),
    status,
    h("button", { type: "submit" }, "Sign in")
  );
  form2.addEventListener("submit", (event) => {
    event.preventDefault();
    const secret2 = input2.value.trim();
    if (!secret2) {
      status.hidden = false;
      status.textContent = "Enter a relay key.";
      input2.focus();
      return;
    }
    remember(secret2);
    input2.value = "";
    whoami().then((who) => {
      me = who;
      render();
    }).catch((err) => {
      forget();
      status.hidden = false;
      status.textContent = err instanceof Refusal && err.status === 401 ? "The gateway does not know this key, or it is revoked or expired." : err instanceof Error ? err.message : String(err);
      input2.focus();
    });
  });
  root.replaceChildren(h("main", { id: "main", class: "narrow" }, form2));
  input2.focus();
}
function signOut() {
  forget();
  signInPage();
}
function shell(who, path) {
  const name = who.key ? `${who.key.name} (${who.key.scopes.join(", ")})` : "a key without key:read";
  const current = NAV.filter(([href]) => path === href || path.startsWith(`${href}/`)).pop()?.[0];
  return h(
    "header",
    { class: "top" },
    h("a", { class: "skip", href: "#main" }, "Skip to content"),
    h("p", { class: "brand" }, "Specway"),
    h("nav", { "aria-label": "Console" }, h("ul", {}, NAV.map(([href, label]) => h("li", {}, h("a", { href, "aria-current": href === current ? "page" : null }, label))))),
    h(
      "div",
      { class: "who" },
      h("span", {}, "Signed in as ", h("strong", {}, name)),
      h("button", { type: "button", class: "secondary", onclick: signOut }, "Sign out")
    )
  );
}
function go(href) {
  history.pushState(null, "", href);
  render(true);
}
function render(focus = false) {
  if (!me) return signInPage();
  const ticket = ++rendering;
  const path = location.pathname;
  const [pattern, title2, page] = ROUTES.find(([re]) => re.test(path)) ?? [/$/, "Not found", notFound];
  const rest = decodeURIComponent(path.match(pattern)?.[1] ?? "");
  const main = h("main", { id: "main", tabindex: -1, "aria-busy": "true" }, h("p", { class: "loading" }, "Loading…"));
  root.replaceChildren(shell(me, path), main);
  document.title = `${title2} — Specway console`;
  const ctx = {
    me,
    spec: null,
    query: new URLSearchParams(location.search),
    go,
    rerender: () => render()
  };
  spec().then((doc) => page({ ...ctx, spec: doc }, rest)).then((node) => {
    if (ticket !== rendering) return;
    main.replaceChildren(node);
  }).catch((err) => {
    if (ticket !== rendering || !me) return;
    main.replaceChildren(h("h1", { tabindex: -1 }, title2), problem(err));
  }).finally(() => {
    main.removeAttribute("aria-busy");
    if (focus && ticket === rendering) main.querySelector("h1")?.focus();
  });
}
async function notFound() {
  return h("div", {}, h("h1", { tabindex: -1 }, "Not found"), h(
    "p",
    {},
    "No console page here. ",
    h("a", { href: "/console" }, "Back to the overview"),
    "."
  ));
}
document.addEventListener("click", (event) => {
  const link = event.target?.closest?.("a");
  const href = link?.getAttribute("href");
  if (!link || !href?.startsWith("/console") || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  go(href);
});
window.addEventListener("popstate", () => render(true));
onSignedOut(() => {
  if (!me) return;
  forget();
  signInPage("The gateway no longer takes this key (revoked or expired): sign in again.");
});
if (key()) {
  whoami().then((who) => {
    me = who;
    render();
  }).catch((err) => {
    forget();
    signInPage(err instanceof Error ? err.message : String(err));
  });
} else {
  signInPage();
}
