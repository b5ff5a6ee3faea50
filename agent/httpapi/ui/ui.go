// Package ui is the run inspector: a web page served by the daemon at /ui/
// (static HTML, CSS and plain JavaScript modules embedded in the binary; no
// build step, no Node at runtime). It is a client of the public HTTP API and
// its SSE streams only: every number and state on the page comes from /v1.
//
// The assets are public (no token needed to load the page); the page asks
// for an API token when the API answers 401, keeps it in the tab's
// sessionStorage and sends it as `Authorization: Bearer` — never in a URL or
// a cookie. Every response carries a Content-Security-Policy without inline
// scripts or styles and without eval (CSP), and the page inserts every value
// as text (textContent), never as HTML.
package ui

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// shell is the app shell every page path answers (a build fails without it).
//
//go:embed assets/index.html
var shell []byte

// CSP is the Content-Security-Policy of every /ui/ response: scripts,
// styles, images (blob: for screenshots fetched with the bearer), media
// (the run's video: the artifact endpoint, or a blob: without a service
// worker) and
// connections only from the daemon itself; no inline code, no eval, no
// framing, no plugins, forms post nowhere else.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; media-src 'self' blob:; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Pages are the paths (Go ServeMux patterns) that serve the app shell; the
// page's JavaScript routes on the path.
var Pages = []string{"/ui/{$}", "/ui/runs/{runId}", "/ui/devices", "/ui/devices/{serial}", "/ui/leases"}

// Handler serves the inspector under /ui/: the shell for Pages, the
// embedded files under /ui/assets/, 404 for anything else. Only GET and
// HEAD reach it (the caller's mux routes the method).
func Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range Pages {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			if id := r.PathValue("runId"); id != "" && !validRunID(id) {
				notFound(w)
				return
			}
			if s := r.PathValue("serial"); s != "" && !validSerial(s) {
				notFound(w)
				return
			}
			headers(w, "text/html; charset=utf-8")
			w.Write(shell)
		})
	}
	mux.HandleFunc("/ui/assets/{file}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		if name == "index.html" || strings.ContainsAny(name, "/\\") || strings.HasPrefix(name, ".") {
			notFound(w)
			return
		}
		b, err := fs.ReadFile(assets, path.Join("assets", name))
		if err != nil {
			notFound(w)
			return
		}
		ct := mime.TypeByExtension(path.Ext(name))
		if path.Ext(name) == ".js" {
			ct = "text/javascript; charset=utf-8" // module scripts need a JavaScript type; some systems map .js elsewhere
		}
		if ct == "" {
			notFound(w)
			return
		}
		headers(w, ct)
		if name == "sw.js" {
			// The worker lives with the assets but serves the pages under
			// /ui/ (lib.js registers it with that scope).
			w.Header().Set("Service-Worker-Allowed", "/ui/")
		}
		w.Write(b)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { notFound(w) })
	return mux
}

// headers sets the security headers of every inspector response.
func headers(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	// The assets change with the binary: revalidate rather than run an old
	// page against a new API.
	h.Set("Cache-Control", "no-cache")
}

func notFound(w http.ResponseWriter) {
	headers(w, "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	w.Write([]byte("404 page not found\n"))
}

// validRunID reports whether s can be a run id (ULID alphabet, at most 64
// bytes): other paths under /ui/runs/ are 404, not a page that then asks the
// API about them.
func validRunID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validSerial reports whether s can be an adb serial (1-255 bytes of
// printable ASCII, no space; "emulator-5554", "127.0.0.1:5555"): the
// device page of anything else is 404.
func validSerial(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}
