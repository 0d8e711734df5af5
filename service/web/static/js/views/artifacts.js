// The artifact workflow (promote a front point as a candidate, approve it, show its state)
// plugs in here once the API has /v1/artifacts. Until then nothing is shown.
//
// Intended rules: members see "Promote as candidate" on a completed, feasible trial;
// approvers see "Approve" on a candidate; everyone sees the artifact's state and version.

export function artifactPanel(/* study, trial, me */) {
  return null;
}
