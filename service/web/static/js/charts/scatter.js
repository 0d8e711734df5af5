// The Pareto scatter: every completed trial as a point on two chosen objectives, a third as
// colour, the front as a staircase with its points ringed, the baseline as a diamond with
// cross-hairs. Canvas; the cloud of all trials (a PointCloud, columns) is painted once per
// change of data, axes, size or theme and reused while hovering redraws the rest.
// Hover shows the trial, click opens it, drag zooms, double-click resets the zoom.
// Several studies' fronts in one plot: each trial of `front` names its `group` (its study) and
// `color`, `baselines` lists each group's baseline, and each group gets its own staircase;
// `titles` gives an axis title per objective, where it is not the objective's name.

import { num } from "../format.js";
import { niceTicks, ramp, themeColors } from "./colors.js";
import { PointCloud } from "./points.js";

const MARGIN = { left: 62, right: 18, top: 16, bottom: 40 };
const HIT_PX = 9;
const BUCKETS = 48;

export class Scatter {
  constructor(container, { onHover = () => {}, onClick = () => {}, onZoom = () => {}, onDrawn = () => {}, height = 440 } = {}) {
    this.container = container;
    this.onDrawn = onDrawn;
    this.onZoom = onZoom;
    this.onHover = onHover;
    this.onClick = onClick;
    this.height = height;
    this.canvas = document.createElement("canvas");
    this.canvas.className = "scatter-canvas";
    this.canvas.setAttribute("role", "img");
    container.append(this.canvas);
    this.data = { points: new PointCloud([]), front: [], baseline: null, x: null, y: null, color: null, directions: {},
      log: false, fit: "front" };
    this.version = 0; // bumped by every set(): the cloud is painted again
    this.zoom = null;
    this.hovered = null;
    this.highlighted = null;
    this.screen = { xs: new Float32Array(0), ys: new Float32Array(0), index: new Int32Array(0) };
    this.frame = 0;
    this.resize = new ResizeObserver(() => this.draw());
    this.resize.observe(container);
    this.bindPointer();
  }

  /** points: a PointCloud of every plotted trial, changed in place and set again; front:
   * trials on the front; x, y, color: objective names. */
  set(data) {
    this.version++;
    const axesChanged = (data.x !== undefined && (data.x !== this.data.x || data.y !== this.data.y))
      || (data.log !== undefined && data.log !== this.data.log)
      || (data.fit !== undefined && data.fit !== this.data.fit);
    Object.assign(this.data, data);
    if (axesChanged && this.zoom) { this.zoom = null; this.onZoom(false); }
    this.draw();
  }

  highlight(number) {
    this.highlighted = number;
    this.draw();
  }

  /** Redraw on the next animation frame (coalesces bursts of live updates). */
  draw() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => { this.frame = 0; this.render(); });
  }

  destroy() {
    cancelAnimationFrame(this.frame);
    this.resize.disconnect();
    this.canvas.remove();
  }

  /** Whether an axis is drawn on a log scale: asked for, and every value on it positive. */
  logAxes() {
    const { x, y, points, front, log } = this.data;
    if (!log) return { x: false, y: false };
    const positive = (key) => {
      if (key === "#" || front.some((t) => val(t, key) <= 0)) return false;
      const column = points.values[key] || [];
      for (let i = 0; i < column.length; i++) if (column[i] <= 0) return false;
      return true;
    };
    return { x: positive(x), y: positive(y) };
  }

  /** The baseline, or each group's. */
  baselineList() {
    const { baseline, baselines } = this.data;
    return baselines || (baseline ? [baseline] : []);
  }

  /**
   * The plotted range, in axis space (log10 of the value on a log axis). With fit "front",
   * the worst tenth of the trials on each axis may fall outside, so that a few far-off
   * configurations do not squeeze the front into a corner; the front and baseline always fit.
   */
  domain(logs) {
    if (this.zoom) return this.zoom;
    const { x, y } = this.data;
    const rx = this.axisRange(x, logs.x ? Math.log10 : (v) => v);
    const ry = this.axisRange(y, logs.y ? Math.log10 : (v) => v);
    if (!rx || !ry) return { x0: 0, x1: 1, y0: 0, y1: 1 };
    const px = (rx[1] - rx[0] || Math.abs(rx[0]) || 1) * 0.05;
    const py = (ry[1] - ry[0] || Math.abs(ry[0]) || 1) * 0.06;
    return { x0: rx[0] - px, x1: rx[1] + px, y0: ry[0] - py, y1: ry[1] + py };
  }

  axisRange(key, f) {
    const { points, front, baseline, directions, fit } = this.data;
    const cloud = new Float64Array(points.length);
    let n = 0;
    for (let i = 0; i < points.length; i++) {
      const v = f(points.value(i, key) ?? NaN);
      if (Number.isFinite(v)) cloud[n++] = v;
    }
    const sorted = cloud.subarray(0, n).sort();
    let lo = n ? sorted[0] : Infinity;
    let hi = n ? sorted[n - 1] : -Infinity;
    if (fit === "front" && key !== "#" && n >= 20) {
      if (directions[key] === "maximize") lo = sorted[Math.ceil(0.1 * (n - 1))];
      else hi = sorted[Math.floor(0.9 * (n - 1))];
    }
    for (const t of [...front, ...this.baselineList()]) {
      const v = f(val(t, key));
      if (Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    }
    return Number.isFinite(lo) ? [lo, hi] : null;
  }

  colorScale() {
    const { color, points, front, baseline, directions } = this.data;
    if (!color) return null;
    let lo = Infinity;
    let hi = -Infinity;
    const scan = (t) => {
      const v = val(t, color);
      if (Number.isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
    };
    for (let i = 0; i < points.length; i++) {
      const v = points.value(i, color);
      if (Number.isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
    }
    front.forEach(scan);
    if (baseline) scan(baseline);
    if (!Number.isFinite(lo)) return null;
    // Bright means better: flip minimised objectives so the eye goes to the yellow end.
    const flip = color !== "#" && directions[color] !== "maximize";
    const value = (t) => val(t, color);
    const t01 = (v) => { const u = hi > lo ? (v - lo) / (hi - lo) : 0.5; return flip ? 1 - u : u; };
    return { lo, hi, flip, key: color, value, t01 };
  }

  render() {
    const { canvas, container } = this;
    const width = Math.max(200, container.clientWidth);
    const height = this.height;
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      canvas.style.width = `${width}px`;
      canvas.style.height = `${height}px`;
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const colors = themeColors();
    const { x, y } = this.data;
    if (!x || !y) return;
    const key = [this.version, width, height, dpr, colors.dark, colors.point, JSON.stringify(this.zoom)].join(" ");
    if (key !== this.layoutKey) {
      this.layoutKey = key;
      this.layout = this.place(width, height);
      this.cloudLayer = null;
    }
    const { logs, d, plot, sx, sy, scale } = this.layout;
    this.scale = { sx, sy, plot, d };

    this.drawAxes(ctx, colors, plot, d, sx, sy, logs);
    ctx.save();
    ctx.beginPath();
    ctx.rect(plot.l, plot.t, plot.r - plot.l, plot.b - plot.t);
    ctx.clip();
    this.drawBaselineLines(ctx, colors, plot, sx, sy);
    this.drawStaircase(ctx, colors, plot, sx, sy);
    if (!this.cloudLayer) this.cloudLayer = this.paintCloud(colors, scale, width, height, dpr);
    ctx.drawImage(this.cloudLayer, 0, 0, width, height);
    this.drawFront(ctx, colors, scale, sx, sy);
    this.drawBaseline(ctx, colors, sx, sy);
    this.drawMarks(ctx, colors, sx, sy);
    ctx.restore();
    if (!this.screen.index.length && !this.frontScreen.length && !this.baselineScreen) {
      ctx.fillStyle = colors.muted;
      ctx.font = `13px ${colors.sans}`;
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText("No completed trials yet: points appear here as workers report them",
        (plot.l + plot.r) / 2, (plot.t + plot.b) / 2);
    }
    if (this.drag) this.drawDrag(ctx, colors);
    this.publish();
  }

  /** Axes, scales and colour scale of the data as set, for a canvas of this size. */
  place(width, height) {
    const logs = this.logAxes();
    const d = this.domain(logs);
    const plot = { l: MARGIN.left, r: width - MARGIN.right, t: MARGIN.top, b: height - MARGIN.bottom };
    const fx = logs.x ? Math.log10 : (v) => v;
    const fy = logs.y ? Math.log10 : (v) => v;
    const sx = (v) => plot.l + ((fx(v) - d.x0) / (d.x1 - d.x0)) * (plot.r - plot.l);
    const sy = (v) => plot.b - ((fy(v) - d.y0) / (d.y1 - d.y0)) * (plot.b - plot.t);
    return { logs, d, plot, sx, sy, scale: this.colorScale() };
  }

  drawAxes(ctx, colors, plot, d, sx, sy, logs) {
    ctx.font = `11px ${colors.mono}`;
    ctx.lineWidth = 1;
    ctx.strokeStyle = colors.grid;
    ctx.fillStyle = colors.muted;
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const v of axisTicks(d.x0, d.x1, logs.x, Math.max(3, Math.floor((plot.r - plot.l) / 90)))) {
      const px = Math.round(sx(v)) + 0.5;
      if (px < plot.l - 1 || px > plot.r + 1) continue;
      ctx.beginPath(); ctx.moveTo(px, plot.t); ctx.lineTo(px, plot.b); ctx.stroke();
      ctx.fillText(num(v, 3), px, plot.b + 6);
    }
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const v of axisTicks(d.y0, d.y1, logs.y, Math.max(3, Math.floor((plot.b - plot.t) / 60)))) {
      const py = Math.round(sy(v)) + 0.5;
      if (py < plot.t - 1 || py > plot.b + 1) continue;
      ctx.beginPath(); ctx.moveTo(plot.l, py); ctx.lineTo(plot.r, py); ctx.stroke();
      ctx.fillText(num(v, 3), plot.l - 8, py);
    }
    ctx.strokeStyle = colors.faint;
    ctx.strokeRect(plot.l + 0.5, plot.t + 0.5, plot.r - plot.l - 1, plot.b - plot.t - 1);
    ctx.fillStyle = colors.fg;
    ctx.font = `12px ${colors.sans}`;
    ctx.textAlign = "center";
    ctx.textBaseline = "bottom";
    ctx.fillText(this.axisTitle(this.data.x), (plot.l + plot.r) / 2, plot.b + 38);
    ctx.save();
    ctx.translate(14, (plot.t + plot.b) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = "middle";
    ctx.fillText(this.axisTitle(this.data.y), 0, 0);
    ctx.restore();
  }

  axisTitle(name) {
    if (name === "#") return "trial number";
    const dir = this.data.directions[name];
    return `${this.data.titles?.[name] || name}  ${dir === "maximize" ? "↑ higher is better" : "↓ lower is better"}`;
  }

  drawBaselineLines(ctx, colors, plot, sx, sy) {
    for (const b of this.baselineList()) {
      if (!valid(b, this.data.x, this.data.y)) continue;
      ctx.save();
      ctx.setLineDash([4, 4]);
      ctx.strokeStyle = b.color || colors.baseline;
      ctx.globalAlpha = 0.55;
      const bx = Math.round(sx(val(b, this.data.x))) + 0.5;
      const by = Math.round(sy(val(b, this.data.y))) + 0.5;
      ctx.beginPath();
      ctx.moveTo(bx, plot.t); ctx.lineTo(bx, plot.b);
      ctx.moveTo(plot.l, by); ctx.lineTo(plot.r, by);
      ctx.stroke();
      ctx.restore();
    }
  }

  /** The front split by group (one group when no trial names one). */
  frontGroups() {
    const groups = new Map();
    for (const t of this.data.front) {
      if (!groups.has(t.group)) groups.set(t.group, []);
      groups.get(t.group).push(t);
    }
    return [...groups.values()];
  }

  /** The 2-D non-dominated subset of a front on the chosen axes, as an attainment staircase. */
  staircase(front) {
    const { x, y, directions } = this.data;
    const sgx = directions[x] === "maximize" ? -1 : 1;
    const sgy = directions[y] === "maximize" ? -1 : 1;
    const pts = front.filter((t) => valid(t, x, y))
      .map((t) => ({ t, mx: sgx * val(t, x), my: sgy * val(t, y) }))
      .sort((a, b) => a.mx - b.mx || a.my - b.my);
    const steps = [];
    let bestY = Infinity;
    for (const p of pts) {
      if (p.my < bestY) { steps.push(p); bestY = p.my; }
    }
    return steps.map((p) => p.t);
  }

  drawStaircase(ctx, colors, plot, sx, sy) {
    for (const group of this.frontGroups()) this.drawSteps(ctx, colors, this.staircase(group), sx, sy);
  }

  drawSteps(ctx, colors, steps, sx, sy) {
    const { x, y } = this.data;
    if (steps.length < 2) return;
    ctx.save();
    ctx.beginPath();
    steps.forEach((t, i) => {
      const px = sx(val(t, x));
      const py = sy(val(t, y));
      if (i === 0) ctx.moveTo(px, py);
      else { ctx.lineTo(px, sy(val(steps[i - 1], y))); ctx.lineTo(px, py); }
    });
    ctx.strokeStyle = steps[0].color || colors.front;
    ctx.globalAlpha = 0.85;
    ctx.lineWidth = 1.6;
    ctx.stroke();
    ctx.restore();
  }

  /** The cloud on a canvas of its own (the trials not on the front, nor the baseline),
   * with each point's screen position kept for hit tests. The points are written into the
   * layer's pixels (a round, anti-aliased stamp blended over what is there): a path of
   * 100,000 arcs takes Chromium's software rasteriser most of a second, the pixels a few
   * tens of milliseconds. Brighter colours go last, so the better trials are on top. */
  paintCloud(colors, scale, width, height, dpr) {
    const { points, x, y } = this.data;
    const { sx, sy, plot } = this.layout;
    const frontSet = this.frontNumbers();
    const n = points.length;
    const buckets = Array.from({ length: BUCKETS + 1 }, () => []);
    const xs = new Float32Array(n);
    const ys = new Float32Array(n);
    const index = new Int32Array(n);
    const xcol = x === "#" ? points.numbers : points.values[x];
    const ycol = y === "#" ? points.numbers : points.values[y];
    const ccol = scale ? (scale.key === "#" ? points.numbers : points.values[scale.key]) : null;
    const baselines = new Set([points.baseline, ...this.baselineList().map((b) => b.number)]);
    let k = 0;
    this.outside = 0;
    for (let i = 0; i < n; i++) {
      const vx = xcol[i];
      const vy = ycol[i];
      const number = points.numbers[i];
      if (!Number.isFinite(vx) || !Number.isFinite(vy) || frontSet.has(number) || baselines.has(number)) continue;
      const px = sx(vx);
      const py = sy(vy);
      if (px < plot.l || px > plot.r || py < plot.t || py > plot.b) this.outside++;
      xs[k] = px; ys[k] = py; index[k] = i; k++;
      let b = BUCKETS;
      if (ccol && Number.isFinite(ccol[i])) b = Math.round(scale.t01(ccol[i]) * (BUCKETS - 1));
      buckets[b].push(px, py);
    }
    this.screen = { xs: xs.subarray(0, k), ys: ys.subarray(0, k), index: index.subarray(0, k) };

    const layer = document.createElement("canvas");
    layer.width = Math.round(width * dpr);
    layer.height = Math.round(height * dpr);
    const ctx = layer.getContext("2d");
    const image = ctx.createImageData(layer.width, layer.height);
    const radius = (k > 3000 ? 2 : k > 600 ? 2.6 : 3.2) * dpr;
    const alpha = k > 3000 ? 0.55 : 0.72;
    const dots = stamp(radius);
    const order = [BUCKETS, ...Array.from({ length: BUCKETS }, (_, b) => b)];
    for (const b of order) {
      if (!buckets[b].length) continue;
      const rgb = cssRgb(b === BUCKETS ? colors.point : ramp(b / (BUCKETS - 1), colors.dark));
      blend(image, buckets[b], dpr, rgb, alpha, dots);
    }
    ctx.putImageData(image, 0, 0);
    return layer;
  }

  frontNumbers() {
    if (this._frontKey !== this.data.front) {
      this._frontKey = this.data.front;
      this._frontSet = new Set(this.data.front.map((t) => t.number));
    }
    return this._frontSet;
  }

  drawFront(ctx, colors, scale, sx, sy) {
    const { front, x, y } = this.data;
    this.frontScreen = [];
    for (const t of front) {
      if (!valid(t, x, y) || t.is_baseline) continue;
      const px = sx(val(t, x));
      const py = sy(val(t, y));
      const v = scale ? scale.value(t) : null;
      ctx.beginPath();
      ctx.arc(px, py, 5, 0, 2 * Math.PI);
      ctx.fillStyle = scale && Number.isFinite(v) ? ramp(scale.t01(v), colors.dark) : t.color || colors.front;
      ctx.fill();
      ctx.lineWidth = 1.8;
      ctx.strokeStyle = t.color || colors.front;
      ctx.stroke();
      ctx.lineWidth = 1;
      ctx.strokeStyle = colors.bg;
      ctx.beginPath();
      ctx.arc(px, py, 6.6, 0, 2 * Math.PI);
      ctx.stroke();
      this.frontScreen.push({ t, px, py });
    }
  }

  /** Each baseline as a diamond; their screen positions in baselineScreen (null: none drawn). */
  drawBaseline(ctx, colors, sx, sy) {
    const drawn = [];
    for (const b of this.baselineList()) {
      if (!valid(b, this.data.x, this.data.y)) continue;
      const px = sx(val(b, this.data.x));
      const py = sy(val(b, this.data.y));
      ctx.save();
      ctx.translate(px, py);
      ctx.rotate(Math.PI / 4);
      ctx.fillStyle = b.color || colors.baseline;
      ctx.strokeStyle = colors.bg;
      ctx.lineWidth = 1.5;
      ctx.fillRect(-5, -5, 10, 10);
      ctx.strokeRect(-5, -5, 10, 10);
      ctx.restore();
      drawn.push({ t: b, px, py });
    }
    this.baselineScreen = drawn.length ? drawn : null;
  }

  drawMarks(ctx, colors, sx, sy) {
    const { x, y } = this.data;
    for (const [t, color] of [[this.highlighted, colors.accent], [this.hovered, colors.fg]]) {
      if (!t || !valid(t, x, y)) continue;
      ctx.beginPath();
      ctx.arc(sx(val(t, x)), sy(val(t, y)), 9, 0, 2 * Math.PI);
      ctx.strokeStyle = color;
      ctx.lineWidth = 2;
      ctx.stroke();
    }
  }

  drawDrag(ctx, colors) {
    const { x0, y0, x1, y1 } = this.drag;
    ctx.save();
    ctx.fillStyle = colors.accent;
    ctx.globalAlpha = 0.1;
    ctx.fillRect(Math.min(x0, x1), Math.min(y0, y1), Math.abs(x1 - x0), Math.abs(y1 - y0));
    ctx.globalAlpha = 0.8;
    ctx.strokeStyle = colors.accent;
    ctx.strokeRect(Math.min(x0, x1) + 0.5, Math.min(y0, y1) + 0.5, Math.abs(x1 - x0), Math.abs(y1 - y0));
    ctx.restore();
  }

  /** Screen positions of the front and baseline, and what is drawn, for tests and tools. */
  publish() {
    const c = this.canvas;
    c.dataset.x = this.data.x;
    c.dataset.y = this.data.y;
    c.dataset.color = this.data.color || "";
    c.dataset.count = String(this.screen.index.length + this.frontScreen.length + (this.baselineScreen?.length || 0));
    const group = (t) => (t.group === undefined ? {} : { group: t.group });
    const marks = this.frontScreen.map(({ t, px, py }) => ({ number: t.number, ...group(t), x: +px.toFixed(1), y: +py.toFixed(1) }));
    for (const { t, px, py } of this.baselineScreen || []) {
      marks.push({ number: t.number, ...group(t), baseline: true, x: +px.toFixed(1), y: +py.toFixed(1) });
    }
    c.dataset.marks = JSON.stringify(marks);
    c.setAttribute("aria-label",
      `Scatter of ${c.dataset.count} trials: ${this.data.x} against ${this.data.y}; ${this.frontScreen.length} on the front`);
    c.dataset.ready = "1";
    this.onDrawn({ points: this.screen.index.length, front: this.frontScreen.length, baseline: !!this.baselineScreen,
      outside: this.outside, version: this.version });
  }

  /** The trial under a canvas position: front and baseline first, then the nearest point. */
  hit(px, py) {
    let best = null;
    let bestD = HIT_PX * HIT_PX;
    const marks = [...(this.frontScreen || []), ...(this.baselineScreen || [])];
    for (const m of marks) {
      const d = (m.px - px) ** 2 + (m.py - py) ** 2;
      if (d <= bestD) { bestD = d; best = m.t; }
    }
    if (best) return best;
    const { xs, ys, index } = this.screen;
    let nearest = -1;
    for (let i = 0; i < xs.length; i++) {
      const d = (xs[i] - px) ** 2 + (ys[i] - py) ** 2;
      if (d < bestD) { bestD = d; nearest = i; }
    }
    return nearest < 0 ? null : this.data.points.trial(index[nearest]);
  }

  bindPointer() {
    const c = this.canvas;
    const pos = (e) => { const r = c.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
    c.addEventListener("mousemove", (e) => {
      const [px, py] = pos(e);
      if (this.press) {
        const moved = Math.hypot(px - this.press[0], py - this.press[1]) > 4;
        if (moved) {
          this.drag = { x0: this.press[0], y0: this.press[1], x1: px, y1: py };
          this.draw();
          return;
        }
      }
      const t = this.hit(px, py);
      if (t?.number !== this.hovered?.number) {
        this.hovered = t;
        c.style.cursor = t ? "pointer" : "crosshair";
        this.draw();
      }
      this.onHover(t, px, py);
    });
    c.addEventListener("mouseleave", () => {
      this.press = null;
      this.drag = null;
      if (this.hovered) { this.hovered = null; this.draw(); }
      this.onHover(null);
    });
    c.addEventListener("mousedown", (e) => { if (e.button === 0) this.press = pos(e); });
    c.addEventListener("mouseup", (e) => {
      const [px, py] = pos(e);
      const drag = this.drag;
      this.press = null;
      this.drag = null;
      if (drag && this.scale) {
        this.zoomTo(drag);
        return;
      }
      const t = this.hit(px, py);
      if (t) this.onClick(t, e);
    });
    c.addEventListener("dblclick", () => this.resetZoom());
  }

  zoomTo({ x0, y0, x1, y1 }) {
    const { plot, d } = this.scale;
    if (Math.abs(x1 - x0) < 8 || Math.abs(y1 - y0) < 8) { this.draw(); return; }
    const ix = (px) => d.x0 + ((px - plot.l) / (plot.r - plot.l)) * (d.x1 - d.x0);
    const iy = (py) => d.y0 + ((plot.b - py) / (plot.b - plot.t)) * (d.y1 - d.y0);
    this.zoom = {
      x0: ix(Math.min(x0, x1)), x1: ix(Math.max(x0, x1)),
      y0: iy(Math.max(y0, y1)), y1: iy(Math.min(y0, y1)),
    };
    this.onZoom(true);
    this.draw();
  }

  resetZoom() {
    this.zoom = null;
    this.onZoom(false);
    this.draw();
  }
}

/** The pixels of a dot of `radius` around a pixel's centre, each with the share of it the
 * disc covers (4 x 4 samples a pixel): [dx, dy, coverage] triples. */
function stamp(radius) {
  const dots = [];
  const reach = Math.ceil(radius);
  for (let dy = -reach; dy <= reach; dy++) {
    for (let dx = -reach; dx <= reach; dx++) {
      let inside = 0;
      for (let sy = 0; sy < 4; sy++) {
        for (let sx = 0; sx < 4; sx++) {
          const ox = dx + (sx + 0.5) / 4 - 0.5;
          const oy = dy + (sy + 0.5) / 4 - 0.5;
          if (ox * ox + oy * oy <= radius * radius) inside++;
        }
      }
      if (inside) dots.push(dx, dy, inside / 16);
    }
  }
  return dots;
}

/** Blend dots of colour `rgb` at `alpha` over the image, at the CSS-pixel positions of
 * `coords` (x, y pairs): what drawing them with source-over would give. */
function blend(image, coords, dpr, [r, g, b], alpha, dots) {
  const { data, width, height } = image;
  for (let i = 0; i < coords.length; i += 2) {
    const cx = Math.floor(coords[i] * dpr);
    const cy = Math.floor(coords[i + 1] * dpr);
    for (let j = 0; j < dots.length; j += 3) {
      const px = cx + dots[j];
      const py = cy + dots[j + 1];
      if (px < 0 || py < 0 || px >= width || py >= height) continue;
      const at = (py * width + px) * 4;
      const a = alpha * dots[j + 2];
      const under = (data[at + 3] / 255) * (1 - a);
      const out = a + under;
      data[at] = (r * a + data[at] * under) / out;
      data[at + 1] = (g * a + data[at + 1] * under) / out;
      data[at + 2] = (b * a + data[at + 2] * under) / out;
      data[at + 3] = out * 255;
    }
  }
}

/** Any CSS colour as [r, g, b], read back from a pixel painted with it. */
function cssRgb(color) {
  if (!cssRgb.ctx) {
    const c = document.createElement("canvas");
    c.width = 1;
    c.height = 1;
    cssRgb.ctx = c.getContext("2d", { willReadFrequently: true });
  }
  const ctx = cssRgb.ctx;
  ctx.clearRect(0, 0, 1, 1);
  ctx.fillStyle = color;
  ctx.fillRect(0, 0, 1, 1);
  const [r, g, b] = ctx.getImageData(0, 0, 1, 1).data;
  return [r, g, b];
}

/** Tick values (in data units) for an axis range given in axis space. */
function axisTicks(lo, hi, log, count) {
  if (!log) return niceTicks(lo, hi, count);
  if (hi - lo < 1.2) return niceTicks(10 ** lo, 10 ** hi, count);
  const ticks = [];
  const steps = hi - lo > 4 ? [1] : hi - lo > 2 ? [1, 3] : [1, 2, 5];
  for (let k = Math.floor(lo); k <= Math.ceil(hi); k++) {
    for (const m of steps) {
      const v = m * 10 ** k;
      const u = Math.log10(v);
      if (u >= lo && u <= hi) ticks.push(Number(v.toPrecision(6)));
    }
  }
  return ticks;
}

/** The trial number is plotted as "#"; a name that no objective can have. */
export function val(t, key) {
  return key === "#" ? t.number : t.values?.[key];
}

function valid(t, x, y) {
  return t && Number.isFinite(val(t, x)) && Number.isFinite(val(t, y));
}
