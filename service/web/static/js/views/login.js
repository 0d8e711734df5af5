// Sign in with an API token; the token stays in this browser's localStorage.

import { ApiError, auth, get } from "../api.js";
import { h, replace } from "../dom.js";
import { navigate } from "../router.js";
import { brand } from "./shell.js";

export function loginView(root, { query, onSignedIn }) {
  document.title = "Sign in · paretune";
  const input = h("input", { id: "token", type: "password", autocomplete: "off", spellcheck: false,
    placeholder: "ptu_…", "aria-label": "API token", required: true });
  const message = h("p", { class: "form-error", role: "alert" });
  const button = h("button", { class: "btn btn-primary btn-block", type: "submit" }, "Sign in");
  const form = h("form", { class: "login-card", onsubmit: submit },
    brand(),
    h("h1", null, "Sign in"),
    h("p", { class: "muted" }, "Paste an API token. It is kept in this browser only."),
    h("label", { for: "token" }, "Token"), input, message, button,
    h("p", { class: "hint" }, "No token? An admin makes one with ", h("code", null, "paretune token create --role viewer"), "."));
  replace(root, h("div", { class: "login" }, form));
  input.focus();

  async function submit(e) {
    e.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    button.disabled = true;
    message.textContent = "";
    try {
      const me = await get("/v1/me", { token });
      if (me.kind !== "user") throw new ApiError(403, { error: { message: "this is a worker token; sign in with a user token" } });
      auth.token = token;
      onSignedIn(me);
      const next = query.get("next");
      navigate(next && next.startsWith("/ui/") && !next.startsWith("/ui/login") ? next : "/ui/", { replace: true });
    } catch (error) {
      message.textContent = error.status !== 401 ? error.message
        : error.reason === "expired" ? "That token has expired."
        : error.reason === "rotated" ? "That token was rotated; sign in with its new secret."
        : "That token is unknown or revoked.";
      button.disabled = false;
      input.select();
    }
  }
}
