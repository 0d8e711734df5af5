// A few DOM helpers: element creation without a framework.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) setAttrs(el, attrs);
  append(el, children);
  return el;
}

export function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = Array.isArray(value) ? value.filter(Boolean).join(" ") : value;
    else if (key === "style" && typeof value === "object") Object.assign(el.style, value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "html") el.innerHTML = value;
    else if (value === true) el.setAttribute(key, "");
    else if (key in el && !key.includes("-") && key !== "list") el[key] = value;
    else el.setAttribute(key, String(value));
  }
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** Run `fn` at most once per `ms`, always with the latest arguments, trailing call kept. */
export function throttle(fn, ms) {
  let timer = null;
  let last = 0;
  let pending = null;
  const run = () => {
    timer = null;
    last = performance.now();
    const args = pending;
    pending = null;
    fn(...args);
  };
  const call = (...args) => {
    pending = args;
    if (timer) return;
    const wait = Math.max(0, ms - (performance.now() - last));
    timer = setTimeout(run, wait);
  };
  call.cancel = () => { clearTimeout(timer); timer = null; pending = null; };
  return call;
}

let toastBox = null;

export function toast(message, kind = "error") {
  if (!toastBox) {
    toastBox = h("div", { class: "toasts", role: "status", "aria-live": "polite" });
    document.body.append(toastBox);
  }
  const el = h("div", { class: `toast toast-${kind}` }, message);
  toastBox.append(el);
  setTimeout(() => el.classList.add("toast-out"), 5200);
  setTimeout(() => el.remove(), 5600);
}

/** A modal asking to confirm; resolves true or false. */
export function confirmDialog({ title, body, confirm, danger = false }) {
  return new Promise((resolve) => {
    const close = (answer) => { overlay.remove(); document.removeEventListener("keydown", onKey); resolve(answer); };
    const onKey = (e) => { if (e.key === "Escape") close(false); };
    const yes = h("button", { class: danger ? "btn btn-danger" : "btn btn-primary", onclick: () => close(true) }, confirm);
    const overlay = h("div", { class: "modal-overlay", onclick: (e) => { if (e.target === overlay) close(false); } },
      h("div", { class: "modal", role: "dialog", "aria-modal": "true", "aria-label": title },
        h("h3", null, title),
        h("p", null, body),
        h("div", { class: "modal-actions" },
          h("button", { class: "btn", onclick: () => close(false) }, "Keep it"), yes)));
    document.addEventListener("keydown", onKey);
    document.body.append(overlay);
    yes.focus();
  });
}
