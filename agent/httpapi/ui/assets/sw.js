// The inspector's service worker (issue 27): it lets the run page's <video>
// element stream a run's video straight from the artifact endpoint, with
// the byte-range requests a player makes (seeking, the MP4's index at the
// file's end), although a media element cannot send an Authorization
// header. It adds the tab's bearer to GET requests of this origin's
// /v1/runs/{id}/artifacts/{artifactId} only, asking the page that made the
// request for it each time (a MessageChannel): the token stays in the
// tab's sessionStorage, never in a URL, a cookie or this worker's storage.
// Any other request passes through untouched.
"use strict";

const ARTIFACT = /^\/v1\/runs\/[^/]+\/artifacts\/[^/]+$/;

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (ev) => ev.waitUntil(self.clients.claim()));

// tokenOf asks the page (client) for its bearer; "" when it does not answer.
async function tokenOf(clientId) {
  const c = clientId && await self.clients.get(clientId);
  if (!c) return "";
  return new Promise((resolve) => {
    const ch = new MessageChannel();
    const timer = setTimeout(() => resolve(""), 2000);
    ch.port1.onmessage = (m) => { clearTimeout(timer); resolve(typeof m.data === "string" ? m.data : ""); };
    c.postMessage({ type: "screengraph.token?" }, [ch.port2]);
  });
}

self.addEventListener("fetch", (ev) => {
  const req = ev.request;
  const u = new URL(req.url);
  if (req.method !== "GET" || u.origin !== self.location.origin || !ARTIFACT.test(u.pathname)) return;
  if (req.headers.has("Authorization")) return; // the page's own fetch (apiBlob) carries it
  ev.respondWith((async () => {
    const h = new Headers(req.headers); // Range, If-Range as the player sent them
    const t = await tokenOf(ev.clientId);
    if (t) h.set("Authorization", "Bearer " + t);
    return fetch(u.href, { headers: h, cache: "no-store", credentials: "omit", redirect: "error" });
  })());
});
