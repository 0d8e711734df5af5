// All trials of a study: sorted, filtered and paged by the API (keyset cursors), with live
// updates: the first page refetches when trials change, later pages update rows in place.

import { get, query } from "../api.js";
import { h, replace, throttle } from "../dom.js";
import { ago, configText, duration, num, seconds, stamp, unitOf } from "../format.js";
import { errorBox, ratioPill, stateBadge } from "../widgets.js";

const FILTERS = [
  { key: "all", label: "All", states: null },
  { key: "completed", label: "Completed", states: "completed" },
  { key: "screened_out", label: "Screened out", states: "screened_out" },
  { key: "failed", label: "Failed", states: "failed" },
  { key: "active", label: "Running", states: "running" },
  { key: "queued", label: "Queued", states: "queued,paused,screened" },
  { key: "cancelled", label: "Cancelled", states: "cancelled" },
];
const PAGE_SIZES = [25, 50, 100, 250];

export class TrialsTable {
  constructor(container, { studyId, objectives, onOpen, onHover = () => {}, onDrawn = () => {} }) {
    this.onDrawn = onDrawn;
    this.studyId = studyId;
    this.objectives = objectives;
    this.onOpen = onOpen;
    this.onHover = onHover;
    this.sort = "-number";
    this.filter = "all";
    this.frontOnly = false;
    this.limit = 25;
    this.cursors = [null];
    this.page = 0;
    this.items = [];
    this.nextCursor = null;
    this.rows = new Map();
    this.loading = null;
    this.refresh = throttle(() => this.load(), 700);

    this.tabs = h("div", { class: "segmented", role: "tablist", "aria-label": "Trial state" });
    this.frontBox = h("input", { type: "checkbox", id: "front-only", onchange: (e) => { this.frontOnly = e.target.checked; this.restart(); } });
    this.sizeSelect = h("select", { "aria-label": "Rows per page", onchange: (e) => { this.limit = Number(e.target.value); this.restart(); } },
      PAGE_SIZES.map((n) => h("option", { value: n, selected: n === this.limit }, `${n} rows`)));
    this.pager = h("div", { class: "pager" });
    this.tableBox = h("div", { class: "table-wrap" });
    replace(container,
      h("div", { class: "toolbar" }, this.tabs,
        h("label", { class: "check" }, this.frontBox, "on the front only"),
        h("div", { class: "spacer" }), this.sizeSelect, this.pager),
      this.tableBox);
    this.drawTabs();
  }

  drawTabs() {
    replace(this.tabs, FILTERS.map((f) => h("button", {
      class: ["seg-btn", f.key === this.filter && "active"], role: "tab", dataset: { filter: f.key },
      "aria-selected": String(f.key === this.filter),
      onclick: () => {
        this.filter = f.key;
        // Only completed trials have values to sort by; other states fall back to newest first.
        if (!["all", "completed"].includes(f.key) && !/^-?number$/.test(this.sort)) this.sort = "-number";
        this.drawTabs();
        this.restart();
      },
    }, f.label)));
  }

  restart() {
    this.cursors = [null];
    this.page = 0;
    this.load();
  }

  params() {
    const f = FILTERS.find((x) => x.key === this.filter);
    return query({
      state: f.states, on_front: this.frontOnly ? "true" : null, sort: this.sort, limit: this.limit,
      cursor: this.cursors[this.page],
    });
  }

  /** The URL of the page on show; the study page fetches the first one early with it. */
  url() {
    return `/v1/studies/${this.studyId}/trials${this.params()}`;
  }

  async load(prefetched = null) {
    const url = this.url();
    this.loading = url;
    try {
      const data = await (prefetched || get(url));
      if (this.loading !== url) return;
      this.items = data.items;
      this.nextCursor = data.next_cursor;
      this.draw();
    } catch (error) {
      if (this.loading === url) replace(this.tableBox, errorBox(error));
    }
  }

  /** A trial changed (live event). */
  update(trial) {
    if (this.page === 0) { this.refresh(); return; }
    const row = this.rows.get(trial.number);
    if (row) {
      const i = this.items.findIndex((t) => t.number === trial.number);
      if (i >= 0) this.items[i] = trial;
      row.replaceWith(this.row(trial));
    }
  }

  setSort(key) {
    this.sort = this.sort === key ? `-${key}` : this.sort === `-${key}` ? key : key === "number" ? "-number" : key;
    this.restart();
  }

  header(key, label, cls = "num") {
    const active = this.sort.replace(/^-/, "") === key;
    const arrow = active ? (this.sort.startsWith("-") ? " ▾" : " ▴") : "";
    return h("th", { class: [cls, "sortable", active && "sorted"], dataset: { sort: key },
      title: "Sort by this column (click again to reverse)", onclick: () => this.setSort(key) }, label, h("span", { class: "arrow" }, arrow));
  }

  draw() {
    const sortedBy = this.sort.replace(/^-/, "");
    replace(this.pager,
      h("button", { class: "btn btn-small", id: "prev-page", disabled: this.page === 0, onclick: () => { this.page--; this.load(); } }, "‹ Prev"),
      h("span", { class: "muted page-no" }, `Page ${this.page + 1}`),
      h("button", { class: "btn btn-small", id: "next-page", disabled: !this.nextCursor, onclick: () => {
        this.cursors[this.page + 1] = this.nextCursor;
        this.page++;
        this.load();
      } }, "Next ›"));
    this.rows = new Map();
    const head = h("tr", null,
      this.header("number", "#"), h("th", null, "State"),
      this.objectives.map((o) => this.header(o.name, [o.name, h("span", { class: "dir" }, o.direction === "maximize" ? " ↑" : " ↓")])),
      h("th", null, "Configuration"), h("th", null, "Worker"), h("th", { class: "num" }, "Took"), h("th", null, "Finished"));
    const body = this.items.length
      ? this.items.map((t) => this.row(t))
      : [h("tr", null, h("td", { colspan: 6 + this.objectives.length, class: "empty" },
        sortedBy !== "number" ? `No trial with a value for ${sortedBy} matches.` : "No trial matches."))];
    replace(this.tableBox, h("table", { class: "grid-table trials-table", id: "trials" }, h("thead", null, head), h("tbody", null, body)));
    this.onDrawn();
  }

  row(t) {
    const took = duration(t.started_at, t.finished_at);
    const tr = h("tr", {
      class: ["clickable", t.on_front && "on-front", t.is_baseline && "is-baseline"], dataset: { number: t.number, state: t.state },
      onclick: () => this.onOpen(t), onmouseenter: () => this.onHover(t), onmouseleave: () => this.onHover(null),
    },
    h("td", { class: "num nowrap" }, h("a", { href: `/ui/studies/${this.studyId}/trials/${t.number}`, onclick: (e) => e.stopPropagation() }, t.number),
      t.on_front ? h("span", { class: "front-star", title: "on the Pareto front" }, " ★") : null,
      t.is_baseline ? h("span", { class: "tag tag-baseline" }, "baseline") : null),
    h("td", null, stateBadge(t.state), t.stage && ["running", "queued"].includes(t.state) ? h("span", { class: "muted phase" }, ` ${t.stage}`) : null,
      t.phase && t.state === "running" ? h("span", { class: "muted phase" }, ` ${t.phase}`) : null,
      t.failure_reason ? h("span", { class: "muted phase", title: t.message || "" }, ` ${t.failure_reason}`) : null),
    this.objectives.map((o) => h("td", { class: "num nowrap" }, valueCell(t, o))),
    h("td", { class: "config-cell", title: configText(t.config) }, configText(t.config)),
    h("td", { class: "muted" }, t.worker_id ? `w${t.worker_id}` : "–"),
    h("td", { class: "num muted" }, took === null ? "–" : seconds(took)),
    h("td", { class: "muted nowrap", title: stamp(t.finished_at) }, t.finished_at ? ago(t.finished_at) : "–"));
    this.rows.set(t.number, tr);
    return tr;
  }
}

export function valueCell(t, o) {
  const v = t.values ? t.values[o.name] : null;
  if (!Number.isFinite(v)) return screeningCell(t, o);
  const unit = unitOf(o.name);
  return [h("span", null, num(v)), unit ? h("span", { class: "unit" }, ` ${unit}`) : null,
    t.relative && !t.is_baseline ? [" ", ratioPill(t.relative[o.name], o.direction)] : null];
}

/** No objective value: a screening value, marked as one (not measured fully), if there is. */
function screeningCell(t, o) {
  const v = t.screening?.values?.[o.name];
  if (!Number.isFinite(v)) return h("span", { class: "muted" }, "–");
  return h("span", { class: "screened-value", title: "screening value: a short measurement, not an objective value" },
    `≈${num(v)}`, unitOf(o.name) ? h("span", { class: "unit" }, ` ${unitOf(o.name)}`) : null);
}
