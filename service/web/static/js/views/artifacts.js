// The artifact workflow: on a trial, "Promote as candidate" (members), its validation's rounds
// and ETA, then its intervals, "Approve" / "Reject" (approvers); the artifacts page (kernels,
// targets, current and stale marks) and an artifact's page (versions, rollback, revoke, its
// re-validations as they run, its audit log).

import { auth, get, post } from "../api.js";
import { h, replace, toast } from "../dom.js";
import { ago, num, seconds, stamp, valueText } from "../format.js";
import { can, card, errorBox, spinner, stateBadge } from "../widgets.js";

const POLL_MS = 2000;
const OPEN = ["validating", "validated"];

// -- on a trial ----------------------------------------------------------------------------

export function artifactPanel(study, trial, me) {
  if (trial.state !== "completed" || trial.is_baseline) return null;
  const body = h("div", { class: "card-body" }, spinner("Loading candidates"));
  const panel = h("section", { class: "card artifact-panel", id: "artifact-panel" },
    h("header", { class: "card-head" }, h("h2", null, "Candidate")), body);
  load();

  async function load() {
    let candidates, details;
    try {
      candidates = (await get(`/v1/studies/${study.id}/candidates`)).filter((c) => c.trial_number === trial.number);
      details = await Promise.all(candidates.slice(0, 3).map((c) => get(`/v1/candidates/${c.id}`)));
    } catch (error) {
      replace(body, errorBox(error));
      return;
    }
    replace(body, promoteForm(study, trial, me, candidates, load), details.map((d) => candidateBlock(d, me, load)));
    if (candidates.some((c) => c.state === "validating")) setTimeout(() => { if (panel.isConnected) load(); }, POLL_MS);
  }
  return panel;
}

function promoteForm(study, trial, me, candidates, reload) {
  if (!can(me, "member")) return null;
  if (trial.feasible === false) return h("p", { class: "muted" }, "infeasible: it cannot be promoted");
  if (candidates.some((c) => OPEN.includes(c.state) && c.artifact_id === null)) return null;
  const note = h("input", { class: "input", id: "candidate-note", placeholder: "why this configuration (recorded)", maxlength: 2000 });
  const rounds = h("input", { class: "input input-narrow", id: "candidate-rounds", type: "number", min: 2, max: 1000, value: 20, title: "interleaved validation rounds" });
  const button = h("button", { class: "btn btn-primary", id: "promote" }, "Promote as candidate");
  button.onclick = async () => {
    button.disabled = true;
    try {
      await post(`/v1/studies/${study.id}/candidates`, { trials: [trial.number], note: note.value, rounds: Number(rounds.value) || 20 });
      toast("Promoted: its validation is queued", "ok");
      reload();
    } catch (error) {
      toast(error.message);
      button.disabled = false;
    }
  };
  return h("div", { class: "promote-row" }, note, rounds, button);
}

function candidateBlock(c, me, reload) {
  const result = c.result;
  return h("div", { class: "candidate", id: `candidate-${c.id}`, dataset: { state: c.state } },
    h("div", { class: "title-row" }, h("strong", null, `Candidate ${c.id}`), stateBadge(c.state),
      h("span", { class: "muted" }, `promoted by ${c.promoted_by} ${ago(c.created_at)}`),
      c.version_id ? h("a", { href: `/ui/artifacts/${artifactOf(c)}`, class: "artifact-link" }, "artifact →") : null),
    c.note ? h("p", { class: "note" }, c.note) : null,
    c.state === "validating" ? h("div", { class: "validating" },
      h("p", { class: "muted" }, spinner(`validating: ${jobsText(c.validation)}`)), roundsBar(c.progress)) : null,
    result ? validationTable(result) : null,
    result && result.correctness?.length ? h("p", { class: "muted shapes" }, "correctness: ",
      result.correctness.map((s) => h("span", { class: s.passed ? "yes" : "no" }, `${s.passed ? "✓" : "✗"} ${Object.values(s.dims).join("×")} `))) : null,
    result && !result.passed ? h("div", { class: "failure" }, result.message) : null,
    decisionRow(c, me, reload));
}

function artifactOf(c) {
  return c.approved_artifact_id || c.artifact_id || "";
}

function jobsText(v) {
  if (!v) return "";
  const done = v.jobs.filter((j) => ["completed", "failed"].includes(j.state)).length;
  return `${done} of ${v.jobs.length} ${v.jobs.length === 1 ? "job" : "jobs"} done`;
}

// rounds done of those planned, what is left and when it should be done (from the rounds'
// own durations so far, as the service computes it)
function roundsBar(p) {
  if (!p) return null;
  const total = Math.max(1, p.done + p.left || p.rounds);
  const eta = !p.left ? "" : p.eta_s === null ? " · ETA after the first round" : ` · ETA ${seconds(p.eta_s)}`;
  return h("div", { class: "progress rounds-progress", dataset: { done: p.done, left: p.left } },
    h("div", { class: "progress-track", title: `${p.done} of ${p.rounds} rounds measured${p.eta_at ? `; done about ${stamp(p.eta_at)}` : ""}` },
      h("span", { class: "seg seg-completed", style: { width: `${Math.min(100, (p.done / total) * 100)}%` } })),
    h("div", { class: "progress-label" },
      h("span", { class: "num" }, p.done), h("span", { class: "muted" }, ` / ${p.rounds} rounds`),
      p.left ? h("span", { class: "muted" }, ` · ${p.left} left`) : null,
      p.round_s !== null ? h("span", { class: "muted" }, ` · ${seconds(p.round_s)} a round`) : null,
      h("span", { class: "eta" }, eta)));
}

function validationTable(result) {
  if (!result.metrics?.length) return null;
  return h("table", { class: "kv validation", id: "validation-result" },
    h("thead", null, h("tr", null, ["objective", "ratio", "interval", "gain", "verdict", "rounds"].map((x) => h("th", null, x)))),
    h("tbody", null, result.metrics.map((m) => h("tr", { dataset: { objective: m.objective, verdict: m.verdict } },
      h("th", null, m.objective),
      h("td", { class: "num" }, num(m.ratio, 4)),
      h("td", { class: "num" }, m.ci_low === null ? "–" : `${num(m.ci_low, 4)} – ${num(m.ci_high, 4)}`, " ", ratioBar(m)),
      h("td", { class: "num" }, num(m.gain, 4)),
      h("td", null, h("span", { class: `tag verdict-${m.verdict}` }, m.significant ? m.verdict : `${m.verdict} (not significant)`)),
      h("td", { class: "num" }, `${m.rounds} (${m.jobs} jobs)`)))));
}

// the ratio's interval on a log scale from 0.5 to 2, with 1 (the baseline) marked
function ratioBar(m) {
  if (m.ci_low === null) return null;
  const x = (r) => Math.max(0, Math.min(100, 50 + (Math.log2(r) * 50)));
  return h("span", { class: "ratio-bar", title: `${Math.round(m.confidence * 100)}% interval of candidate / baseline` },
    h("span", { class: "ratio-bar-one" }),
    h("span", { class: "ratio-bar-ci", style: { left: `${x(m.ci_low)}%`, width: `${Math.max(1, x(m.ci_high) - x(m.ci_low))}%` } }),
    h("span", { class: "ratio-bar-point", style: { left: `${x(m.ratio)}%` } }));
}

function decisionRow(c, me, reload) {
  if (!can(me, "approver") || !["validated", "failed"].includes(c.state)) return null;
  const why = h("input", { class: "input", id: `why-${c.id}`, placeholder: "why (recorded in the audit log)", maxlength: 2000 });
  const act = (verb) => async (event) => {
    event.target.disabled = true;
    try {
      const answer = await post(`/v1/candidates/${c.id}/${verb}`, { why: why.value });
      toast(verb === "approve" ? `Approved: version ${answer.version}` : "Rejected", "ok");
      reload();
    } catch (error) {
      toast(error.message);
      event.target.disabled = false;
    }
  };
  return h("div", { class: "decision-row" }, why,
    c.state === "validated" ? h("button", { class: "btn btn-primary", id: `approve-${c.id}`, onclick: act("approve") }, "Approve") : null,
    h("button", { class: "btn btn-danger", id: `reject-${c.id}`, onclick: act("reject") }, "Reject"));
}

// -- the artifacts page --------------------------------------------------------------------

function device(target) {
  return target.gpu ? `${target.gpu}${target.compute_capability ? ` (cc ${target.compute_capability})` : ""}` : `${target.cpu || "?"} ${target.machine || ""}`;
}

function toolchain(target) {
  return ["driver", "cuda", "triton", "ptxas", "nvrtc", "cc"].filter((k) => target[k]).map((k) => `${k} ${target[k]}`).join(", ");
}

export function artifactsView(root, { ctx }) {
  ctx.setTitle("Artifacts");
  ctx.setCrumbs([{ text: "Studies", href: "/ui/" }, { text: "Artifacts" }]);
  replace(root, spinner("Loading artifacts"));
  Promise.all([get("/v1/artifacts"), get("/v1/audit?limit=50")]).then(([artifacts, log]) => {
    const kernels = [...new Set(artifacts.map((a) => a.kernel))];
    replace(root, h("div", { class: "artifacts-page", id: "artifacts" },
      h("div", { class: "page-head" }, h("h1", null, "Artifacts"),
        h("span", { class: "muted" }, `${artifacts.length} targets of ${kernels.length} kernels`)),
      artifacts.length ? kernels.map((k) => card(k, { id: `kernel-${k}`, cls: "kernel-card" },
        h("table", { class: "grid-table" },
          h("thead", null, h("tr", null, ["target", "toolchain", "current", "status", "updated"].map((x) => h("th", null, x)))),
          h("tbody", null, artifacts.filter((a) => a.kernel === k).map((a) => h("tr", { class: "artifact-row", dataset: { artifact: a.id } },
            h("td", null, h("a", { href: `/ui/artifacts/${a.id}` }, device(a.target))),
            h("td", { class: "muted" }, toolchain(a.target)),
            h("td", null, a.current_version ? h("span", { class: "tag tag-current" }, `v${a.current_version} current`) : h("span", { class: "muted" }, "none current")),
            h("td", null, a.stale ? h("span", { class: "tag tag-warn stale-mark", title: a.stale_reason || "" }, "stale") : h("span", { class: "yes" }, "up to date")),
            h("td", { class: "muted", title: stamp(a.updated_at) }, ago(a.updated_at)))))))) :
        h("p", { class: "muted empty" }, "No approved artifacts yet: promote a trial of a study, then approve it."),
      card("Audit log", { id: "audit-log" }, auditTable(log))));
  }).catch((error) => replace(root, errorBox(error)));
}

function auditTable(entries) {
  if (!entries.length) return h("p", { class: "muted empty" }, "nothing recorded yet");
  return h("table", { class: "grid-table audit" },
    h("thead", null, h("tr", null, ["when", "who", "action", "on", "why"].map((x) => h("th", null, x)))),
    h("tbody", null, entries.map((e) => h("tr", { dataset: { action: e.action } },
      h("td", { class: "muted", title: stamp(e.at) }, ago(e.at)), h("td", null, e.actor),
      h("td", null, h("span", { class: `tag action-${e.action}` }, e.action)),
      h("td", null, `${e.subject_type} ${e.subject_id}${e.details?.version ? ` v${e.details.version}` : ""}`),
      h("td", null, e.why || "")))));
}

export function artifactView(root, { params, ctx }) {
  const id = Number(params.id);
  replace(root, spinner("Loading artifact"));
  load();

  async function load() {
    let artifact, log, me;
    try {
      [artifact, log, me] = await Promise.all([get(`/v1/artifacts/${id}`),
        get(`/v1/audit?subject_type=artifact&subject_id=${id}`), ctx.me]);
    } catch (error) {
      replace(root, errorBox(error));
      return;
    }
    if (artifact.revalidations.some((c) => c.state === "validating")) {
      setTimeout(() => { if (document.querySelector(`#artifact[data-artifact="${id}"]`)) load(); }, POLL_MS);
    }
    ctx.setTitle(`${artifact.kernel} · artifact ${id}`);
    ctx.setCrumbs([{ text: "Studies", href: "/ui/" }, { text: "Artifacts", href: "/ui/artifacts" }, { text: `${artifact.kernel} on ${device(artifact.target)}` }]);
    replace(root, h("div", { class: "artifact-page", id: "artifact", dataset: { artifact: id } },
      h("div", { class: "page-head" }, h("div", { class: "grow" },
        h("div", { class: "title-row" }, h("h1", null, artifact.kernel),
          artifact.current_version ? h("span", { class: "tag tag-current" }, `v${artifact.current_version} current`) : null,
          artifact.stale ? h("span", { class: "tag tag-warn stale-mark", id: "stale" }, "stale") : null),
        h("div", { class: "meta" }, h("span", null, device(artifact.target)), h("span", null, toolchain(artifact.target)),
          h("span", null, `pool ${artifact.pool}`))),
        can(me, "approver") && artifact.current_version ? h("div", { class: "actions" }, button("Re-validate", "revalidate", async () => {
          await post(`/v1/artifacts/${id}/revalidate`, {});
          toast("Re-validation queued", "ok");
        }, load)) : null),
      artifact.stale ? h("div", { class: "failure" }, h("strong", null, "stale "), artifact.stale_reason) : null,
      card("Versions", { id: "versions" }, h("table", { class: "grid-table" },
        h("thead", null, h("tr", null, ["version", "state", "sha256", "ACF", "approved", "", ""].map((x) => h("th", null, x)))),
        h("tbody", null, artifact.versions.slice().reverse().map((v) => h("tr", { class: "version-row", dataset: { version: v.version, state: v.state } },
          h("td", { class: "num" }, `v${v.version}`),
          h("td", null, stateBadge(v.state), v.stale ? h("span", { class: "tag tag-warn" }, "stale") : null),
          h("td", { class: "mono", title: v.sha256 }, v.sha256.slice(0, 16) + "…"),
          h("td", { class: "mono acf-cell" }, v.acf ? h("span", { title: `sha256 ${v.acf.sha256}; ${v.acf.notice || ""}` },
            `${valueText(v.acf.sha256)} (${v.acf.compiler || "ptxas"} ${v.acf.compiler_version || "?"})`) : "none"),
          h("td", { class: "muted", title: stamp(v.approved_at) }, `${v.approved_by}, ${ago(v.approved_at)}`),
          h("td", null, h("button", { class: "btn btn-ghost", onclick: () => download(artifact, v) }, "Download")),
          h("td", null, can(me, "approver") ? [
            v.state === "superseded" ? button("Roll back to this", `rollback-${v.version}`, () => post(`/v1/artifacts/${id}/rollback`, { version: v.version }), load) : null,
            v.state !== "revoked" ? button("Revoke", `revoke-${v.version}`, () => post(`/v1/artifacts/${id}/versions/${v.version}/revoke`, {}), load, "btn-danger") : null,
          ] : null)))))),
      artifact.revalidations.length ? card("Re-validations", { id: "revalidations" },
        artifact.revalidations.map((c) => candidateBlock(c, me, load))) : null,
      card("Audit log", { id: "audit-log" }, auditTable(log))));
  }
}

function button(text, id, action, reload, cls = "") {
  const el = h("button", { class: `btn ${cls}`, id }, text);
  el.onclick = async () => {
    el.disabled = true;
    try {
      await action();
      reload();
    } catch (error) {
      toast(error.message);
      el.disabled = false;
    }
  };
  return el;
}

async function download(artifact, v) {
  const res = await fetch(`/v1/artifacts/${artifact.id}/versions/${v.version}/file`, { headers: { Authorization: `Bearer ${auth.token}` } });
  if (!res.ok) { toast(`download failed: HTTP ${res.status}`); return; }
  const url = URL.createObjectURL(await res.blob());
  const a = h("a", { href: url, download: `${artifact.kernel}-v${v.version}.json` });
  document.body.append(a);
  a.click();
  a.remove();
  URL.revokeObjectURL(url);
}
