// Elements built from data, never from HTML text: every value reaches the page as a text node or an attribute, so
// nothing the API answers can become markup (and the CSP has no 'unsafe-inline' to fall back on).

export type Child = Node | string | number | null | undefined | false | Child[];
type Listener = (event: Event) => void;
export type Attrs = Record<string, string | number | boolean | null | undefined | Listener>;

function fill(el: Element, attrs: Attrs, children: Child[]): void {
  for (const [name, value] of Object.entries(attrs)) {
    if (typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else if (value !== false && value !== null && value !== undefined) el.setAttribute(name, String(value));
  }
  append(el, children);
}

export function append(el: Element, children: Child[]): void {
  for (const child of children) {
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else if (child !== null && child !== undefined && child !== false) el.appendChild(document.createTextNode(String(child)));
  }
}

/** An HTML element: h("a", {href: "/console", onclick: go}, "Overview"). Names starting with "on" are listeners. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  fill(el, attrs, children);
  return el;
}

/** An SVG element, for the charts. */
export function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): SVGElementTagNameMap[K] {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  fill(el, attrs, children);
  return el;
}

/** A table from header cells and rows of cells, in a wrapper that scrolls sideways on a narrow screen. */
export function table(caption: string, head: Child[], rows: Child[][], attrs: Attrs = {}): HTMLElement {
  const wrap = h("div", { class: "table-wrap", tabindex: 0, role: "region", "aria-label": caption });
  wrap.appendChild(
    h("table", attrs,
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, head.map((cell) => h("th", { scope: "col" }, cell)))),
      h("tbody", {}, rows.map((row) => h("tr", {}, row.map((cell) => h("td", {}, cell)))))),
  );
  return wrap;
}

let fields = 0;

/** A labelled form control, with its hint tied to it for screen readers. */
export function field(label: string, control: HTMLElement, hint?: string): HTMLElement {
  const id = control.id || `field-${++fields}`;
  control.id = id;
  const hintId = hint ? `${id}-hint` : undefined;
  if (hintId) control.setAttribute("aria-describedby", hintId);
  return h("div", { class: "field" }, h("label", { for: id }, label), control, hint ? h("p", { class: "hint", id: hintId }, hint) : null);
}

export function section(title: string, ...children: Child[]): HTMLElement {
  return h("section", { class: "panel" }, h("h2", {}, title), ...children);
}
