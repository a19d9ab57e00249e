// How values read: times in the browser's zone (the ISO text on hover), counts grouped, money as the exact decimal
// the API sends.

import { add } from "./decimal.js";

const when = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });
const count = new Intl.NumberFormat();

export function time(iso: string | null | undefined): string {
  if (!iso) return "—";
  const at = new Date(iso);
  return Number.isNaN(at.getTime()) ? iso : when.format(at);
}

export function num(value: number | null | undefined): string {
  return value === null || value === undefined ? "—" : count.format(value);
}

export function ms(value: number | null | undefined): string {
  return value === null || value === undefined ? "—" : `${count.format(Math.round(value * 10) / 10)} ms`;
}

/** An exact decimal with at least two decimals (0.00, 1.20, 0.000125), as the API writes money. */
export function money(value: string | null | undefined): string {
  return value === null || value === undefined || value === "" ? "—" : add("0", value);
}

/** The ISO text of a datetime-local input's value (the browser's zone), or undefined when empty. */
export function fromLocalInput(value: string): string | undefined {
  if (!value) return undefined;
  const at = new Date(value);
  return Number.isNaN(at.getTime()) ? undefined : at.toISOString();
}

/** A datetime-local input's value for an ISO time, in the browser's zone. */
export function toLocalInput(iso: string | null | undefined): string {
  if (!iso) return "";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return "";
  const local = new Date(at.getTime() - at.getTimezoneOffset() * 60_000);
  return local.toISOString().slice(0, 16);
}
