// Stacked columns in SVG: one column per time bucket, one colour per group. The SVG carries no text (it stretches to
// any width); the title, total, axis and legend are HTML around it, and every bar has a <title> and its exact value
// in data-value. A table of the same numbers follows each chart on the page.

import { h, svg } from "./dom.js";

export type Cell = { value: number; text: string };
export type Series = { label: string; cells: Cell[] };
export const COLOURS = 7; // .c0 … .c6 in console.css; the last one is "other"

export type Chart = {
  metric: string; // a stable name, for tests and styles
  title: string;
  total: string;
  buckets: { start: string; label: string }[];
  series: Series[];
};

const SLOT = 10; // viewBox units per bucket
const HEIGHT = 100;

export function columns(chart: Chart): HTMLElement {
  const sums = chart.buckets.map((_, i) => chart.series.reduce((sum, s) => sum + (s.cells[i]?.value ?? 0), 0));
  const top = Math.max(0, ...sums);
  const bars: SVGElement[] = [];
  chart.buckets.forEach((bucket, i) => {
    let y = HEIGHT;
    chart.series.forEach((series, n) => {
      const cell = series.cells[i];
      if (!cell || cell.value <= 0 || top <= 0) return;
      const height = (cell.value / top) * HEIGHT;
      y -= height;
      bars.push(svg("rect", { x: i * SLOT + 1, y, width: SLOT - 2, height, class: `c${Math.min(n, COLOURS - 1)}`,
        "data-series": series.label, "data-bucket": bucket.start, "data-value": cell.text },
      svg("title", {}, `${bucket.label} · ${series.label}: ${cell.text}`)));
    });
  });
  const width = Math.max(chart.buckets.length, 1) * SLOT;
  const first = chart.buckets[0]?.label ?? "";
  const last = chart.buckets[chart.buckets.length - 1]?.label ?? "";
  return h("figure", { class: "chart", "data-metric": chart.metric },
    h("figcaption", {}, h("span", { class: "chart-title" }, chart.title), " ",
      h("span", { class: "chart-total" }, chart.total)),
    svg("svg", { viewBox: `0 0 ${width} ${HEIGHT}`, preserveAspectRatio: "none", role: "img",
      "aria-label": `${chart.title}: ${chart.total} from ${first} to ${last}; the table below has each value.` },
    svg("line", { x1: 0, y1: HEIGHT, x2: width, y2: HEIGHT, class: "baseline" }), bars),
    h("div", { class: "axis", "aria-hidden": "true" }, h("span", {}, first),
      h("span", {}, `highest ${top.toLocaleString(undefined, { maximumSignificantDigits: 4 })}`), h("span", {}, last)),
    h("ul", { class: "legend" }, chart.series.map((s, n) =>
      h("li", {}, h("span", { class: `swatch c${Math.min(n, COLOURS - 1)}`, "aria-hidden": "true" }), s.label))));
}

/** A horizontal bar of `value` out of `max` (a request's attempt latencies side by side). */
export function bar(value: number, max: number, label: string): SVGElement {
  const width = max > 0 ? Math.max(1, (value / max) * 100) : 0;
  return svg("svg", { class: "hbar", viewBox: "0 0 100 4", preserveAspectRatio: "none", role: "img", "aria-label": label },
    svg("rect", { x: 0, y: 0, width, height: 4, class: "c0" }));
}
