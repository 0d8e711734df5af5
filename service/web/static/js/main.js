// Boot: theme, token, the signed-in user, routes.

import { auth, get } from "./api.js";
import { navigate, route, start } from "./router.js";
import { artifactView, artifactsView } from "./views/artifacts.js";
import { compareView } from "./views/compare.js";
import { loginView } from "./views/login.js";
import { poolsView } from "./views/pools.js";
import { shell } from "./views/shell.js";
import { studiesView } from "./views/studies.js";
import { studyView } from "./views/study.js";
import { trialView } from "./views/trial.js";

route("/ui/login", loginView);
route("/ui/", studiesView);
route("/ui/studies", studiesView);
route("/ui/studies/:id", studyView);
route("/ui/studies/:id/trials/:number", trialView);
route("/ui/compare", compareView);
route("/ui/artifacts", artifactsView);
route("/ui/artifacts/:id", artifactView);
route("/ui/pools", poolsView);

const app = document.getElementById("app");
let cleanup = null;
let me = null;
let layout = null;

auth.onUnauthorized = () => {
  auth.token = null;
  me = null;
  const next = location.pathname + location.search;
  navigate(`/ui/login${next.startsWith("/ui/login") ? "" : `?next=${encodeURIComponent(next)}`}`, { replace: true });
};

function render({ view, params, query }) {
  if (cleanup) { cleanup(); cleanup = null; }
  if (view === loginView) {
    layout = null;
    me = null;
    cleanup = loginView(app, { query, onSignedIn: (who) => { me = Promise.resolve(who); } });
    return;
  }
  if (!auth.token) {
    navigate(`/ui/login?next=${encodeURIComponent(location.pathname + location.search)}`, { replace: true });
    return;
  }
  if (!me) me = get("/v1/me");
  if (!layout) layout = shell(app, me);
  const ctx = { me, setCrumbs: layout.setCrumbs, setTitle: (t) => { document.title = t ? `${t} · paretune` : "paretune"; } };
  layout.main.replaceChildren();
  layout.setCrumbs([]);
  window.scrollTo(0, 0);
  cleanup = view(layout.main, { params, query, ctx }) || null;
}

start(render);
