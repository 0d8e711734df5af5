// Small pieces used on several pages: state badges, progress bars, ratio pills, key-value lists.

import { h } from "./dom.js";
import { isAcf, num, ratioInfo, valueText } from "./format.js";

const ROLE_RANK = { viewer: 0, member: 1, approver: 2, admin: 3 };

export function can(me, role) {
  return me && me.kind === "user" && (ROLE_RANK[me.role] ?? -1) >= ROLE_RANK[role];
}

export function stateBadge(state) {
  return h("span", { class: `badge state-${state}`, dataset: { state } }, state);
}

export function progressBar(progress, { compact = false } = {}) {
  const { max_trials: max, completed, failed, cancelled, in_flight: flight } = progress;
  const screenedOut = progress.screened_out || 0;
  // infeasible trials a study does not count against max_trials are not part of its budget
  const uncounted = progress.infeasible_counted === false ? progress.infeasible || 0 : 0;
  const pct = (n) => `${Math.min(100, (n / Math.max(1, max)) * 100)}%`;
  const done = completed + failed + cancelled + screenedOut - uncounted;
  return h("div", { class: ["progress", compact && "progress-compact"] },
    h("div", { class: "progress-track", title: `${completed} completed, ${screenedOut} screened out, ${failed} failed (${progress.infeasible || 0} cannot launch${uncounted ? ", not counted" : ""}), ${cancelled} cancelled, ${flight} in flight of ${max}` },
      h("span", { class: "seg seg-completed", style: { width: pct(completed) } }),
      h("span", { class: "seg seg-screened", style: { width: pct(screenedOut) } }),
      h("span", { class: "seg seg-failed", style: { width: pct(failed - uncounted) } }),
      h("span", { class: "seg seg-cancelled", style: { width: pct(cancelled) } }),
      h("span", { class: "seg seg-flight", style: { width: pct(flight) } })),
    h("div", { class: "progress-label" },
      h("span", { class: "num", dataset: { completed } }, done.toLocaleString("en-US")),
      h("span", { class: "muted" }, ` / ${max.toLocaleString("en-US")}`),
      !compact && failed ? h("span", { class: "muted" }, ` · ${failed} failed`) : null,
      !compact && progress.infeasible ? h("span", { class: "muted" }, ` · ${progress.infeasible} cannot launch`) : null,
      flight ? h("span", { class: "muted" }, ` · ${flight} in flight`) : null));
}

export function ratioPill(ratio, direction) {
  const info = ratioInfo(ratio, direction);
  if (!info) return h("span", { class: "muted" }, "–");
  return h("span", { class: `ratio ratio-${info.kind}`, title: `${info.delta} against the baseline` }, info.text);
}

export function kvTable(entries, { empty = "nothing reported" } = {}) {
  const rows = entries.filter(([, v]) => v !== undefined);
  if (!rows.length) return h("p", { class: "muted empty" }, empty);
  return h("table", { class: "kv" }, h("tbody", null, rows.map(([k, v]) =>
    h("tr", null, h("th", null, k), h("td", null, formatValue(v))))));
}

export function formatValue(v) {
  if (v === null || v === undefined) return h("span", { class: "muted" }, "–");
  if (isAcf(v)) return h("span", { class: "mono acf", title: `Advanced Controls File sha256 ${v}` }, valueText(v));
  if (typeof v === "number") return h("span", { class: "num" }, num(v, 6));
  if (typeof v === "boolean") return h("span", { class: v ? "yes" : "no" }, v ? "yes" : "no");
  if (Array.isArray(v)) return v.length ? v.map((x) => (typeof x === "object" ? JSON.stringify(x) : String(x))).join(", ") : h("span", { class: "muted" }, "none");
  if (typeof v === "object") {
    const entries = Object.entries(v);
    if (!entries.length) return h("span", { class: "muted" }, "–");
    return h("span", { class: "inline-kv" }, entries.map(([k, x]) => h("span", null, h("em", null, k), " ", typeof x === "object" ? JSON.stringify(x) : String(x))));
  }
  return String(v);
}

export function card(title, { actions = null, cls = "", id = null } = {}, ...body) {
  return h("section", { class: ["card", cls], id },
    title || actions ? h("header", { class: "card-head" }, h("h2", null, title), actions) : null,
    h("div", { class: "card-body" }, body));
}

export function spinner(text = "Loading") {
  return h("div", { class: "loading" }, h("span", { class: "spin" }), text);
}

/** Puts a chart's tooltip above and to the right of the point at (px, py) where it fits: a
 * front usually sits towards the lower left, and the tooltip should not hide the neighbours
 * being compared. */
export function placeTooltip(tip, px, py) {
  const wrap = tip.parentElement.getBoundingClientRect();
  const w = tip.offsetWidth;
  const hgt = tip.offsetHeight;
  const left = px + 14 + w <= wrap.width ? px + 14 : px - 14 - w;
  const top = py - 14 - hgt >= 0 ? py - 14 - hgt : Math.min(py + 14, wrap.height - hgt);
  tip.style.left = `${Math.max(0, left)}px`;
  tip.style.top = `${Math.max(0, top)}px`;
}

export function errorBox(error) {
  return h("div", { class: "error-box" }, h("strong", null, error.status ? `${error.status} · ${error.code}` : "Error"), " ", error.message);
}
