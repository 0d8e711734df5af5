// How each pool's GPUs are shared between teams: every team's weight and fair share, what it
// runs now, its decayed use and its last 24 hours against its quotas, and why a team waits.
// The operator sees every team; others see their own team and the pool's totals.

import { get } from "../api.js";
import { h, replace } from "../dom.js";
import { num } from "../format.js";
import { card, errorBox, spinner } from "../widgets.js";

const POLL_MS = 2000;

export function poolsView(root, { ctx }) {
  ctx.setTitle("Pools");
  ctx.setCrumbs([{ text: "Studies", href: "/ui/" }, { text: "Pools" }]);
  replace(root, spinner("Loading pools"));
  let timer = null;
  let stopped = false;
  load();

  async function load() {
    try {
      const [pools, studies] = await Promise.all([get("/v1/pools"), get("/v1/studies?limit=500")]);
      const names = [...new Set([...pools.map((p) => p.name), ...studies.items.map((s) => s.pool)])].sort();
      const shares = await Promise.all(names.map((name) => get(`/v1/pools/${encodeURIComponent(name)}/shares`).catch(() => null)));
      if (stopped) return;
      replace(root, h("div", { class: "pools-page", id: "pools" },
        h("div", { class: "page-head" }, h("h1", null, "Pools"),
          h("span", { class: "muted" }, "leases go by priority class, then by each team's use per unit of weight")),
        shares.filter(Boolean).map((s) => poolCard(s, pools.find((p) => p.name === s.pool))),
        names.length ? null : h("p", { class: "muted empty" }, "No pool has studies or settings yet.")));
    } catch (error) {
      if (!stopped) replace(root, errorBox(error));
    }
    if (!stopped) timer = setTimeout(load, POLL_MS);
  }
  return () => { stopped = true; clearTimeout(timer); };
}

function poolCard(shares, settings) {
  const halfLife = `${num(shares.usage_half_life_s / 3600, 3)} h`;
  return card(`Pool ${shares.pool}`, { id: `pool-${shares.pool}`, cls: "pool-card" },
    h("p", { class: "muted" }, `${shares.running} trials running · mean trial ${num(shares.mean_trial_s, 3)} s · `
      + `past use halves every ${halfLife}`
      + (settings?.min_isolation && settings.min_isolation !== "none" ? ` · isolation ${settings.min_isolation}` : "")),
    shares.teams.length ? h("table", { class: "grid-table shares-table" },
      h("thead", null, h("tr", null, ["team", "weight", "fair share", "running now", "GPU-hours (decayed)",
        "last 24 h", "waiting"].map((x) => h("th", null, x)))),
      h("tbody", null, shares.teams.map((t) => h("tr", { class: "share-row", dataset: { team: t.team } },
        h("td", null, t.team),
        h("td", { class: "num" }, num(t.weight, 3)),
        h("td", { class: "num" }, t.fair_share ? `${Math.round(t.fair_share * 100)}%` : "–"),
        h("td", null, shareBar(t), h("span", { class: "num" }, ` ${t.running}${t.max_running != null ? ` / ${t.max_running}` : ""}`)),
        h("td", { class: "num" }, num(t.usage_gpu_hours, 3)),
        h("td", { class: "num" }, `${num(t.gpu_hours_24h, 3)}${t.gpu_hours_per_day != null ? ` / ${num(t.gpu_hours_per_day, 3)}` : ""}`),
        h("td", { class: t.held_back ? "no held-back" : "muted" }, t.held_back || (t.queued_studies ? `${t.queued_studies} studies queued` : "–")))))) :
      h("p", { class: "muted empty" }, "No team has trials in this pool."));
}

function shareBar(t) {
  const pct = (x) => `${Math.min(100, Math.round(x * 100))}%`;
  return h("span", { class: "share-bar", title: `${pct(t.share_running)} of the running trials; fair share ${pct(t.fair_share)}` },
    h("span", { class: "share-fill", style: { width: pct(t.share_running) } }),
    t.fair_share ? h("span", { class: "share-mark", style: { left: pct(t.fair_share) } }) : null);
}
