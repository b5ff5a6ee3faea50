package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent/httpapi/ui"
)

// The inspector's shell and assets load without a token while tokens are
// enforced (the data calls need one), with the CSP on every response; / and
// /ui redirect to /ui/; unknown paths, traversal and odd run ids are 404;
// no other method reaches the pages.
func TestUIServed(t *testing.T) {
	e := newTenancyEnv(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := noRedirect.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp, b.String()
	}
	for _, p := range []string{"/", "/ui"} {
		resp, _ := get(p)
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
			t.Errorf("GET %s: %d Location %q, want 302 to /ui/", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	for _, p := range []string{"/ui/", "/ui/runs/01JD3M3Y8V5Q0D0C6F2T1WQ7ZX", "/ui/devices", "/ui/leases"} {
		resp, body := get(p)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, `src="/ui/assets/app.js"`) {
			t.Errorf("GET %s without a token: %d %s, want the app shell", p, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != ui.CSP {
			t.Errorf("GET %s: CSP %q, want %q", p, got, ui.CSP)
		}
		if strings.Contains(body, "<script>") || strings.Contains(body, "style=") || strings.Contains(body, "<style") {
			t.Errorf("GET %s: the shell has inline script or style, which the CSP refuses", p)
		}
	}
	for _, c := range []struct{ path, ctype string }{{"/ui/assets/app.js", "text/javascript"}, {"/ui/assets/lib.js", "text/javascript"},
		{"/ui/assets/runs.js", "text/javascript"}, {"/ui/assets/run.js", "text/javascript"}, {"/ui/assets/app.css", "text/css"}} {
		resp, _ := get(c.path)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) || resp.Header.Get("Content-Security-Policy") != ui.CSP ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d %q CSP %q nosniff %q", c.path, resp.StatusCode, resp.Header.Get("Content-Type"),
				resp.Header.Get("Content-Security-Policy"), resp.Header.Get("X-Content-Type-Options"))
		}
	}
	for _, p := range []string{"/ui/nope", "/ui/assets/nope.js", "/ui/assets/index.html", "/ui/assets/..%2fui.go", "/ui/assets/%2e%2e%2fui.go",
		"/ui/runs/" + strings.Repeat("A", 65), "/ui/runs/a%3Cb", "/ui/runs/x/y"} {
		if resp, _ := get(p); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
	// The data behind the page still needs the token.
	if st, _, _ := e.as("", "GET", "/v1/runs", ""); st != 401 {
		t.Errorf("GET /v1/runs without a token: %d, want 401", st)
	}
	if st, _, _ := e.as("", "POST", "/ui/", `{}`); st != 404 {
		t.Errorf("POST /ui/: %d, want 404 (the catch-all)", st)
	}
}
