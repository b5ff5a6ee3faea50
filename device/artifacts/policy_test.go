package artifacts

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

func TestMain(m *testing.M) {
	// The SDK's default credential chain must never call the instance
	// metadata service from a test.
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	os.Exit(m.Run())
}

func wantCode(t *testing.T, err error, id agent.ErrorID, code string) *agent.Error {
	t.Helper()
	var e *agent.Error
	if !errors.As(err, &e) || e.ID != id || e.Code != code {
		t.Fatalf("err = %v, want %s (%s)", err, id, code)
	}
	return e
}

func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("%s holds %d entries, want none", dir, len(ents))
	}
}

func TestFileRootsConfine(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	body := fixture(t, "demo-v1.apk")
	os.WriteFile(filepath.Join(root, "app.apk"), body, 0o644)
	secret := filepath.Join(outside, "shadow")
	os.WriteFile(secret, []byte("root:$6$secret"), 0o600)
	os.Symlink(secret, filepath.Join(root, "link.apk"))
	os.Symlink(outside, filepath.Join(root, "dirlink"))
	os.Mkdir(filepath.Join(root, "sub"), 0o755)

	f := newFetcher(t, Options{Policy: Policy{ConfineFiles: true, FileRoots: []string{root}}})
	ctx := context.Background()
	a, err := f.Fetch(ctx, "file://"+filepath.Join(root, "app.apk"), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkArtifact(t, f, a, body)
	if _, err := f.Fetch(ctx, filepath.Join(root, "sub", "..", "app.apk"), nil); err != nil {
		t.Fatalf("a path that resolves under the root: %v", err)
	}

	refused := []string{
		"file://" + secret, // outside
		"file://" + filepath.Join(root, "..", filepath.Base(outside), "shadow"), // .. out of the root
		"file://" + filepath.Join(root, "link.apk"),                             // symlink out of the root
		"file://" + filepath.Join(root, "dirlink", "shadow"),                    // through a symlinked dir
		"file://" + filepath.Join(outside, "missing"),                           // missing outside
		"file://" + filepath.Join(root, "missing.apk"),                          // missing inside
		"file://" + filepath.Join(root, "sub"),                                  // a directory
		"/etc/passwd",
	}
	var msgs []string
	for _, ref := range refused {
		_, err := f.Fetch(ctx, ref, nil)
		e := wantCode(t, err, agent.ErrPermission, CodeFileOutsideRoots)
		if e.Retryable || e.Err != nil {
			t.Errorf("%s: retryable=%v cause=%v (a cause could tell whether the file exists)", ref, e.Retryable, e.Err)
		}
		msgs = append(msgs, strings.Replace(e.Error(), ref, "REF", 1))
	}
	for _, m := range msgs[1:] {
		if m != msgs[0] {
			t.Errorf("refusals differ, telling files apart:\n%s\n%s", msgs[0], m)
		}
	}
	// Only the allowed artifact reached the cache.
	if ents, _ := os.ReadDir(filepath.Join(f.opt.CacheDir, "sha256")); len(ents) != 1 {
		t.Errorf("cache holds %d blobs, want 1", len(ents))
	}
	emptyDir(t, filepath.Join(f.opt.CacheDir, "tmp"))

	// No roots: every file reference is refused, naming the flag.
	none := Policy{ConfineFiles: true}
	e := wantCode(t, none.CheckRef("file://"+secret), agent.ErrInvalidRequest, CodeFileNoRoots)
	if !strings.Contains(e.Error(), "--artifact-file-root") {
		t.Errorf("%v does not name the flag", e)
	}
	nf := newFetcher(t, Options{Policy: none})
	_, err = nf.Fetch(ctx, secret, nil)
	wantCode(t, err, agent.ErrInvalidRequest, CodeFileNoRoots)
	if err := none.CheckRef("https://example.com/a.apk"); err != nil {
		t.Errorf("https refused at submit: %v", err)
	}
	// The one-shot run (no policy) reads any file.
	free := newFetcher(t, Options{})
	if _, err := free.Fetch(ctx, secret, nil); err != nil {
		t.Fatalf("unconfined: %v", err)
	}
}

// countingServer is an https server on addr (127.0.0.x:0) that counts the
// connections it accepts.
type countingServer struct {
	*httptest.Server
	accepts atomic.Int32
}

type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func newCounting(t *testing.T, addr string, h http.Handler) *countingServer {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("cannot listen on %s (all of 127.0.0.0/8 is loopback on Linux): %v", addr, err)
	}
	s := &countingServer{Server: httptest.NewUnstartedServer(h)}
	s.Listener = countingListener{l, &s.accepts}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *countingServer) port() string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

func tenanted(context.Context) (bool, error) { return true, nil }

func TestDestinationsCheckedAtDial(t *testing.T) {
	body := fixture(t, "demo-v1.apk")
	refusedSrv := newCounting(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	var allowed *countingServer
	allowed = newCounting(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/to-refused":
			http.Redirect(w, r, "https://127.0.0.2:"+refusedSrv.port()+"/app.apk", http.StatusFound)
		case r.URL.Path == "/to-http":
			http.Redirect(w, r, "http://127.0.0.1:"+allowed.port()+"/app.apk", http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/loop/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/loop/"))
			http.Redirect(w, r, "/loop/"+strconv.Itoa(n+1), http.StatusFound)
		case r.URL.Path == "/hops/5":
			w.Write(body)
		case strings.HasPrefix(r.URL.Path, "/hops/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hops/"))
			http.Redirect(w, r, "/hops/"+strconv.Itoa(n+1), http.StatusFound)
		default:
			w.Write(body)
		}
	}))
	roots := pool(allowed.Server)
	roots.AddCert(refusedSrv.Certificate())
	pol := Policy{Tenanted: tenanted, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	f := newFetcher(t, Options{RootCAs: roots, Policy: pol})
	ctx := context.Background()
	p := allowed.port()

	a, err := f.Fetch(ctx, "https://127.0.0.1:"+p+"/app.apk", nil)
	if err != nil {
		t.Fatalf("allowed address: %v", err)
	}
	checkArtifact(t, f, a, body)
	if _, err := f.Fetch(ctx, "https://127.0.0.1:"+p+"/hops/0", nil); err != nil {
		t.Fatalf("5 redirects: %v", err)
	}

	before := allowed.accepts.Load()
	for _, ref := range []string{
		"https://127.0.0.2:" + refusedSrv.port() + "/app.apk",
		"https://[::ffff:127.0.0.2]:" + refusedSrv.port() + "/app.apk",
		"https://[::1]:" + p + "/app.apk",
		"https://[::ffff:7f00:2]:" + refusedSrv.port() + "/app.apk",
		"https://[64:ff9b::7f00:2]:" + refusedSrv.port() + "/app.apk",
		"https://10.255.255.1/app.apk",
		"https://169.254.169.254/latest/meta-data/",
		"https://100.64.0.1/app.apk",
		"https://0.0.0.0:" + p + "/app.apk",
		"https://[fd00::1]/app.apk",
	} {
		_, err := f.Fetch(ctx, ref, nil)
		wantCode(t, err, agent.ErrPermission, CodeDestination)
	}
	// Numeric spellings that are not IP literals are refused before any lookup.
	for _, host := range []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.1."} {
		_, err := f.Fetch(ctx, "https://"+host+":"+p+"/app.apk", nil)
		wantErr(t, err, agent.ErrInvalidRequest, false)
		if err := pol.CheckRef("https://" + host + "/a.apk"); err == nil {
			t.Errorf("%s accepted at submit", host)
		}
	}
	// Without the allowance, 127.0.0.1 and a name resolving to it are refused.
	strict := newFetcher(t, Options{RootCAs: roots, Policy: Policy{Tenanted: tenanted}})
	for _, ref := range []string{"https://127.0.0.1:" + p + "/app.apk", "https://localhost:" + p + "/app.apk"} {
		_, err := strict.Fetch(ctx, ref, nil)
		wantCode(t, err, agent.ErrPermission, CodeDestination)
	}
	if n := allowed.accepts.Load() - before; n != 0 {
		t.Errorf("refused fetches opened %d connections", n)
	}
	// A redirect from the allowed server to a refused one.
	_, err = f.Fetch(ctx, "https://127.0.0.1:"+p+"/to-refused", nil)
	wantCode(t, err, agent.ErrPermission, CodeDestination)
	_, err = f.Fetch(ctx, "https://127.0.0.1:"+p+"/to-http", nil)
	wantCode(t, err, agent.ErrPermission, CodeRedirect)
	_, err = f.Fetch(ctx, "https://127.0.0.1:"+p+"/loop/0", nil)
	wantCode(t, err, agent.ErrPermission, CodeRedirect)
	if n := refusedSrv.accepts.Load(); n != 0 {
		t.Errorf("the refused server accepted %d connections", n)
	}
	if n := allowed.accepts.Load() - before; n > 3 {
		t.Errorf("allowed server accepted %d connections for 3 fetches", n)
	}
	emptyDir(t, filepath.Join(f.opt.CacheDir, "tmp"))

	// Without tenants only link-local is refused: loopback is fetched.
	open := newFetcher(t, Options{RootCAs: roots, Policy: Policy{Tenanted: func(context.Context) (bool, error) { return false, nil }}})
	if _, err := open.Fetch(ctx, "https://127.0.0.1:"+p+"/app.apk", nil); err != nil {
		t.Fatalf("no tenants, loopback: %v", err)
	}
	for _, ref := range []string{"https://169.254.169.254/latest/meta-data/", "https://[fe80::1]/x.apk", "https://[::ffff:169.254.169.254]/x"} {
		_, err := open.Fetch(ctx, ref, nil)
		wantCode(t, err, agent.ErrPermission, CodeDestination)
	}
	// A failing token check counts as tenanted.
	failing := newFetcher(t, Options{RootCAs: roots, Policy: Policy{Tenanted: func(context.Context) (bool, error) { return false, errors.New("store down") }}})
	_, err = failing.Fetch(ctx, "https://127.0.0.1:"+p+"/app.apk", nil)
	wantCode(t, err, agent.ErrPermission, CodeDestination)
}

func TestDownloadLimits(t *testing.T) {
	body := fixture(t, "demo-v1.apk")
	release := make(chan struct{})
	defer close(release)
	stalled := make(chan struct{}, 1) // a /stall.apk response has sent its first bytes
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big-declared.apk":
			w.Header().Set("Content-Length", strconv.Itoa(1<<30))
			w.WriteHeader(http.StatusOK)
		case "/endless.apk": // chunked, never ends
			chunk := bytes.Repeat([]byte("A"), 32<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/stall.apk":
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body[:100])
			w.(http.Flusher).Flush()
			select {
			case stalled <- struct{}{}:
			default:
			}
			select {
			case <-r.Context().Done():
			case <-release:
			}
		default:
			w.Write(body)
		}
	}))
	defer srv.Close()
	f := newFetcher(t, Options{RootCAs: pool(srv), MaxBytes: int64(len(body)), IdleTimeout: 300 * time.Millisecond, Timeout: time.Minute})
	ctx := context.Background()
	if _, err := f.Fetch(ctx, srv.URL+"/ok.apk", nil); err != nil {
		t.Fatalf("an artifact of exactly MaxBytes: %v", err)
	}
	_, err := f.Fetch(ctx, srv.URL+"/big-declared.apk", nil)
	wantCode(t, err, agent.ErrArtifactUnavailable, CodeTooLarge)
	_, err = f.Fetch(ctx, srv.URL+"/endless.apk", nil)
	wantCode(t, err, agent.ErrArtifactUnavailable, CodeTooLarge)
	start := time.Now()
	_, err = f.Fetch(ctx, srv.URL+"/stall.apk", nil)
	e := wantCode(t, err, agent.ErrArtifactUnavailable, CodeStalled)
	if !e.Retryable {
		t.Error("a stalled download is retryable")
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("stall ended after %s", d)
	}
	emptyDir(t, filepath.Join(f.opt.CacheDir, "tmp"))
	if ents, _ := os.ReadDir(filepath.Join(f.opt.CacheDir, "sha256")); len(ents) != 1 {
		t.Errorf("cache holds %d blobs, want the one complete artifact", len(ents))
	}
	// A file over the cap is refused too (run reads any file, but not any size).
	big := filepath.Join(t.TempDir(), "big.apk")
	os.WriteFile(big, append(body, 0), 0o600)
	_, err = f.Fetch(ctx, big, nil)
	wantCode(t, err, agent.ErrArtifactUnavailable, CodeTooLarge)

	// Cancel reaches the body read in flight: interrupted, nothing kept.
	cctx, cancel := context.WithCancel(ctx)
	select {
	case <-stalled: // the first stall's signal
	default:
	}
	go func() {
		<-stalled // the body is being read
		cancel()
	}()
	slow := newFetcher(t, Options{RootCAs: pool(srv), IdleTimeout: time.Hour})
	_, err = slow.Fetch(cctx, srv.URL+"/stall.apk", nil)
	wantErr(t, err, agent.ErrInterrupted, false)
	emptyDir(t, filepath.Join(slow.opt.CacheDir, "tmp"))
}

func TestS3BucketAllowList(t *testing.T) {
	srv, be, gets := fakeS3(t)
	v1 := fixture(t, "demo-v1.apk")
	if _, err := be.PutObject("builds", "app.apk", map[string]string{}, bytes.NewReader(v1), int64(len(v1)), nil); err != nil {
		t.Fatal(err)
	}
	if err := be.CreateBucket("private"); err != nil {
		t.Fatal(err)
	}
	if _, err := be.PutObject("private", "app.apk", map[string]string{}, bytes.NewReader(v1), int64(len(v1)), nil); err != nil {
		t.Fatal(err)
	}
	f := newFetcher(t, Options{S3: s3Options(srv.URL), Policy: Policy{Tenanted: tenanted, S3Buckets: []string{"builds"}}})
	ctx := context.Background()
	if _, err := f.Fetch(ctx, "s3://builds/app.apk", nil); err != nil {
		t.Fatal(err)
	}
	n := gets.Load()
	_, err := f.Fetch(ctx, "s3://private/app.apk", nil)
	wantCode(t, err, agent.ErrPermission, CodeBucket)
	if gets.Load() != n {
		t.Error("the refused bucket was read")
	}
	// Without tenants the daemon's buckets are the user's own.
	open := newFetcher(t, Options{S3: s3Options(srv.URL), Policy: Policy{S3Buckets: []string{"builds"}}})
	if _, err := open.Fetch(ctx, "s3://private/app.apk", nil); err != nil {
		t.Fatal(err)
	}
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := fixture(t, "demo-v1.apk"), fixture(t, "demo-v2.apk")
	third := append(append([]byte{}, v1...), 'x')
	for name, b := range map[string][]byte{"a.apk": v1, "b.apk": v2, "c.apk": third} {
		os.WriteFile(filepath.Join(dir, name), b, 0o600)
	}
	f := newFetcher(t, Options{CacheMaxBytes: int64(len(v1) + len(v2) + 10)})
	ctx := context.Background()
	a, _ := f.Fetch(ctx, filepath.Join(dir, "a.apk"), nil)
	b, _ := f.Fetch(ctx, filepath.Join(dir, "b.apk"), nil)
	// a is older than b and both are past the grace period; then a is used again.
	old := time.Now().Add(-2 * evictGrace)
	os.Chtimes(a.Path, old, old)
	os.Chtimes(b.Path, old.Add(time.Second), old.Add(time.Second))
	if h, err := f.Fetch(ctx, filepath.Join(dir, "a.apk"), nil); err != nil || !h.CacheHit {
		t.Fatalf("a again: %+v %v", h, err)
	}
	c, err := f.Fetch(ctx, filepath.Join(dir, "c.apk"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{a.Path: true, b.Path: false, c.Path: true} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s present=%v, want %v", filepath.Base(path), err == nil, want)
		}
	}
	if _, ok := f.lookup(filepath.Join(dir, "b.apk")); ok {
		t.Error("the evicted blob's index entry remains")
	}
}
