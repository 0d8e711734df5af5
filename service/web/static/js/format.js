// Number, unit and time formatting shared by every view.

const UNITS = { ms: "ms", us: "µs", ns: "ns", s: "s", mj: "mJ", j: "J", w: "W", pct: "%", gbps: "GB/s", tflops: "TFLOP/s" };

/** The unit of an objective, read from its name's suffix (runtime_ms -> ms). */
export function unitOf(name) {
  const suffix = String(name).split("_").pop().toLowerCase();
  return UNITS[suffix] || "";
}

export function num(value, digits = 4) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (!Number.isFinite(value)) return value > 0 ? "∞" : "−∞";
  if (value === 0) return "0";
  const abs = Math.abs(value);
  if (abs >= 1e6 || abs < 1e-4) return Number(value.toPrecision(digits)).toExponential().replace("e+", "e");
  if (Number.isInteger(value) && abs < 1e6) return value.toLocaleString("en-US");
  const decimals = Math.max(0, digits - 1 - Math.floor(Math.log10(abs)));
  return value.toLocaleString("en-US", { minimumFractionDigits: 0, maximumFractionDigits: Math.min(decimals, 8) });
}

export function withUnit(value, unit) {
  return unit ? `${num(value)} ${unit}` : num(value);
}

/** A ratio to the baseline, and whether it is an improvement for this direction. */
export function ratioInfo(ratio, direction) {
  if (ratio === null || ratio === undefined || !Number.isFinite(ratio)) return null;
  const better = direction === "maximize" ? ratio > 1 : ratio < 1;
  const same = Math.abs(ratio - 1) < 5e-4;
  const pct = (ratio - 1) * 100;
  const text = `${ratio.toFixed(3)}×`;
  const delta = `${pct > 0 ? "+" : pct < 0 ? "−" : "±"}${Math.abs(pct).toFixed(1)}%`;
  return { text, delta, kind: same ? "same" : better ? "better" : "worse" };
}

const SHA256 = /^[0-9a-f]{64}$/;

/** Whether a configuration value names an Advanced Controls File (its sha256). */
export function isAcf(value) {
  return typeof value === "string" && SHA256.test(value);
}

/** A configuration value as people read it: an ACF by its short hash ("acf 11c3215cb747"),
 * "none" for no ACF, anything else as it is. */
export function valueText(value) {
  return isAcf(value) ? `acf ${value.slice(0, 12)}` : String(value);
}

export function configText(config) {
  return Object.entries(config || {}).map(([k, v]) => `${k}=${valueText(v)}`).join("  ");
}

export function ago(iso) {
  if (!iso) return "–";
  const t = new Date(iso).getTime();
  const s = Math.round((Date.now() - t) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function stamp(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

export function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 1) return `${(value * 1000).toFixed(0)} ms`;
  if (value < 60) return `${value.toFixed(value < 10 ? 2 : 1)} s`;
  const m = Math.floor(value / 60);
  return `${m} min ${Math.round(value - m * 60)} s`;
}

export function duration(startIso, endIso) {
  if (!startIso || !endIso) return null;
  return (new Date(endIso).getTime() - new Date(startIso).getTime()) / 1000;
}
