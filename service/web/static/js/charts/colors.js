// A perceptual colour ramp (viridis) for the third objective, a colour per compared study, and
// theme colours from CSS.

const VIRIDIS = [
  [68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
  [31, 158, 137], [53, 183, 121], [110, 206, 88], [181, 222, 43], [253, 231, 37],
];

/** Colour at t in [0, 1]; dark themes skip the darkest purples, which vanish on black. */
export function ramp(t, dark = false) {
  const lo = dark ? 0.18 : 0;
  const u = lo + (1 - lo) * Math.min(1, Math.max(0, t));
  const x = u * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const [a, b] = [VIRIDIS[i], VIRIDIS[i + 1]];
  const c = a.map((v, k) => Math.round(v + (b[k] - v) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

export function rampCss(dark = false, steps = 10) {
  const stops = [];
  for (let i = 0; i <= steps; i++) stops.push(`${ramp(i / steps, dark)} ${(i / steps) * 100}%`);
  return `linear-gradient(90deg, ${stops.join(", ")})`;
}

// Okabe and Ito's colour-blind-safe qualitative palette (without its black and yellow, which
// vanish on one theme or the other): one colour per compared study, six at most.
const SERIES = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00"];

export function seriesColor(index) {
  return SERIES[index % SERIES.length];
}

export function themeColors() {
  const css = getComputedStyle(document.documentElement);
  const v = (name) => css.getPropertyValue(name).trim();
  return {
    dark: document.documentElement.dataset.theme === "dark",
    fg: v("--fg"), muted: v("--muted"), faint: v("--faint"), grid: v("--grid"), bg: v("--panel"),
    sans: v("--font-sans"), mono: v("--font-mono"), accent: v("--accent"), front: v("--front"), baseline: v("--baseline"), point: v("--point"),
  };
}

/** About `count` round tick values covering [lo, hi]. */
export function niceTicks(lo, hi, count = 6) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}
