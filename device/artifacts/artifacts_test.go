package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device/artifacts/apk"
)

const keyA = "d9077530c262a4f6142fe72ce18ee96204ee8a596bce314c8371e641b3ae5f81"

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "apks", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pool trusts srv's certificate.
func pool(srv *httptest.Server) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(srv.Certificate())
	return p
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func newFetcher(t *testing.T, opt Options) *Fetcher {
	t.Helper()
	if opt.CacheDir == "" {
		opt.CacheDir = t.TempDir()
	}
	f, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// checkArtifact asserts the cached file holds want and sits at sha256/<hex>.apk.
func checkArtifact(t *testing.T, f *Fetcher, a apk.Artifact, want []byte) {
	t.Helper()
	got, err := os.ReadFile(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) || a.SHA256 != sha(want) || a.Size != int64(len(want)) {
		t.Fatalf("artifact %+v does not hold the %d expected bytes", a, len(want))
	}
	if a.Path != filepath.Join(f.opt.CacheDir, "sha256", a.SHA256+".apk") {
		t.Errorf("path %s", a.Path)
	}
}

func wantErr(t *testing.T, err error, id agent.ErrorID, retryable bool) {
	t.Helper()
	var e *agent.Error
	if !errors.As(err, &e) || e.ID != id || e.Retryable != retryable {
		t.Fatalf("err = %v, want %s retryable=%v", err, id, retryable)
	}
}

func TestFetchFileCachesAndNoticesChange(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "app.apk")
	v1, v2 := fixture(t, "demo-v1.apk"), fixture(t, "demo-v2.apk")
	os.WriteFile(src, v1, 0o644)
	f := newFetcher(t, Options{})
	var last, total int64
	a, err := f.Fetch(context.Background(), "file://"+src, func(d, tot int64) { last, total = d, tot })
	if err != nil {
		t.Fatal(err)
	}
	checkArtifact(t, f, a, v1)
	if a.CacheHit || last != int64(len(v1)) || total != int64(len(v1)) {
		t.Errorf("first fetch: hit=%v progress %d/%d", a.CacheHit, last, total)
	}
	// Same file: served from the cache (and a new Fetcher reads the index from disk).
	f2 := newFetcher(t, Options{CacheDir: f.opt.CacheDir})
	a2, err := f2.Fetch(context.Background(), "file://"+src, nil)
	if err != nil || !a2.CacheHit || a2.Path != a.Path {
		t.Fatalf("second fetch %+v, %v: want a cache hit", a2, err)
	}
	// Rewritten with other bytes of the same size (demo-v1 and -v2 are both
	// 8587 bytes): the modification time tells.
	if len(v1) != len(v2) {
		t.Logf("fixtures differ in size (%d, %d)", len(v1), len(v2))
	}
	os.WriteFile(src, v2, 0o644)
	os.Chtimes(src, time.Now().Add(time.Second), time.Now().Add(time.Second))
	a3, err := f2.Fetch(context.Background(), src, nil) // bare path = file://
	if err != nil {
		t.Fatal(err)
	}
	if a3.CacheHit {
		t.Fatal("changed file served from the cache")
	}
	checkArtifact(t, f2, a3, v2)
	// A deleted cache blob is fetched again.
	os.Remove(a3.Path)
	a4, err := f2.Fetch(context.Background(), src, nil)
	if err != nil || a4.CacheHit {
		t.Fatalf("after blob removal: %+v %v", a4, err)
	}
	checkArtifact(t, f2, a4, v2)

	_, err = f2.Fetch(context.Background(), "file://"+filepath.Join(dir, "missing.apk"), nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, false)
}

func TestFetchBadRefs(t *testing.T) {
	f := newFetcher(t, Options{})
	for _, ref := range []string{"ftp://x/y.apk", "s3://bucket-only", "s3:///key", "relative/path.apk",
		"http://example.com/a.apk", "file://host/abs.apk", "https:///nohost.apk", "%zz"} {
		_, err := f.Fetch(context.Background(), ref, nil)
		wantErr(t, err, agent.ErrInvalidRequest, false)
	}
}

func TestFetchHTTPSConditional(t *testing.T) {
	body := fixture(t, "demo-v2.apk")
	var gets, fulls atomic.Int32
	etag := `"v2"`
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/builds/app.apk":
			gets.Add(1)
			w.Header().Set("ETag", etag)
			if r.Header.Get("If-None-Match") == etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			fulls.Add(1)
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
		case "/nolm.apk": // no validator: never reused
			fulls.Add(1)
			w.Write(body)
		case "/missing.apk":
			http.NotFound(w, r)
		case "/denied.apk":
			w.WriteHeader(http.StatusForbidden)
		case "/busy.apk":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/short.apk":
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body[:100])
		case "/slow.apk":
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}
	}))
	defer srv.Close()
	f := newFetcher(t, Options{RootCAs: pool(srv), Timeout: 500 * time.Millisecond})
	ctx := context.Background()
	ref := srv.URL + "/builds/app.apk?X-Amz-Signature=secret"
	a, err := f.Fetch(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkArtifact(t, f, a, body)
	b, err := f.Fetch(ctx, ref, nil)
	if err != nil || !b.CacheHit || b.Path != a.Path {
		t.Fatalf("second fetch %+v %v", b, err)
	}
	if gets.Load() != 2 || fulls.Load() != 1 {
		t.Errorf("requests %d, full downloads %d; want 2 and 1", gets.Load(), fulls.Load())
	}
	// The object changes: its new ETag makes the server send it again.
	etag = `"v2b"`
	if c, err := f.Fetch(ctx, ref, nil); err != nil || c.CacheHit || fulls.Load() != 2 {
		t.Fatalf("after change: %+v %v, full downloads %d", c, err, fulls.Load())
	}
	for i := 0; i < 2; i++ {
		if c, err := f.Fetch(ctx, srv.URL+"/nolm.apk", nil); err != nil || c.CacheHit {
			t.Fatalf("no-validator fetch %d: %+v %v", i, c, err)
		}
	}

	_, err = f.Fetch(ctx, srv.URL+"/missing.apk", nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, false)
	_, err = f.Fetch(ctx, srv.URL+"/denied.apk", nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, false)
	_, err = f.Fetch(ctx, srv.URL+"/busy.apk", nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, true)
	_, err = f.Fetch(ctx, srv.URL+"/short.apk", nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, true)
	_, err = f.Fetch(ctx, srv.URL+"/slow.apk", nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, true)
	if e := agent.Classify(err); !errors.Is(e, context.DeadlineExceeded) {
		t.Errorf("slow: %v, want the deadline as cause", err)
	}
	// An untrusted certificate is final; the query string never shows.
	plain := newFetcher(t, Options{})
	_, err = plain.Fetch(ctx, ref, nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, false)
	if bytes.Contains([]byte(err.Error()), []byte("secret")) {
		t.Errorf("error leaks the query: %v", err)
	}
	// Nobody listening: retryable.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	_, err = f.Fetch(ctx, "https://"+addr+"/x.apk", nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, true)
	// A canceled context is interrupted, not a missing artifact.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = f.Fetch(cctx, srv.URL+"/nolm.apk", nil)
	wantErr(t, err, agent.ErrInterrupted, false)
	// Nothing left behind in tmp/ but the index's own temp files are renamed too.
	if ents, _ := os.ReadDir(filepath.Join(f.opt.CacheDir, "tmp")); len(ents) != 0 {
		t.Errorf("tmp/ not empty: %d entries", len(ents))
	}
}

// fakeS3 starts gofakes3 in process with one bucket and counts GETs of objects.
func fakeS3(t *testing.T) (*httptest.Server, *s3mem.Backend, *atomic.Int32) {
	t.Helper()
	be := s3mem.New()
	faker := gofakes3.New(be)
	var gets atomic.Int32
	h := faker.Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			gets.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	if err := be.CreateBucket("builds"); err != nil {
		t.Fatal(err)
	}
	return srv, be, &gets
}

func s3Options(endpoint string) S3Options {
	return S3Options{Endpoint: endpoint, Region: "us-east-1", AccessKeyID: "test", SecretAccessKey: "test", PathStyle: true, MaxAttempts: 1}
}

func TestFetchS3(t *testing.T) {
	srv, be, gets := fakeS3(t)
	v1, v2 := fixture(t, "demo-v1.apk"), fixture(t, "demo-v2.apk")
	put := func(b []byte) {
		if _, err := be.PutObject("builds", "app/app-1.2.3.apk", map[string]string{}, bytes.NewReader(b), int64(len(b)), nil); err != nil {
			t.Fatal(err)
		}
	}
	put(v1)
	f := newFetcher(t, Options{S3: s3Options(srv.URL)})
	ctx := context.Background()
	ref := "s3://builds/app/app-1.2.3.apk"
	var seen int64
	a, err := f.Fetch(ctx, ref, func(d, _ int64) { seen = d })
	if err != nil {
		t.Fatal(err)
	}
	checkArtifact(t, f, a, v1)
	if seen != int64(len(v1)) {
		t.Errorf("progress ended at %d", seen)
	}
	b, err := f.Fetch(ctx, ref, nil)
	if err != nil || !b.CacheHit {
		t.Fatalf("second fetch %+v %v", b, err)
	}
	if gets.Load() != 1 {
		t.Errorf("GetObject calls %d, want 1", gets.Load())
	}
	put(v2) // same key, new bytes, new ETag
	c, err := f.Fetch(ctx, ref, nil)
	if err != nil || c.CacheHit {
		t.Fatalf("after overwrite %+v %v", c, err)
	}
	checkArtifact(t, f, c, v2)

	_, err = f.Fetch(ctx, "s3://builds/nope.apk", nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, false)
	_, err = f.Fetch(ctx, "s3://no-such-bucket/app.apk", nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, false)

	// Endpoint down: retryable.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	down := newFetcher(t, Options{S3: s3Options("http://" + addr)})
	_, err = down.Fetch(ctx, ref, nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, true)
}

func TestS3FailureClassification(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/b/denied.apk":
			w.WriteHeader(http.StatusForbidden) // HEAD has no body: the SDK sees "Forbidden"
		case "/b/busy.apk":
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	f := newFetcher(t, Options{S3: s3Options(srv.URL)})
	_, err := f.Fetch(context.Background(), "s3://b/denied.apk", nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, false)
	_, err = f.Fetch(context.Background(), "s3://b/busy.apk", nil)
	wantErr(t, err, agent.ErrArtifactUnavailable, true)
}

func TestFetchThenInspect(t *testing.T) {
	f := newFetcher(t, Options{})
	a, err := f.Fetch(context.Background(), filepath.Join(mustAbs(t, "../../fixtures/apks"), "demo-v2.apk"), nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.Inspect(a.Path, 34)
	if err != nil {
		t.Fatal(err)
	}
	if info.Package != "com.example.app" || info.VersionCode != 2 || info.SignerSHA256[0] != keyA {
		t.Errorf("info %+v", info)
	}
	n, err := f.Fetch(context.Background(), filepath.Join(mustAbs(t, "../../fixtures/apks"), "not-an-apk.apk"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Inspect(n.Path, 34)
	wantErr(t, err, agent.ErrArtifactUnavailable, false)
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A reference is parsed once when a run is submitted (CheckRef) and once
// when it is fetched (Fetch, the fetching daemon's rules at the last
// moment), file roots included: the policy check takes the parsed URL.
func TestRefParsedOnceAtSubmitAndOnceAtFetch(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "app.apk")
	if err := os.WriteFile(src, fixture(t, "demo-v1.apk"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFetcher(t, Options{Policy: Policy{ConfineFiles: true, FileRoots: []string{root}}})
	n := 0
	parseRef = func(ref string, allowHTTP bool) (*url.URL, error) { n++; return parseURLRef(ref, allowHTTP) }
	defer func() { parseRef = parseURLRef }()
	if err := f.CheckRef("file://" + src); err != nil || n != 1 {
		t.Errorf("CheckRef: %v, %d parses, want 1", err, n)
	}
	n = 0
	if _, err := f.Fetch(context.Background(), "file://"+src, nil); err != nil || n != 1 {
		t.Errorf("Fetch: %v, %d parses, want 1", err, n)
	}
}
