// Package uitest drives the inspector (/ui/) in a real headless Chromium
// (Debian's chromium package) through chromedp, for the tests of the
// packages that serve it. Only tests import it.
package uitest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Browser starts a headless Chromium with a fresh profile (t.TempDir())
// and a 1280x800 window, and returns a tab's context, canceled (Chromium
// stopped) at the end of the test. Chromium missing fails the test when the
// CI environment variable is set and skips it otherwise. The flags keep
// Chromium off the network but for the pages it is sent to.
func Browser(t testing.TB) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium not found (tools/setup.sh installs it): %v", err)
		}
		t.Skipf("chromium not found (tools/setup.sh installs it): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("no-pings", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser now, a launch failure reported here. (Not under a
	// timeout context: the first action's context owns the browser.)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// Eval evaluates a JavaScript expression in the tab and returns its value
// decoded as T, failing the test on an error.
func Eval[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// Run runs actions in the tab with a timeout, failing the test (with a PNG
// of the page, named after the test and what) when one fails.
func Run(t testing.TB, ctx context.Context, timeout time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		SavePNG(t, ctx, "failed-"+what)
		t.Fatalf("%s: %v", what, err)
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// SavePNG saves a full-page screenshot of the tab as NAME.png under
// $SCREENGRAPH_UI_PNG_DIR (created when missing) or a t.TempDir(), and logs
// its path, so a person can look at what the test saw.
func SavePNG(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	dir := os.Getenv("SCREENGRAPH_UI_PNG_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("SCREENGRAPH_UI_PNG_DIR: %v", err)
		return ""
	}
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	p := filepath.Join(dir, unsafeName.ReplaceAllString(t.Name()+"-"+name, "_")+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Errorf("saving %s: %v", p, err)
		return ""
	}
	t.Logf("page screenshot: %s", p)
	return p
}

// CountFetches makes each document the tab loads from now on record its
// fetch() calls in window.__sgFetches (each "METHOD path?query"), so a
// test can check what the page asks of the API (one stream, no polling).
// The recorder is installed through DevTools, before the page's own
// scripts; the page's CSP does not apply to it.
func CountFetches() chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `(() => {
			window.__sgFetches = [];
			const f = window.fetch;
			window.fetch = function (input, init) {
				const u = new URL(typeof input === "string" ? input : input.url, location.href);
				window.__sgFetches.push(((init && init.method) || "GET") + " " + u.pathname + u.search);
				return f.apply(this, arguments);
			};
		})();`})
		return chromedp.Void{}, err
	}
}
