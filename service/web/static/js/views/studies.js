// The studies of the signed-in team, refreshed every few seconds while the tab is visible;
// ticking 2 to 6 of them opens their fronts compared.

import { get, query } from "../api.js";
import { h, replace } from "../dom.js";
import { ago, num, stamp, unitOf } from "../format.js";
import { navigate } from "../router.js";
import { errorBox, progressBar, ratioPill, stateBadge } from "../widgets.js";

const FILTERS = ["all", "running", "paused", "completed", "cancelled", "failed"];
const REFRESH_MS = 3000;
const COMPARE = { min: 2, max: 6 };

export function studiesView(root, { query: q, ctx }) {
  ctx.setTitle("Studies");
  ctx.setCrumbs([{ text: "Studies" }]);
  let filter = FILTERS.includes(q.get("state")) ? q.get("state") : "all";
  let search = "";
  let items = null;
  let timer = null;
  let stopped = false;
  const selected = new Set(); // ids ticked for comparison, in the order ticked

  const tabs = h("div", { class: "segmented", role: "tablist" });
  const searchBox = h("input", { type: "search", class: "search", placeholder: "Filter by name", "aria-label": "Filter studies by name",
    oninput: (e) => { search = e.target.value.toLowerCase(); draw(); } });
  const live = h("span", { class: "live" }, h("span", { class: "dot" }), "live");
  const compare = h("button", { class: "btn btn-small", id: "compare-selected",
    onclick: () => navigate(`/ui/compare?studies=${[...selected].join(",")}`) });
  const body = h("div", { class: "table-wrap" });
  replace(root,
    h("div", { class: "page-head" },
      h("div", null, h("h1", null, "Studies"), h("p", { class: "muted" }, "Tuning studies of your team, newest first.")),
      h("div", { class: "spacer" }), live),
    h("div", { class: "toolbar" }, tabs, h("div", { class: "spacer" }), compare, searchBox),
    body);
  drawTabs();
  drawCompare();
  load();

  function drawCompare() {
    const n = selected.size;
    compare.disabled = n < COMPARE.min || n > COMPARE.max;
    compare.textContent = n ? `Compare ${n} selected` : "Compare";
    compare.title = `Tick ${COMPARE.min} to ${COMPARE.max} studies of one kernel and the same objectives`;
  }

  function toggle(id, on) {
    if (on) selected.add(id);
    else selected.delete(id);
    drawCompare();
  }

  function drawTabs() {
    replace(tabs, FILTERS.map((f) => h("button", {
      class: ["seg-btn", f === filter && "active"], role: "tab", "aria-selected": String(f === filter),
      onclick: () => {
        filter = f;
        history.replaceState(null, "", `/ui/${f === "all" ? "" : `?state=${f}`}`);
        drawTabs();
        items = null;
        load();
      },
    }, f)));
  }

  async function load() {
    clearTimeout(timer);
    try {
      const data = await get(`/v1/studies${query({ state: filter === "all" ? null : filter, limit: 500 })}`);
      if (stopped) return;
      items = data.items;
      live.classList.remove("stale");
      live.title = `updated ${new Date().toLocaleTimeString()}`;
      draw();
    } catch (error) {
      if (stopped) return;
      live.classList.add("stale");
      if (!items) replace(body, errorBox(error));
    }
    if (!stopped) timer = setTimeout(tick, REFRESH_MS);
  }

  function tick() {
    if (document.visibilityState === "visible") load();
    else timer = setTimeout(tick, REFRESH_MS);
  }

  function draw() {
    if (!items) return;
    const shown = items.filter((s) => !search || s.name.toLowerCase().includes(search));
    if (!shown.length) {
      replace(body, h("div", { class: "empty-state" },
        h("h3", null, items.length ? "No study matches" : "No studies yet"),
        h("p", { class: "muted" }, "Start one with ", h("code", null, "paretune study create -f study.yaml"), ".")));
      return;
    }
    replace(body, h("table", { class: "grid-table studies-table", id: "studies" },
      h("thead", null, h("tr", null,
        h("th", { class: "pick" }, h("span", { class: "sr-only" }, "compare")),
        h("th", { class: "num" }, "#"), h("th", null, "Study"), h("th", null, "State"), h("th", null, "Progress"),
        h("th", null, "Best vs baseline"), h("th", { class: "num" }, "Hypervolume"), h("th", { class: "num" }, "Front"),
        h("th", null, "Pool"), h("th", null, "Updated"))),
      h("tbody", null, shown.map(row))));
  }

  function row(s) {
    const href = `/ui/studies/${s.id}`;
    return h("tr", { class: "clickable", dataset: { study: s.id },
      onclick: (e) => { if (!e.target.closest("a, .pick")) h("a", { href }).click(); } },
      h("td", { class: "pick" }, h("input", { type: "checkbox", class: "compare-pick", checked: selected.has(s.id),
        "aria-label": `compare study ${s.id}`, onchange: (e) => toggle(s.id, e.target.checked) })),
      h("td", { class: "num muted" }, s.id),
      h("td", null, h("a", { href, class: "study-link" }, s.name),
        h("div", { class: "sub" }, `${s.backend} · ${s.sampler} · ${s.objectives.length} objectives`)),
      h("td", null, stateBadge(s.state)),
      h("td", { class: "progress-cell" }, progressBar(s.progress, { compact: true })),
      h("td", null, h("div", { class: "best-list" }, s.objectives.map((o) => bestChip(s, o)))),
      h("td", { class: "num" }, s.hypervolume === null ? h("span", { class: "muted" }, "–") : num(s.hypervolume)),
      h("td", { class: "num" }, s.front_size),
      h("td", null, h("span", { class: "tag" }, s.pool)),
      h("td", { class: "muted nowrap", title: stamp(s.updated_at) }, ago(s.updated_at)));
  }

  return () => { stopped = true; clearTimeout(timer); };
}

function bestChip(study, objective) {
  const value = study.best[objective.name];
  const base = study.baseline ? study.baseline[objective.name] : null;
  const ratio = Number.isFinite(value) && base ? value / base : null;
  return h("div", { class: "best" },
    h("span", { class: "best-name" }, objective.name),
    h("span", { class: "num" }, Number.isFinite(value) ? `${num(value)}${unitOf(objective.name) ? ` ${unitOf(objective.name)}` : ""}` : "–"),
    ratio ? ratioPill(ratio, objective.direction) : null);
}
