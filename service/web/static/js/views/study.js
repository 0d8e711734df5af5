// One study: header with actions, the Pareto scatter, hypervolume over trials, the front
// with ratios to the baseline, and all trials; kept live by the study's event stream. The
// scatter's cloud of every trial comes from the points endpoint (columns), fetched once the
// first screen is up and then only for what changed, as the event stream says that it did.

import { follow, get, post } from "../api.js";
import { confirmDialog, h, replace, throttle, toast } from "../dom.js";
import { ago, isAcf, num, stamp, unitOf, valueText } from "../format.js";
import { navigate } from "../router.js";
import { rampCss } from "../charts/colors.js";
import { StepChart } from "../charts/line.js";
import { PointCloud } from "../charts/points.js";
import { Scatter } from "../charts/scatter.js";
import { can, card, errorBox, placeTooltip, progressBar, ratioPill, spinner, stateBadge } from "../widgets.js";
import { TrialsTable, valueCell } from "./trials_table.js";

const FRONT_ROWS = 50; // more on request: a long front is read on the chart, not row by row
const DETAILS_KEPT = 200; // trials whose configuration the scatter's tooltip has fetched
const PLOTTED = ["completed", "screened_out"];

const ACTIONS = {
  pause: { label: "Pause", when: ["running"], done: "paused" },
  resume: { label: "Resume", when: ["paused"], done: "resumed" },
  cancel: { label: "Cancel study", when: ["running", "paused"], done: "cancelled", danger: true },
};

export function studyView(root, { params, query, ctx }) {
  const id = Number(params.id);
  const abort = new AbortController();
  const page = new StudyPage(root, id, query, ctx, abort.signal);
  page.start();
  return () => { abort.abort(); page.destroy(); };
}

class StudyPage {
  constructor(root, id, query, ctx, signal) {
    Object.assign(this, { root, id, query, ctx, signal });
    this.frontTrials = [];
    this.baseline = null;
    this.details = new Map(); // trial number -> the trial's row, for tooltips of cloud points
    this.refetchFront = throttle(() => this.loadFront(), 1500);
    this.refetchPoints = throttle(() => this.loadPoints(), 500);
    this.onTheme = () => { if (this.scatter) { this.scatter.draw(); this.drawLegend(); } };
  }

  async start() {
    replace(this.root, spinner("Loading study"));
    // Everything the first screen needs is asked for at once; the first page of the trials
    // table (newest first) does not depend on the study's objectives.
    const firstUrl = `/v1/studies/${this.id}/trials?sort=-number&limit=25`;
    const firstPage = get(firstUrl, { signal: this.signal });
    firstPage.catch(() => {});
    let study, front, me;
    try {
      [study, front, me] = await Promise.all([
        get(`/v1/studies/${this.id}`, { signal: this.signal }),
        get(`/v1/studies/${this.id}/front`, { signal: this.signal }),
        this.ctx.me,
      ]);
    } catch (error) {
      if (!this.signal.aborted) replace(this.root, errorBox(error));
      return;
    }
    if (this.signal.aborted) return;
    this.me = me;
    this.study = study;
    this.ctx.setTitle(study.name);
    this.ctx.setCrumbs([{ text: "Studies", href: "/ui/" }, { text: study.name }]);
    this.objectives = study.objectives;
    this.directions = Object.fromEntries(this.objectives.map((o) => [o.name, o.direction]));
    this.build();
    this.applyStudy(study);
    this.applyFront(front);
    window.addEventListener("paretune:theme", this.onTheme);
    await this.table.load(this.table.url() === firstUrl ? firstPage : null);
    // The cloud only once the first screen is up; then the event stream from where it ends.
    await this.loadPoints();
    if (!this.signal.aborted) this.follow();
  }

  destroy() {
    window.removeEventListener("paretune:theme", this.onTheme);
    this.refetchFront.cancel();
    this.refetchPoints.cancel();
    if (this.table) this.table.refresh.cancel();
    if (this.scatter) this.scatter.destroy();
    if (this.hvChart) this.hvChart.destroy();
  }

  build() {
    const s = this.study;
    this.badge = h("span");
    this.live = h("span", { class: "live", id: "live" }, h("span", { class: "dot" }), "connecting");
    this.actions = h("div", { class: "actions", id: "study-actions" });
    this.progress = h("div", { class: "progress-row" });
    this.kpis = h("div", { class: "kpis" });
    this.bestList = h("div", { class: "best-grid" });
    this.frontBox = h("div", { class: "table-wrap" });
    this.frontCount = h("span", { class: "count" });

    const meta = [`#${s.id}`, `pool ${s.pool}`, `${s.backend} backend`, `${s.sampler} sampler`,
      `parallelism ${s.parallelism}`, ...(s.priority && s.priority !== "normal" ? [`priority ${s.priority}`] : [])];
    const head = h("div", { class: "page-head study-head" },
      h("div", { class: "grow" },
        h("div", { class: "title-row" }, h("h1", null, s.name), this.badge, this.live),
        s.document?.description ? h("p", { class: "description" }, s.document.description) : null,
        h("div", { class: "meta" }, meta.map((m) => h("span", null, m)),
          h("span", { title: stamp(s.created_at) }, `created ${ago(s.created_at)}`)),
        s.queued_reason ? h("p", { class: "queued-reason", id: "queued-reason" }, "Waiting: ", s.queued_reason, " (",
          h("a", { href: "/ui/pools" }, "pools"), ")") : null),
      this.actions);

    const scatterCard = this.buildScatter();
    const hvBox = h("div", { class: "hv-chart" });
    const side = h("aside", { class: "side" },
      card("Hypervolume", { cls: "hv-card" }, this.kpis, hvBox),
      card("Best against the baseline", {}, this.bestList),
      startedFrom(s.warm_start),
      workloadCard(s.document?.kernel?.workload));

    const trialsBox = h("div");
    replace(this.root, h("div", { class: "study-page", id: "study", dataset: { study: s.id } },
      head, this.progress,
      h("div", { class: "layout-main" }, scatterCard, side),
      card(["Pareto front ", this.frontCount], { id: "front" }, this.frontBox),
      card("All trials", { id: "all-trials" }, trialsBox)));

    this.hvChart = new StepChart(hvBox, { height: 170, xLabel: "completed trials" });
    this.table = new TrialsTable(trialsBox, {
      studyId: this.id, objectives: this.objectives, onDrawn: () => this.mark("table"),
      onOpen: (t) => this.open(t),
      onHover: (t) => this.scatter.highlight(t),
    });
  }

  buildScatter() {
    const names = this.objectives.map((o) => o.name);
    const pick = (key, fallback, allowed) => (allowed.includes(this.query.get(key)) ? this.query.get(key) : fallback);
    const axisChoices = names.length > 1 ? names : [...names, "#"];
    // One objective: plot it against the trial number, which draws its best-so-far staircase.
    const [defaultX, defaultY] = names.length > 1 ? names : ["#", names[0]];
    this.axes = {
      x: pick("x", defaultX, axisChoices),
      y: pick("y", defaultY, axisChoices),
      color: pick("color", names[2] || "", [...names, "#", ""]),
    };
    const label = (n) => (n === "#" ? "trial number" : n);
    const select = (id, key, choices) => h("select", { id, "aria-label": id.replace("-", " "),
      onchange: (e) => { this.axes[key] = e.target.value; this.axesChanged(); } },
    choices.map((n) => h("option", { value: n, selected: n === this.axes[key] }, n === "" ? "none" : label(n))));
    this.legend = h("div", { class: "legend" });
    this.logBox = h("input", { type: "checkbox", id: "log-scale", checked: this.query.get("log") === "1",
      onchange: () => this.axesChanged() });
    this.fitSelect = h("select", { id: "fit", "aria-label": "What the axes fit", onchange: () => this.axesChanged() },
      h("option", { value: "front", selected: this.query.get("fit") !== "all" }, "around the front"),
      h("option", { value: "all", selected: this.query.get("fit") === "all" }, "all trials"));
    this.resetZoom = h("button", { class: "btn btn-small", hidden: true, onclick: () => this.scatter.resetZoom() }, "Reset zoom");
    this.tooltip = h("div", { class: "tooltip", hidden: true });
    this.cloudCount = h("span", { class: "muted", id: "cloud-count" });
    const plot = h("div", { class: "scatter", id: "scatter" });
    const controls = h("div", { class: "chart-controls" },
      h("label", null, "X", select("x-axis", "x", axisChoices)),
      h("label", null, "Y", select("y-axis", "y", axisChoices)),
      h("label", null, "Colour", select("color-by", "color", ["", ...names, "#"])),
      h("label", null, "Fit", this.fitSelect),
      h("label", { class: "check" }, this.logBox, "log scale"),
      h("div", { class: "spacer" }), this.resetZoom);
    const box = card("Trade-off", { cls: "scatter-card", actions: this.cloudCount }, controls, h("div", { class: "scatter-wrap" }, plot, this.tooltip), this.legend);
    this.scatter = new Scatter(plot, {
      height: 430,
      onHover: (t, px, py) => this.showTooltip(t, px, py),
      onClick: (t) => this.open(t),
      onZoom: (zoomed) => { this.resetZoom.hidden = !zoomed; },
      onDrawn: ({ front, baseline, outside, version }) => {
        if (front || baseline) this.mark("front-drawn");
        this.outside = outside;
        this.drawCloudCount();
        if (this.cloudVersion !== undefined && version >= this.cloudVersion) this.cloudDrawn();
      },
    });
    this.scatter.set({ x: this.axes.x, y: this.axes.y, color: this.axes.color || null, directions: this.directions,
      log: this.logBox.checked, fit: this.fitSelect.value });
    this.drawLegend();
    return box;
  }

  axesChanged() {
    const q = new URLSearchParams(location.search);
    for (const k of ["x", "y", "color"]) q.set(k, this.axes[k]);
    q.set("fit", this.fitSelect.value);
    q.set("log", this.logBox.checked ? "1" : "0");
    history.replaceState(null, "", `${location.pathname}?${q}`);
    this.scatter.set({ x: this.axes.x, y: this.axes.y, color: this.axes.color || null, log: this.logBox.checked,
      fit: this.fitSelect.value });
    this.drawLegend();
    this.drawFrontTable();
  }

  drawLegend() {
    const c = this.axes.color;
    const dark = document.documentElement.dataset.theme === "dark";
    const items = [
      h("span", { class: "key" }, h("i", { class: "mark mark-front" }), "Pareto front"),
      h("span", { class: "key" }, h("i", { class: "mark mark-baseline" }), "baseline"),
      h("span", { class: "key" }, h("i", { class: "mark mark-point" }), "other trials"),
    ];
    if (c) {
      const maximize = c === "#" || this.directions[c] === "maximize";
      items.push(h("span", { class: "key colorbar" },
        h("span", { class: "muted" }, c === "#" ? "trial number" : c),
        h("span", { class: "muted" }, c === "#" ? "first" : maximize ? "low" : "high"),
        h("i", { class: "ramp", style: { background: rampCss(dark) } }),
        h("span", { class: "muted" }, c === "#" ? "last" : maximize ? "high" : "low"),
        c === "#" ? null : h("span", { class: "muted" }, "(brighter is better)")));
    }
    items.push(h("span", { class: "hint" }, "drag to zoom · click a point to open it"));
    replace(this.legend, items);
  }

  showTooltip(t, px, py) {
    const tip = this.tooltip;
    this.tipFor = t ? { number: t.number, px, py } : null;
    if (!t) { tip.hidden = true; return; }
    if (!t.config) t = this.details.get(t.number) || this.fetchDetail(t);
    const rows = this.objectives.map((o) => h("tr", null, h("th", null, o.name), h("td", { class: "num" }, valueCell(t, o))));
    const config = Object.entries(t.config || {}).map(([k, v]) => h("div", null, h("span", { class: "k" }, k), h("span", { class: "v" }, valueText(v))));
    replace(tip,
      h("div", { class: "tip-title" }, `Trial #${t.number}`,
        this.isFront(t) ? h("span", { class: "tag tag-front" }, "front") : null,
        t.is_baseline ? h("span", { class: "tag tag-baseline" }, "baseline") : null),
      h("table", null, h("tbody", null, rows)),
      h("div", { class: "tip-config" }, config));
    tip.hidden = false;
    placeTooltip(tip, px, py);
  }

  /** A cloud point has values only: its row (configuration, ratios) is fetched on hover. */
  fetchDetail(t) {
    this.details.set(t.number, t);
    get(`/v1/studies/${this.id}/trials/${t.number}`, { signal: this.signal }).then((row) => {
      this.details.set(t.number, row);
      if (this.details.size > DETAILS_KEPT) this.details.delete(this.details.keys().next().value);
      const tip = this.tipFor;
      if (tip && tip.number === t.number) this.showTooltip(row, tip.px, tip.py);
    }).catch(() => this.details.delete(t.number));
    return t;
  }

  /** Performance marks (once per page) that benchmarks read: front-drawn, table, cloud. */
  mark(name) {
    this.marked = this.marked || new Set();
    if (this.marked.has(name)) return;
    this.marked.add(name);
    performance.mark(`paretune:${name}`);
  }

  isFront(t) {
    return this.frontTrials.some((f) => f.number === t.number);
  }

  open(t) {
    navigate(`/ui/studies/${this.id}/trials/${t.number}`);
  }

  applyStudy(s) {
    this.study = { ...this.study, ...s, document: this.study.document };
    replace(this.badge, stateBadge(s.state));
    replace(this.progress, progressBar(s.progress));
    this.drawActions();
    this.drawKpis();
  }

  drawActions() {
    const s = this.study;
    if (!can(this.me, "member")) {
      replace(this.actions, h("span", { class: "badge role role-viewer", title: "Viewers can look but not change studies" }, "read-only"));
      return;
    }
    replace(this.actions, Object.entries(ACTIONS).filter(([, a]) => a.when.includes(s.state)).map(([name, a]) =>
      h("button", { class: ["btn", a.danger ? "btn-danger-outline" : ""], id: name, onclick: () => this.act(name) }, a.label)));
    // Promoting a front point to an artifact will live next to these once artifacts exist.
  }

  async act(name) {
    const a = ACTIONS[name];
    if (name === "cancel") {
      const ok = await confirmDialog({
        title: "Cancel this study?", danger: true, confirm: "Cancel study",
        body: "Queued trials are dropped and running ones are stopped. Completed trials and the front are kept.",
      });
      if (!ok) return;
    }
    try {
      const s = await post(`/v1/studies/${this.id}/${name}`);
      this.applyStudy(s);
      toast(`Study ${a.done}`, "ok");
    } catch (error) {
      toast(error.message);
    }
  }

  drawKpis() {
    const s = this.study;
    replace(this.kpis,
      h("div", { class: "kpi" }, h("div", { class: "kpi-value", id: "hypervolume" }, s.hypervolume === null ? "–" : num(s.hypervolume, 5)),
        h("div", { class: "kpi-label" }, "dominated volume, baseline = 1")),
      h("div", { class: "kpi" }, h("div", { class: "kpi-value" }, s.front_size), h("div", { class: "kpi-label" }, "on the front")),
      h("div", { class: "kpi" }, h("div", { class: "kpi-value" }, s.progress.completed), h("div", { class: "kpi-label" }, "completed")));
    replace(this.bestList, this.objectives.map((o) => {
      const v = s.best[o.name];
      const b = s.baseline ? s.baseline[o.name] : null;
      const unit = unitOf(o.name);
      return h("div", { class: "best-row" },
        h("div", { class: "best-name" }, o.name, h("span", { class: "dir" }, o.direction === "maximize" ? " ↑" : " ↓")),
        h("div", { class: "num best-value" }, Number.isFinite(v) ? `${num(v)}${unit ? ` ${unit}` : ""}` : "–"),
        h("div", { class: "num muted" }, Number.isFinite(b) ? `base ${num(b)}` : "no baseline yet"),
        Number.isFinite(v) && b ? ratioPill(v / b, o.direction) : h("span"));
    }));
  }

  async loadFront() {
    try {
      this.applyFront(await get(`/v1/studies/${this.id}/front`, { signal: this.signal }));
    } catch (error) {
      if (!this.signal.aborted) toast(`Could not refresh the front: ${error.message}`);
    }
  }

  applyFront(front) {
    this.frontTrials = front.trials;
    // The baseline is a reference only once it has values (it may still be queued or running).
    this.baseline = front.baseline && front.baseline.values ? front.baseline : null;
    this.hvChart.set(front.history.map((p) => ({ x: p.completed, y: p.hypervolume })));
    this.scatter.set({ front: front.trials, baseline: this.baseline });
    if (front.hypervolume !== null) this.study.hypervolume = front.hypervolume;
    this.drawFrontTable();
    this.root.querySelector("#study").dataset.front = "ready";
  }

  drawFrontTable() {
    const x = this.axes.x === "#" ? this.objectives[0].name : this.axes.x;
    const sign = this.directions[x] === "maximize" ? -1 : 1;
    const rows = [...this.frontTrials].sort((a, b) => sign * ((a.values?.[x] ?? 0) - (b.values?.[x] ?? 0)));
    this.frontCount.textContent = `${rows.length} trial${rows.length === 1 ? "" : "s"}`;
    if (!rows.length && !this.baseline) {
      replace(this.frontBox, h("p", { class: "muted empty" }, "No trial has completed yet."));
      return;
    }
    const configKeys = Object.keys((rows[0] || this.baseline).config || {});
    const line = (t, cls) => h("tr", {
      class: ["clickable", cls], dataset: { number: t.number },
      onclick: () => this.open(t), onmouseenter: () => this.scatter.highlight(t), onmouseleave: () => this.scatter.highlight(null),
    },
    h("td", { class: "num" }, h("a", { href: `/ui/studies/${this.id}/trials/${t.number}`, onclick: (e) => e.stopPropagation() }, t.number)),
    this.objectives.flatMap((o) => {
      const v = t.values?.[o.name];
      const unit = unitOf(o.name);
      return [
        h("td", { class: "num nowrap" }, Number.isFinite(v) ? num(v) : "–", unit ? h("span", { class: "unit" }, ` ${unit}`) : null),
        h("td", { class: "num ratio-col" }, t.is_baseline ? h("span", { class: "muted" }, "1×") : ratioPill(t.relative?.[o.name], o.direction)),
      ];
    }),
    configKeys.map((k) => h("td", { class: "cfg" }, fmtConfig(t.config?.[k], this.baseline?.config?.[k], t.is_baseline))));
    const limit = this.showWholeFront ? rows.length : FRONT_ROWS;
    const more = rows.length > limit
      ? h("tr", { class: "more-row" }, h("td", { colspan: 1 + 2 * this.objectives.length + configKeys.length },
        h("button", { class: "btn btn-small", id: "whole-front", onclick: () => { this.showWholeFront = true; this.drawFrontTable(); } },
          `Show all ${rows.length} front trials`)))
      : null;
    replace(this.frontBox, h("table", { class: "grid-table front-table", id: "front-table" },
      h("thead", null,
        h("tr", null, h("th", { class: "num" }, "#"),
          this.objectives.map((o) => h("th", { colspan: 2, class: "num group" }, o.name, h("span", { class: "dir" }, o.direction === "maximize" ? " ↑" : " ↓"))),
          configKeys.map((k) => h("th", { class: "cfg" }, k))),
        h("tr", { class: "subhead" }, h("th"), this.objectives.map(() => [h("th", { class: "num" }, "value"), h("th", { class: "num" }, "vs base")]),
          configKeys.map(() => h("th")))),
      h("tbody", null,
        this.baseline ? line(this.baseline, "is-baseline") : null,
        rows.filter((t) => !t.is_baseline).slice(0, limit).map((t) => line(t, "on-front")), more)));
  }

  /** Every plotted trial the first time, then what changed since the last answer. */
  async loadPoints() {
    const first = !this.cloud;
    if (first) this.cloud = new PointCloud(this.objectives.map((o) => o.name));
    this.pointsLoading = (this.pointsLoading || Promise.resolve()).then(async () => {
      const body = await get(`/v1/studies/${this.id}/points?since=${this.cloud.cursor}`, { signal: this.signal });
      if (this.cloud.merge(body) || first) {
        this.scatter.set({ points: this.cloud });
        if (first) this.cloudVersion = this.scatter.version;
      }
    }).catch((error) => {
      if (!this.signal.aborted) toast(`Could not load the trials' points: ${error.message}`);
    });
    await this.pointsLoading;
  }

  cloudDrawn() {
    if (this.root.querySelector("#study").dataset.cloud === "complete") return;
    this.root.querySelector("#study").dataset.cloud = "complete";
    this.mark("cloud");
  }

  follow() {
    const states = { connecting: "connecting", live: "live", reconnecting: "reconnecting", ended: "finished", closed: "offline" };
    follow(`/v1/studies/${this.id}/events`, {
      signal: this.signal,
      after: this.cloud.cursor,
      onState: (state) => {
        this.live.lastChild.textContent = states[state] || state;
        this.live.dataset.state = state;
      },
      onEvent: (type, data) => {
        if (type === "trial") this.onTrial(data);
        else if (type === "study") this.onStudy(data);
        else if (type === "end") this.refetchFront();
      },
    }).catch((error) => toast(`Live updates stopped: ${error.message}`));
  }

  onTrial(t) {
    this.table.update(t);
    if (PLOTTED.includes(t.state)) this.refetchPoints();
  }

  drawCloudCount() {
    if (!this.cloud) return;
    const n = (this.cloud.length - this.cloud.screened).toLocaleString("en-US");
    const out = this.outside ? ` · ${this.outside.toLocaleString("en-US")} outside the view` : "";
    this.cloudCount.textContent = `${n} completed trials${out}`;
  }

  onStudy(s) {
    const before = this.study;
    this.applyStudy(s);
    if (before.progress.completed !== s.progress.completed || before.progress.screened_out !== s.progress.screened_out) {
      this.refetchPoints();
    }
    if (before.progress.completed !== s.progress.completed || before.front_size !== s.front_size
        || before.hypervolume !== s.hypervolume) this.refetchFront();
  }
}

/** What the study measured first after its baseline: the related trials (warm_start: related)
 * or the configurations of the catalog and the document; and the related studies its sampler
 * learns from. */
function startedFrom(warm) {
  const learned = (warm && warm.learned_from) || [];
  if (!warm || (!warm.configs.length && !learned.length)) return null;
  const shape = (workload) => workload.map((w) => Object.entries(w.dims).map(([k, v]) => `${k}=${v}`).join(" ")).join("; ");
  const study = (src) => src.team ? h("a", { href: `/ui/studies/${src.study}` }, `study #${src.study}`) : `shared study #${src.study}`;
  const learnedRows = learned.map((src) => h("li", null, "learns from ", study(src), `: ${src.trials} trials, ${shape(src.workload)}`,
    h("span", { class: "muted" }, ` (distance ${src.distance}, weight ${(2 ** -src.distance).toPrecision(2)} each)`)));
  const rows = warm.sources.length
    ? warm.sources.map((src, i) => h("li", null,
      h("span", null, `trial ${i + 1}: `),
      study(src), ` trial ${src.trial}, ${shape(src.workload)}`, src.target.gpu || src.target.cpu ? `, ${src.target.gpu || src.target.cpu}` : "",
      h("span", { class: "muted" }, ` (distance ${src.distance})`)))
    : warm.configs.map((c, i) => h("li", null, `trial ${i + 1}: `, h("code", null, JSON.stringify(c))));
  return card(`Started from (${warm.mode})`, { id: "started-from" }, h("ul", { class: "started-from" }, [...rows, ...learnedRows]));
}

/** The shapes the study measures and their weights (a traffic import's buckets) as a
 * histogram: one bar per shape, its length the shape's share of the total weight. */
function workloadCard(workload) {
  if (!workload || !workload.length) return null;
  const total = workload.reduce((sum, w) => sum + (w.weight ?? 1), 0) || 1;
  const top = Math.max(...workload.map((w) => w.weight ?? 1));
  const rows = workload.map((w) => {
    const share = (w.weight ?? 1) / total;
    return h("li", { dataset: { share: share.toFixed(4) } },
      h("span", { class: "shape" }, Object.entries(w.dims).map(([k, v]) => `${k}=${v}`).join(" ")),
      h("span", { class: "bar" }, h("span", { style: { width: `${(100 * (w.weight ?? 1)) / top}%` } })),
      h("span", { class: "share" }, `${(100 * share).toFixed(1)}%`));
  });
  return card(`Workload (${workload.length} shape${workload.length === 1 ? "" : "s"})`, { id: "workload" },
    h("ul", { class: "workload-bars" }, rows));
}

function fmtConfig(value, base, isBaseline) {
  const text = value === undefined ? "–" : valueText(value);
  const changed = !isBaseline && base !== undefined && String(base) !== String(value);
  const title = [isAcf(value) ? `ACF sha256 ${value}` : "", changed ? `baseline: ${valueText(base)}` : ""].filter(Boolean);
  return h("span", { class: changed ? "changed" : "same", title: title.join("; ") }, text);
}
