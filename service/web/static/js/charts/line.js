// The hypervolume-over-trials chart: a step line in SVG with a hover read-out.

import { svg } from "../dom.js";
import { num } from "../format.js";
import { niceTicks } from "./colors.js";

const M = { left: 48, right: 12, top: 10, bottom: 26 };

export class StepChart {
  constructor(container, { height = 180, xLabel = "", yLabel = "" } = {}) {
    this.container = container;
    this.height = height;
    this.xLabel = xLabel;
    this.yLabel = yLabel;
    this.points = [];
    this.root = svg("svg", { class: "step-chart", height, role: "img" });
    container.append(this.root);
    this.resize = new ResizeObserver(() => this.render());
    this.resize.observe(container);
  }

  set(points) {
    this.points = points;
    this.render();
  }

  destroy() {
    this.resize.disconnect();
    this.root.remove();
  }

  render() {
    const width = Math.max(160, this.container.clientWidth);
    const { height, points } = this;
    const root = this.root;
    root.replaceChildren();
    root.setAttribute("width", width);
    root.setAttribute("viewBox", `0 0 ${width} ${height}`);
    const plot = { l: M.left, r: width - M.right, t: M.top, b: height - M.bottom };
    if (points.length < 1) {
      root.append(svg("text", { x: width / 2, y: height / 2 - 8, class: "chart-empty", "text-anchor": "middle" }, "No hypervolume yet"));
      root.append(svg("text", { x: width / 2, y: height / 2 + 10, class: "chart-empty", "text-anchor": "middle" },
        "it is measured against the completed baseline"));
      return;
    }
    const xs = points.map((p) => p.x);
    const ys = points.map((p) => p.y);
    const x0 = Math.min(...xs);
    const x1 = Math.max(...xs, x0 + 1);
    const y0 = Math.min(0, ...ys);
    const y1 = Math.max(...ys) * 1.08 || 1;
    const sx = (v) => plot.l + ((v - x0) / (x1 - x0)) * (plot.r - plot.l);
    const sy = (v) => plot.b - ((v - y0) / (y1 - y0)) * (plot.b - plot.t);
    for (const v of niceTicks(y0, y1, 4)) {
      root.append(svg("line", { x1: plot.l, x2: plot.r, y1: sy(v), y2: sy(v), class: "grid" }));
      root.append(svg("text", { x: plot.l - 6, y: sy(v) + 3.5, "text-anchor": "end", class: "tick" }, num(v, 3)));
    }
    for (const v of niceTicks(x0, x1, Math.max(2, Math.floor((plot.r - plot.l) / 70)))) {
      if (!Number.isInteger(v)) continue;
      root.append(svg("text", { x: sx(v), y: plot.b + 15, "text-anchor": "middle", class: "tick" }, num(v)));
    }
    let d = `M${sx(points[0].x)},${sy(points[0].y)}`;
    for (let i = 1; i < points.length; i++) d += `H${sx(points[i].x)}V${sy(points[i].y)}`;
    const area = `${d}V${plot.b}H${sx(points[0].x)}Z`;
    root.append(svg("path", { d: area, class: "area" }));
    root.append(svg("path", { d, class: "line" }));
    if (this.xLabel) {
      root.append(svg("text", { x: plot.r, y: height - 2, "text-anchor": "end", class: "axis-label" }, this.xLabel));
    }
    const cursor = svg("g", { class: "cursor", visibility: "hidden" },
      svg("line", { y1: plot.t, y2: plot.b }), svg("circle", { r: 3.5 }), svg("text", { y: plot.t + 10 }));
    root.append(cursor);
    root.onmousemove = (e) => {
      const r = root.getBoundingClientRect();
      const vx = x0 + ((e.clientX - r.left - plot.l) / (plot.r - plot.l)) * (x1 - x0);
      let p = points[0];
      for (const q of points) { if (q.x <= vx) p = q; else break; }
      const cx = sx(p.x);
      cursor.setAttribute("visibility", "visible");
      cursor.children[0].setAttribute("x1", cx);
      cursor.children[0].setAttribute("x2", cx);
      cursor.children[1].setAttribute("cx", cx);
      cursor.children[1].setAttribute("cy", sy(p.y));
      const label = cursor.children[2];
      label.textContent = `${num(p.y, 4)} after ${p.x} trials`;
      const right = cx > (plot.l + plot.r) / 2;
      label.setAttribute("x", right ? cx - 6 : cx + 6);
      label.setAttribute("text-anchor", right ? "end" : "start");
    };
    root.onmouseleave = () => cursor.setAttribute("visibility", "hidden");
  }
}

/** A one-line picture of a sample: min..max whisker, interval box, median tick, p99 dot. */
export function intervalBar(metric, width = 220) {
  const s = metric.stats || {};
  const lo = Math.min(...[s.min, metric.ci_low, metric.value].filter(Number.isFinite));
  const hi = Math.max(...[s.max, s.p99, metric.ci_high, metric.value].filter(Number.isFinite));
  const H = 22;
  const root = svg("svg", { class: "interval-bar", width, height: H, viewBox: `0 0 ${width} ${H}` },
    svg("title", null, "whiskers: min to max · box: confidence interval · line: value · dot: p99"));
  if (!(hi > lo)) return root;
  const pad = 6;
  const sx = (v) => pad + ((v - lo) / (hi - lo)) * (width - 2 * pad);
  const mid = H / 2;
  if (Number.isFinite(s.min) && Number.isFinite(s.max)) {
    root.append(svg("line", { x1: sx(s.min), x2: sx(s.max), y1: mid, y2: mid, class: "whisker" }));
    root.append(svg("line", { x1: sx(s.min), x2: sx(s.min), y1: mid - 4, y2: mid + 4, class: "whisker" }));
    root.append(svg("line", { x1: sx(s.max), x2: sx(s.max), y1: mid - 4, y2: mid + 4, class: "whisker" }));
  }
  if (Number.isFinite(metric.ci_low) && Number.isFinite(metric.ci_high)) {
    const w = Math.max(2, sx(metric.ci_high) - sx(metric.ci_low));
    root.append(svg("rect", { x: sx(metric.ci_low), y: mid - 6, width: w, height: 12, rx: 2, class: "ci" }));
  }
  root.append(svg("line", { x1: sx(metric.value), x2: sx(metric.value), y1: mid - 8, y2: mid + 8, class: "median" }));
  if (Number.isFinite(s.p99)) root.append(svg("circle", { cx: sx(s.p99), cy: mid, r: 2.5, class: "p99" }));
  return root;
}
