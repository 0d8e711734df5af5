// History-API routing under /ui/: links with data-link stay in the page.

const routes = [];
let onChange = null;

export function route(pattern, view) {
  const keys = [];
  const re = new RegExp("^" + pattern.replace(/:(\w+)/g, (_, k) => { keys.push(k); return "([^/]+)"; }) + "/?$");
  routes.push({ re, keys, view });
}

export function start(render) {
  onChange = render;
  window.addEventListener("popstate", () => resolve());
  document.addEventListener("click", (e) => {
    const a = e.target.closest("a[href]");
    if (!a || a.target || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || !url.pathname.startsWith("/ui/")) return;
    e.preventDefault();
    navigate(url.pathname + url.search);
  });
  resolve();
}

export function navigate(path, { replace = false } = {}) {
  if (path === location.pathname + location.search) return;
  history[replace ? "replaceState" : "pushState"](null, "", path);
  resolve();
}

function resolve() {
  const path = location.pathname;
  for (const r of routes) {
    const m = path.match(r.re);
    if (m) {
      const params = Object.fromEntries(r.keys.map((k, i) => [k, decodeURIComponent(m[i + 1])]));
      onChange({ view: r.view, params, query: new URLSearchParams(location.search) });
      return;
    }
  }
  history.replaceState(null, "", "/ui/");
  resolve();
}
