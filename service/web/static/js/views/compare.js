// Several studies of one kernel side by side: their fronts in one scatter (a colour per study),
// normalised to each study's own baseline or raw, on two objectives chosen from theirs; what
// differs between their targets beside it; every point a link to its trial. The page's state
// (studies, axes, normalised or raw) lives in the URL, so a link shows what it showed.

import { get, query } from "../api.js";
import { h, replace } from "../dom.js";
import { num, unitOf, valueText } from "../format.js";
import { navigate } from "../router.js";
import { seriesColor } from "../charts/colors.js";
import { Scatter } from "../charts/scatter.js";
import { card, errorBox, placeTooltip, ratioPill, spinner, stateBadge } from "../widgets.js";

const MODES = [["normalised", "normalised"], ["raw", "raw"]];
const DEVICE_ROWS = [["gpu", "GPU"], ["compute_capability", "compute capability"], ["cpu", "CPU"]];

export function compareView(root, { query: q, ctx }) {
  ctx.setTitle("Compare studies");
  ctx.setCrumbs([{ text: "Studies", href: "/ui/" }, { text: "Compare" }]);
  const abort = new AbortController();
  const page = new ComparePage(root, q, abort.signal);
  page.start();
  return () => { abort.abort(); page.destroy(); };
}

/** A target field's name as people read it (toolchain.triton -> triton version). */
function fieldLabel(field) {
  if (field.startsWith("toolchain.")) return `${field.slice("toolchain.".length)} version`;
  const device = DEVICE_ROWS.find(([key]) => key === field);
  return device ? device[1] : { workload: "workload shapes", acf: "ACF", pool: "pool" }[field] || field;
}

/** A target field's value as text: lists joined, shapes by their dims, an ACF as yes or no. */
function targetText(value, field = "") {
  if (Array.isArray(value)) return value.length ? value.map((v) => targetText(v)).join(", ") : field === "workload" ? "none named" : "not reported";
  if (value && typeof value === "object") {
    const dims = Object.entries(value.dims || {}).map(([k, v]) => `${k}=${v}`).join(" ");
    return value.weight === undefined || value.weight === 1 ? dims : `${dims} (weight ${num(value.weight)})`;
  }
  if (typeof value === "boolean") return value ? "yes" : "no";
  return String(value);
}

function trialHref(t) {
  return `/ui/studies/${t.group}/trials/${t.number}`;
}

class ComparePage {
  constructor(root, q, signal) {
    Object.assign(this, { root, q, signal });
    this.onTheme = () => { if (this.scatter) this.scatter.draw(); };
  }

  async start() {
    const ids = this.q.get("studies");
    if (!ids) {
      replace(this.root, h("div", { class: "empty-state" },
        h("h3", null, "No studies to compare"),
        h("p", { class: "muted" }, "Tick 2 to 6 studies of one kernel on the ", h("a", { href: "/ui/" }, "studies list"),
          ", then Compare.")));
      return;
    }
    replace(this.root, spinner("Loading studies"));
    try {
      this.data = await get(`/v1/compare${query({ studies: ids })}`, { signal: this.signal });
    } catch (error) {
      if (!this.signal.aborted) {
        replace(this.root, h("div", { id: "compare-error" }, errorBox(error),
          h("p", { class: "muted" }, h("a", { href: "/ui/" }, "Back to the studies"))));
      }
      return;
    }
    if (this.signal.aborted) return;
    this.objectives = this.data.objectives;
    this.directions = Object.fromEntries(this.objectives.map((o) => [o.name, o.direction]));
    this.colors = new Map(this.data.studies.map((s, i) => [s.id, seriesColor(i)]));
    this.readState();
    this.build();
    this.draw();
    window.addEventListener("paretune:theme", this.onTheme);
  }

  destroy() {
    window.removeEventListener("paretune:theme", this.onTheme);
    if (this.scatter) this.scatter.destroy();
  }

  /** The axes and mode from the URL; anything it does not name, or names wrongly, defaults. */
  readState() {
    const names = this.objectives.map((o) => o.name);
    this.axisChoices = names.length > 1 ? names : [...names, "#"];
    const [x, y] = names.length > 1 ? names : ["#", names[0]];
    const pick = (key, fallback) => (this.axisChoices.includes(this.q.get(key)) ? this.q.get(key) : fallback);
    this.state = { x: pick("x", x), y: pick("y", y), values: this.q.get("values") === "raw" ? "raw" : "normalised" };
  }

  /** The URL of what is shown now: reloading or sharing it shows the same. */
  writeState() {
    const q = new URLSearchParams(location.search);
    q.set("studies", this.data.studies.map((s) => s.id).join(","));
    for (const key of ["x", "y", "values"]) q.set(key, this.state[key]);
    history.replaceState(null, "", `${location.pathname}?${q.toString().replaceAll("%2C", ",")}`);
  }

  build() {
    const studies = this.data.studies;
    const label = (n) => (n === "#" ? "trial number" : n);
    const select = (id, key) => h("select", { id, "aria-label": id.replace("-", " "),
      onchange: (e) => this.change({ [key]: e.target.value }) },
    this.axisChoices.map((n) => h("option", { value: n, selected: n === this.state[key] }, label(n))));
    this.modeButtons = h("div", { class: "segmented", role: "group", "aria-label": "Values" },
      MODES.map(([mode, text]) => h("button", { class: "seg-btn", id: `values-${mode}`, dataset: { mode },
        onclick: () => this.change({ values: mode }) }, text)));
    this.tooltip = h("div", { class: "tooltip", hidden: true });
    const plot = h("div", { class: "scatter", id: "scatter" });
    const legend = h("div", { class: "legend", id: "compare-legend" },
      studies.map((s) => h("span", { class: "key", dataset: { study: s.id } },
        h("i", { class: "mark", style: { background: this.colors.get(s.id) } }),
        h("a", { href: `/ui/studies/${s.id}` }, `#${s.id} ${s.name}`))),
      h("span", { class: "key" }, h("i", { class: "mark mark-baseline" }), "baselines (normalised: all at 1)"),
      h("span", { class: "hint" }, "drag to zoom · click a point to open its trial"));
    const chart = card("Fronts", { cls: "scatter-card" },
      h("div", { class: "chart-controls" },
        h("label", null, "X", select("x-axis", "x")), h("label", null, "Y", select("y-axis", "y")),
        h("label", null, "Values", this.modeButtons)),
      h("div", { class: "scatter-wrap" }, plot, this.tooltip), legend);
    this.fronts = h("div", { class: "table-wrap" });
    replace(this.root, h("div", { class: "compare-page", id: "compare" },
      h("div", { class: "page-head" }, h("div", null, h("h1", null, "Compare studies"),
        h("p", { class: "muted" }, `${studies.length} studies of one kernel, each against its own baseline.`))),
      h("div", { class: "layout-main" }, chart,
        h("aside", { class: "side" }, card("Differences", { id: "differences" }, this.differences()))),
      card("Targets", { id: "targets" }, this.targets()),
      card("Fronts against their baselines", { id: "fronts" }, this.fronts)));
    this.scatter = new Scatter(plot, {
      height: 460,
      onHover: (t, px, py) => this.showTooltip(t, px, py),
      onClick: (t) => navigate(trialHref(t)),
      // what is drawn, "x y values", for tests and tools to wait on
      onDrawn: () => { this.root.querySelector("#compare").dataset.drawn = `${this.state.x} ${this.state.y} ${this.state.values}`; },
    });
  }

  change(next) {
    Object.assign(this.state, next);
    this.draw();
  }

  draw() {
    const { x, y, values } = this.state;
    this.writeState();
    const page = this.root.querySelector("#compare");
    Object.assign(page.dataset, { x, y, values });
    for (const button of this.modeButtons.children) {
      const on = button.dataset.mode === values;
      button.classList.toggle("active", on);
      button.setAttribute("aria-pressed", String(on));
    }
    for (const [id, key] of [["#x-axis", "x"], ["#y-axis", "y"]]) this.root.querySelector(id).value = this.state[key];
    const { front, baselines } = this.series();
    const titles = values === "normalised" ? Object.fromEntries(this.objectives.map((o) => [o.name, `${o.name} / baseline`])) : {};
    this.scatter.set({ front, baselines, x, y, color: null, directions: this.directions, titles, fit: "front" });
    this.drawFronts();
  }

  /** Every study's front and baseline as scatter points, in the values chosen. */
  series() {
    const raw = this.state.values === "raw";
    const front = [];
    const baselines = [];
    for (const s of this.data.studies) {
      const common = { group: s.id, color: this.colors.get(s.id), study: s };
      for (const p of s.points) {
        front.push({ ...common, number: p.number, config: p.config, raw: p.values, normalised: p.normalised,
          values: raw ? p.values : p.normalised, is_baseline: p.number === s.baseline_number });
      }
      if (s.baseline) {
        // normalised, every baseline is at 1: one diamond, in the baseline's own colour
        const ones = Object.fromEntries(Object.entries(s.baseline).filter(([, v]) => v).map(([k]) => [k, 1]));
        baselines.push({ ...common, color: raw ? common.color : null, number: s.baseline_number, raw: s.baseline,
          normalised: ones, values: raw ? s.baseline : ones, is_baseline: true });
      }
    }
    return { front, baselines };
  }

  differences() {
    const studies = this.data.studies;
    if (!this.data.differences.length) {
      return h("p", { class: "muted", id: "no-differences" },
        "None: the studies ran on the same GPU, shapes, toolchain, ACF setting and pool.");
    }
    return h("ul", { class: "diff-list" }, this.data.differences.map((d) =>
      h("li", { dataset: { field: d.field } },
        h("div", { class: "diff-field" }, fieldLabel(d.field)),
        studies.map((s, i) => h("div", { class: "diff-value" },
          h("span", { class: "swatch", style: { background: this.colors.get(s.id) } }),
          h("span", { class: "muted" }, `#${s.id} `), targetText(d.values[i], d.field))))));
  }

  targets() {
    const studies = this.data.studies;
    const differs = new Set(this.data.differences.map((d) => d.field));
    const tools = [...new Set(studies.flatMap((s) => Object.keys(s.target.toolchain)))];
    const rows = [
      ...DEVICE_ROWS.filter(([key]) => studies.some((s) => s.target[key].length)).map(([key]) => [key, (s) => s.target[key]]),
      ["workload", (s) => s.target.workload],
      ...tools.map((tool) => [`toolchain.${tool}`, (s) => s.target.toolchain[tool] || []]),
      ["acf", (s) => s.target.acf], ["pool", (s) => s.target.pool],
    ];
    return h("div", { class: "table-wrap" }, h("table", { class: "grid-table targets-table" },
      h("thead", null, h("tr", null, h("th", null, ""), studies.map((s) => h("th", null,
        h("span", { class: "swatch", style: { background: this.colors.get(s.id) } }), `#${s.id} ${s.name}`)))),
      h("tbody", null, rows.map(([field, value]) => h("tr", { class: differs.has(field) ? "differs" : null, dataset: { field } },
        h("th", null, fieldLabel(field)), studies.map((s) => h("td", null, targetText(value(s), field))))))));
  }

  /** Each study's front as rows: raw values and ratios to its baseline, best first on x. */
  drawFronts() {
    const x = this.state.x === "#" ? this.objectives[0].name : this.state.x;
    const sign = this.directions[x] === "maximize" ? -1 : 1;
    const value = (t, o) => {
      const v = t.raw?.[o.name];
      const unit = unitOf(o.name);
      return [
        h("td", { class: "num nowrap" }, Number.isFinite(v) ? num(v) : "–", unit ? h("span", { class: "unit" }, ` ${unit}`) : null),
        h("td", { class: "num ratio-col" }, t.is_baseline ? h("span", { class: "muted" }, "1×") : ratioPill(t.normalised?.[o.name], o.direction)),
      ];
    };
    const { front, baselines } = this.series();
    const line = (t) => h("tr", { class: ["clickable", t.is_baseline ? "is-baseline" : "on-front"], dataset: { study: t.group, number: t.number },
      onclick: (e) => { if (!e.target.closest("a")) navigate(trialHref(t)); },
      onmouseenter: () => this.scatter.highlight(t), onmouseleave: () => this.scatter.highlight(null) },
    h("td", null, h("span", { class: "swatch", style: { background: this.colors.get(t.group) } }), h("a", { href: `/ui/studies/${t.group}` }, `#${t.group}`)),
    h("td", { class: "num" }, h("a", { href: trialHref(t), class: "trial-link" }, t.number), t.is_baseline ? h("span", { class: "muted" }, " baseline") : null),
    this.objectives.map((o) => value(t, o)));
    const bodies = this.data.studies.map((s) => {
      const base = baselines.find((b) => b.group === s.id);
      const rows = front.filter((t) => t.group === s.id && !t.is_baseline)
        .sort((a, b) => sign * ((a.raw?.[x] ?? 0) - (b.raw?.[x] ?? 0)));
      return h("tbody", { dataset: { study: s.id } },
        h("tr", { class: "study-row" }, h("td", { colspan: 2 + 2 * this.objectives.length },
          h("a", { href: `/ui/studies/${s.id}` }, s.name), " ", stateBadge(s.state),
          h("span", { class: "muted" }, ` · ${s.points.length} on the front`))),
        base ? line(base) : null, rows.map(line));
    });
    replace(this.fronts, h("table", { class: "grid-table front-table", id: "fronts-table" },
      h("thead", null,
        h("tr", null, h("th", null, "study"), h("th", { class: "num" }, "trial"),
          this.objectives.map((o) => h("th", { colspan: 2, class: "num group" }, o.name, h("span", { class: "dir" }, o.direction === "maximize" ? " ↑" : " ↓")))),
        h("tr", { class: "subhead" }, h("th"), h("th"), this.objectives.map(() => [h("th", { class: "num" }, "value"), h("th", { class: "num" }, "vs its base")]))),
      bodies));
  }

  showTooltip(t, px, py) {
    const tip = this.tooltip;
    if (!t) { tip.hidden = true; return; }
    const rows = this.objectives.map((o) => h("tr", null, h("th", null, o.name),
      h("td", { class: "num" }, num(t.raw?.[o.name]), " ", t.is_baseline ? null : ratioPill(t.normalised?.[o.name], o.direction))));
    const config = Object.entries(t.config || {}).map(([k, v]) => h("div", null, h("span", { class: "k" }, k), h("span", { class: "v" }, valueText(v))));
    replace(tip,
      h("div", { class: "tip-title" }, h("span", { class: "swatch", style: { background: this.colors.get(t.group) } }),
        `#${t.group} ${t.study.name} · trial ${t.number}`, t.is_baseline ? h("span", { class: "tag tag-baseline" }, "baseline") : null),
      h("table", null, h("tbody", null, rows)),
      config.length ? h("div", { class: "tip-config" }, config) : null);
    tip.hidden = false;
    placeTooltip(tip, px, py);
  }
}
