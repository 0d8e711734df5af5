// The frame around every signed-in page: brand, breadcrumbs, user, theme, sign-out.

import { auth } from "../api.js";
import { h, replace } from "../dom.js";
import { navigate } from "../router.js";

const THEMES = ["auto", "light", "dark"];
const THEME_ICON = { auto: "◐", light: "☀", dark: "☾" };

export function applyTheme(choice) {
  localStorage.setItem("paretune.theme", choice);
  const dark = choice === "dark" || (choice === "auto" && matchMedia("(prefers-color-scheme: dark)").matches);
  const theme = dark ? "dark" : "light";
  if (document.documentElement.dataset.theme !== theme) {
    document.documentElement.dataset.theme = theme;
    window.dispatchEvent(new Event("paretune:theme"));
  }
}

matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
  applyTheme(localStorage.getItem("paretune.theme") || "auto");
});

export function brand() {
  return h("a", { href: "/ui/", class: "brand" },
    h("img", { src: "/static/favicon.svg", alt: "", width: 20, height: 20 }), h("span", null, "paretune"));
}

export function shell(root, mePromise) {
  const crumbs = h("nav", { class: "crumbs", "aria-label": "Breadcrumb" });
  const user = h("div", { class: "user" });
  let choice = localStorage.getItem("paretune.theme") || "auto";
  const themeButton = h("button", { class: "btn btn-ghost btn-icon", title: `Theme: ${choice}`, "aria-label": "Switch theme" }, THEME_ICON[choice]);
  themeButton.onclick = () => {
    choice = THEMES[(THEMES.indexOf(choice) + 1) % THEMES.length];
    themeButton.textContent = THEME_ICON[choice];
    themeButton.title = `Theme: ${choice}`;
    applyTheme(choice);
  };
  const signOut = h("button", { class: "btn btn-ghost", id: "sign-out", onclick: () => { auth.token = null; navigate("/ui/login"); } }, "Sign out");
  const main = h("main", { id: "main" });
  replace(root,
    h("header", { class: "topbar" },
      h("div", { class: "topbar-inner" }, brand(), crumbs, h("div", { class: "spacer" }),
        h("a", { href: "/ui/artifacts", class: "btn btn-ghost", id: "nav-artifacts" }, "Artifacts"), h("a", { href: "/ui/pools", class: "btn btn-ghost", id: "nav-pools" }, "Pools"), user, themeButton, signOut)),
    main);
  mePromise.then((me) => {
    replace(user,
      h("span", { class: "user-name" }, me.name),
      h("span", { class: `badge role role-${me.role}`, id: "my-role", title: `Your token has the ${me.role} role` }, me.role),
      me.team ? h("span", { class: "muted" }, me.team) : null);
  }).catch(() => {});
  return {
    main,
    setCrumbs(items) {
      replace(crumbs, items.map((item, i) => [
        i ? h("span", { class: "sep" }, "/") : null,
        item.href ? h("a", { href: item.href }, item.text) : h("span", { class: "here" }, item.text),
      ]));
    },
  };
}
