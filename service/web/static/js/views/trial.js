// One trial: objectives with their sample statistics and interval, configuration against
// the baseline, correctness, compile report, worker fingerprint, timings and log.

import { get } from "../api.js";
import { h, replace } from "../dom.js";
import { ago, duration, num, ratioInfo, seconds, stamp, unitOf, valueText } from "../format.js";
import { intervalBar } from "../charts/line.js";
import { card, errorBox, formatValue, kvTable, ratioPill, spinner, stateBadge } from "../widgets.js";
import { artifactPanel } from "./artifacts.js";

const STAT_ORDER = ["median", "mean", "std", "p99", "min", "max"];
const POLL_MS = 2000;

export function trialView(root, { params, ctx }) {
  const studyId = Number(params.id);
  const number = Number(params.number);
  let stopped = false;
  let timer = null;
  let front = null;
  let lastState = null;
  replace(root, spinner("Loading trial"));
  load(true);

  // While the trial is queued or running, poll it; the front (which can be large) is read
  // again only when the trial's state changes.
  async function load(first) {
    let study, trial, me;
    try {
      const frontUrl = `/v1/studies/${studyId}/front?history_points=2`;
      let firstFront;
      [study, trial, me, firstFront] = await Promise.all([
        get(`/v1/studies/${studyId}`), get(`/v1/studies/${studyId}/trials/${number}`), ctx.me,
        front ? null : get(frontUrl),
      ]);
      if (firstFront) front = firstFront;
      else if (trial.state !== lastState) front = await get(frontUrl);
    } catch (error) {
      if (stopped) return;
      if (first) replace(root, errorBox(error));
      else timer = setTimeout(() => load(false), POLL_MS * 2);
      return;
    }
    if (stopped) return;
    lastState = trial.state;
    ctx.setTitle(`Trial #${number} · ${study.name}`);
    ctx.setCrumbs([{ text: "Studies", href: "/ui/" }, { text: study.name, href: `/ui/studies/${studyId}` }, { text: `Trial #${number}` }]);
    render(root, { study, trial, front, me });
    if (["queued", "running", "paused", "screened"].includes(trial.state)) timer = setTimeout(() => load(false), POLL_MS);
  }

  return () => { stopped = true; clearTimeout(timer); };
}

function render(root, { study, trial: t, front, me }) {
  const baseline = front.baseline;
  const onFront = front.trials.some((f) => f.number === t.number);
  const took = duration(t.started_at, t.finished_at);
  const objectiveNames = study.objectives.map((o) => o.name);
  const metrics = t.metrics || {};
  const extra = Object.keys(metrics).filter((k) => !objectiveNames.includes(k));
  const confidence = study.document?.measure?.confidence ?? 0.95;
  const last = study.progress.created - 1;
  const host = t.fingerprint?.hostname;

  replace(root, h("div", { class: "trial-page", id: "trial", dataset: { number: t.number, state: t.state } },
    h("div", { class: "page-head" },
      h("div", { class: "grow" },
        h("div", { class: "title-row" }, h("h1", null, `Trial #${t.number}`), stateBadge(t.state),
          onFront ? h("span", { class: "tag tag-front" }, "★ on the front") : null,
          t.is_baseline ? h("span", { class: "tag tag-baseline" }, "baseline") : null,
          t.feasible === false ? h("span", { class: "tag tag-warn" }, "infeasible") : null),
        h("div", { class: "meta" },
          h("a", { href: `/ui/studies/${study.id}` }, study.name),
          host ? h("span", null, `on ${host}`) : null,
          h("span", null, `attempt ${t.attempt}`),
          took !== null ? h("span", null, `took ${seconds(took)}`) : null,
          t.finished_at ? h("span", { title: stamp(t.finished_at) }, `finished ${ago(t.finished_at)}`) : null,
          t.phase ? h("span", null, `phase: ${t.phase}`) : null)),
      h("div", { class: "actions" },
        h("a", { class: ["btn", t.number <= 0 && "disabled"], href: `/ui/studies/${study.id}/trials/${Math.max(0, t.number - 1)}`, id: "prev-trial" }, "‹ Previous"),
        h("a", { class: ["btn", t.number >= last && "disabled"], href: `/ui/studies/${study.id}/trials/${Math.min(last, t.number + 1)}`, id: "next-trial" }, "Next ›"))),
    t.failure_reason || (t.state === "failed" && t.message)
      ? h("div", { class: "failure" }, h("strong", null, t.failure_reason || "failed"), " ", t.message || "") : null,
    t.state === "screened_out"
      ? h("div", { class: "failure screened-note", id: "screened-note" }, h("strong", null, "screened out"),
        ` by trial #${t.screening.dominated_by}: the values below are its screening measurement, not objective values; it was not measured fully.`) : null,
    artifactPanel(study, t, me),
    h("div", { class: "metric-grid", id: "objectives" },
      study.objectives.map((o) => metricCard(o.name, o.direction, metrics[o.name], t, baseline, confidence)),
      extra.map((k) => metricCard(k, null, metrics[k], t, baseline, confidence))),
    h("div", { class: "layout-two" },
      h("div", { class: "col" },
        t.screening ? card("Screening", { id: "screening" }, screeningTable(t.screening)) : null,
        card("Configuration", { id: "configuration" }, configTable(t, baseline)),
        card("Correctness", { id: "correctness" }, correctness(t.correctness)),
        card("Timings", { id: "timings" }, timings(t.timings))),
      h("div", { class: "col" },
        card("Compile report", { id: "compile-report" }, kvTable(Object.entries(t.compile_report || {}))),
        card("Environment", { id: "environment" }, kvTable(Object.entries(t.environment || {}), { empty: "no clocks or temperatures reported" })),
        card("Worker fingerprint", { id: "fingerprint" }, kvTable(Object.entries(t.fingerprint || {}), { empty: "not run by a worker yet" })))),
    card("Log", { id: "log", actions: t.log ? h("span", { class: "muted" }, `${t.log.split("\n").length} lines`) : null },
      t.log ? h("pre", { class: "log" }, t.log) : h("p", { class: "muted empty" }, "no log"))));
}

function metricCard(name, direction, metric, t, baseline, confidence) {
  const unit = metric?.unit || unitOf(name);
  if (!metric) {
    return h("section", { class: "metric card", dataset: { metric: name } },
      h("div", { class: "metric-name" }, name), h("div", { class: "metric-value muted" }, "–"));
  }
  const base = baseline?.values?.[name];
  const ratio = direction && !t.is_baseline ? t.relative?.[name] : null;
  const info = direction ? ratioInfo(ratio, direction) : null;
  const half = Number.isFinite(metric.ci_low) && Number.isFinite(metric.ci_high) ? (metric.ci_high - metric.ci_low) / 2 : null;
  const stats = metric.stats || {};
  return h("section", { class: ["metric card", !direction && "metric-extra"], dataset: { metric: name } },
    h("div", { class: "metric-name" }, name,
      direction ? h("span", { class: "dir" }, direction === "maximize" ? "↑ higher is better" : "↓ lower is better") : h("span", { class: "dir" }, "measured")),
    h("div", { class: "metric-value" }, h("span", { class: "num" }, num(metric.value, 5)), unit ? h("span", { class: "unit" }, ` ${unit}`) : null,
      info ? [" ", ratioPill(ratio, direction), h("span", { class: `delta ratio-${info.kind}` }, ` ${info.delta}`)] : null),
    h("div", { class: "metric-sub muted" },
      half !== null ? `${Math.round(confidence * 100)}% CI ${num(metric.ci_low, 5)} – ${num(metric.ci_high, 5)} (±${num((half / Math.abs(metric.value || 1)) * 100, 2)}%)` : "no interval",
      ` · n = ${metric.n}`,
      Number.isFinite(base) && !t.is_baseline ? ` · baseline ${num(base, 5)}` : ""),
    intervalBar(metric, 260),
    h("dl", { class: "stats" }, STAT_ORDER.map((k) => h("div", null,
      h("dt", null, k), h("dd", { class: "num" }, Number.isFinite(stats[k]) ? num(stats[k], 4) : "–")))));
}

function screeningTable(sc) {
  const decided = sc.promoted === null || sc.promoted === undefined ? "not decided yet"
    : sc.promoted ? "promoted: measured fully" : `screened out by trial #${sc.dominated_by}`;
  return [
    h("p", { class: "muted" }, decided, sc.reason ? ` (${sc.reason})` : ""),
    h("table", { class: "kv" }, h("thead", null, h("tr", null, h("th", null, "metric"), h("th", null, "screened"),
      h("th", null, "interval"), sc.told ? h("th", null, "sampler heard") : null)),
    h("tbody", null, Object.entries(sc.values || {}).map(([k, v]) => h("tr", { dataset: { metric: k } },
      h("th", null, k), h("td", { class: "num" }, num(v, 5)),
      h("td", { class: "num muted" }, (sc.intervals?.[k] || []).map((x) => num(x, 5)).join(" – ")),
      sc.told ? h("td", { class: "num" }, Number.isFinite(sc.told[k]) ? num(sc.told[k], 5) : "–") : null)))),
  ];
}

function configTable(t, baseline) {
  const keys = Object.keys(t.config || {});
  if (!keys.length) return h("p", { class: "muted empty" }, "empty configuration");
  const showBase = baseline && !t.is_baseline;
  return h("table", { class: "kv config" },
    h("thead", null, h("tr", null, h("th", null, "parameter"), h("th", null, "value"), showBase ? h("th", null, "baseline") : null)),
    h("tbody", null, keys.map((k) => {
      const v = t.config[k];
      const b = baseline?.config?.[k];
      const changed = showBase && String(b) !== String(v);
      return h("tr", { class: changed ? "changed-row" : "" },
        h("th", null, k), h("td", { class: "num" }, formatValue(v)),
        showBase ? h("td", { class: "num muted" }, b === undefined ? "–" : valueText(b)) : null);
    })));
}

function correctness(c) {
  if (!c || !Object.keys(c).length) return h("p", { class: "muted empty" }, "no correctness check reported");
  const passed = c.passed ?? c.ok ?? null;
  const rest = Object.entries(c).filter(([k]) => k !== "passed" && k !== "ok");
  return [
    passed === null ? null : h("div", { class: ["verdict", passed ? "pass" : "fail"], id: "verdict" }, passed ? "✓ matches the reference" : "✗ does not match the reference"),
    kvTable(rest),
  ];
}

function timings(tm) {
  const entries = Object.entries(tm || {}).filter(([, v]) => Number.isFinite(v));
  if (!entries.length) return h("p", { class: "muted empty" }, "no timings reported");
  const total = entries.reduce((s, [, v]) => s + v, 0) || 1;
  return [
    h("div", { class: "stack-bar" }, entries.map(([k, v], i) => h("span", { class: `stack-${i % 5}`, style: { width: `${(v / total) * 100}%` }, title: `${k}: ${seconds(v)}` }))),
    h("table", { class: "kv" }, h("tbody", null, entries.map(([k, v], i) => h("tr", null,
      h("th", null, h("i", { class: `swatch stack-${i % 5}` }), k), h("td", { class: "num" }, seconds(v)),
      h("td", { class: "num muted" }, `${((v / total) * 100).toFixed(0)}%`))))),
  ];
}
