// The inspector's router: one shell for every /ui/ path; each page is a
// module exporting render(main, params, ctx) that may return a cleanup
// function (closing its stream). Sign-in is shown whenever a page's API
// call answers 401.
import { el, replace, getToken, setToken, clearToken, AuthError, errorBox } from "./lib.js";

// routes: path pattern -> page module (loaded on first use).
const routes = [
  { re: /^\/ui\/?$/, nav: "runs", mod: "./runs.js" },
  { re: /^\/ui\/runs\/([0-9A-Za-z_-]{1,64})$/, nav: "runs", mod: "./run.js", names: ["runId"] },
  { re: /^\/ui\/devices$/, nav: "devices", mod: "./devices.js" },
  { re: /^\/ui\/devices\/([^/]{1,765})$/, nav: "devices", mod: "./device.js", names: ["serial"] },
  { re: /^\/ui\/leases$/, nav: "leases", mod: "./leases.js" },
];

let cleanup = null;

function main() { return document.getElementById("main"); }

async function show() {
  if (cleanup) { try { cleanup(); } catch (_) { /* page already gone */ } cleanup = null; }
  const path = location.pathname;
  const m = main();
  document.getElementById("signout").hidden = !getToken();
  for (const a of document.querySelectorAll("[data-nav]")) a.removeAttribute("aria-current");
  const r = routes.find((r) => r.re.test(path));
  if (!r) { replace(m, el("h1", { text: "Not found" }), el("p", {}, "No inspector page at this path.")); return; }
  const nav = document.querySelector(`[data-nav="${r.nav}"]`);
  if (nav) nav.setAttribute("aria-current", "page");
  const match = path.match(r.re), params = {};
  (r.names || []).forEach((n, i) => { params[n] = decodeURIComponent(match[i + 1]); });
  let page;
  try { page = await import(r.mod); } catch (e) {
    replace(m, el("h1", { text: "Not available" }), errorBox(new Error("This page is not part of this build: " + r.mod)));
    return;
  }
  replace(m);
  const ctx = { signIn: (err) => signIn(err), navigate };
  try {
    cleanup = (await page.render(m, params, ctx)) || null;
  } catch (e) {
    if (e instanceof AuthError) signIn(e); else replace(m, errorBox(e));
  }
}

// signIn shows the token form; the token stays in this tab's sessionStorage
// and goes only into the Authorization header.
function signIn(err) {
  if (cleanup) { try { cleanup(); } catch (_) { /* ignore */ } cleanup = null; }
  const input = el("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const form = el("form", { class: "signin", id: "signin" },
    el("h1", { text: "Sign in" }),
    el("p", {}, "This daemon needs an API token (screengraph-agent token create). It is kept for this tab only and sent as the Authorization header."),
    err && getToken() ? errorBox(err) : null,
    el("label", { for: "token" }, "API token"), input,
    el("button", { type: "submit", class: "primary" }, "Sign in"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = input.value.trim();
    if (!t) return;
    setToken(t);
    show();
  });
  replace(main(), form);
  input.focus();
}

export function navigate(href) {
  history.pushState(null, "", href);
  show().then(() => main().focus());
}

document.addEventListener("click", (ev) => {
  const a = ev.target.closest && ev.target.closest("a[href]");
  if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith("/ui/") && url.pathname !== "/ui") return;
  ev.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener("popstate", show);
document.getElementById("signout").addEventListener("click", () => { clearToken(); show(); });
show();
