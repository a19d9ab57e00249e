// Modal dialogs on the native <dialog>: focus moves into it, Escape closes it, focus goes back to what opened it.

import { append, type Child, h } from "./dom.js";

export type Dialog = { el: HTMLDialogElement; body: HTMLElement; close: () => void };

let opened = 0;

export function open(title: string, content: (d: Dialog) => Child): Dialog {
  const opener = document.activeElement as HTMLElement | null;
  const body = h("div", { class: "dialog-body" });
  const heading = h("h2", { id: `dialog-${++opened}` }, title);
  const el = h("dialog", { "aria-labelledby": heading.id }, heading, body);
  const d: Dialog = { el, body, close: () => el.close() };
  el.addEventListener("close", () => {
    el.remove();
    opener?.focus();
  });
  append(body, [content(d)]);
  document.body.appendChild(el);
  el.showModal();
  (el.querySelector("input, select, textarea, button") as HTMLElement | null)?.focus();
  return d;
}

/** The dialog's content replaced (a form's result, say). */
export function show(d: Dialog, content: Child): void {
  d.body.replaceChildren();
  append(d.body, [content]);
  (d.body.querySelector("input, button") as HTMLElement | null)?.focus();
}

/** A form in a dialog: `submit` runs on a valid submission; what it throws is shown in the dialog (the API's
 * message), and the dialog stays open to correct it. */
export function form(d: Dialog, fields: Child[], action: string, submit: () => Promise<void>): HTMLFormElement {
  const status = h("p", { class: "alert", role: "alert", hidden: true });
  const button = h("button", { type: "submit" }, action);
  const f = h("form", { novalidate: true }, fields, status,
    h("div", { class: "actions" }, button, h("button", { type: "button", class: "secondary", onclick: d.close }, "Cancel")));
  f.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!f.reportValidity()) return;
    button.disabled = true;
    submit().catch((err: unknown) => {
      status.hidden = false;
      status.textContent = err instanceof Error ? err.message : String(err);
    }).finally(() => {
      button.disabled = false;
    });
  });
  return f;
}

/** A secret shown this once, with a button that copies it; `done` runs when the dialog closes, however it does. */
export function secret(d: Dialog, value: string, done: () => void): Child {
  d.el.addEventListener("close", done, { once: true });
  const input = h("input", { type: "text", readonly: true, value, class: "mono", "aria-label": "The new secret",
    "data-secret": "" });
  const said = h("p", { class: "hint", "aria-live": "polite" });
  const copy = h("button", { type: "button", onclick: () => {
    input.select();
    const copied = navigator.clipboard?.writeText(value) ?? Promise.reject(new Error("no clipboard"));
    copied.then(() => { said.textContent = "Copied."; })
      .catch(() => { said.textContent = "Select the secret and copy it by hand (this page has no clipboard access)."; });
  } }, "Copy");
  return [
    h("p", {}, "Copy the secret now: it is shown only this once, and the gateway keeps only its hash."),
    h("div", { class: "secret" }, input, copy), said,
    h("div", { class: "actions" }, h("button", { type: "button", onclick: d.close }, "Done")),
  ];
}
