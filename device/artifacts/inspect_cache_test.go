package artifacts

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/device/artifacts/apk"
)

// countInspects makes inspectAPK count its calls for the test.
func countInspects(t *testing.T) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	prev := inspectAPK
	inspectAPK = func(path string, apiLevel int) (apk.Info, error) {
		n.Add(1)
		return prev(path, apiLevel)
	}
	t.Cleanup(func() { inspectAPK = prev })
	return &n
}

// fetchedDemo fetches a copy of demo-v1.apk into a new Fetcher's cache and
// returns the fetcher, the copy's path and the artifact.
func fetchedDemo(t *testing.T) (*Fetcher, string, apk.Artifact) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "app.apk")
	os.WriteFile(src, fixture(t, "demo-v1.apk"), 0o644)
	f := newFetcher(t, Options{})
	a, err := f.Fetch(context.Background(), "file://"+src, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f, src, a
}

// TestInspectCachedBlobOnce: a cached blob is parsed and verified once per
// (path, size, modification time, API level); a blob changed on disk, another
// API level and a file outside the cache are inspected again; callers cannot
// change the cached result through the slices they get.
func TestInspectCachedBlobOnce(t *testing.T) {
	n := countInspects(t)
	f, src, a := fetchedDemo(t)
	first, err := f.Inspect(a.Path, 34)
	if err != nil || n.Load() != 1 {
		t.Fatalf("%v, %d inspections", err, n.Load())
	}
	want := first
	want.SignerSHA256 = slices.Clone(first.SignerSHA256)
	first.SignerSHA256[0] = "changed by the caller"
	for range 3 {
		a, err := f.Fetch(context.Background(), "file://"+src, nil) // a cache hit, as a warm ProvisionApp's
		if err != nil || !a.CacheHit {
			t.Fatalf("fetch %+v %v", a, err)
		}
		got, err := f.Inspect(a.Path, 34)
		if err != nil || got.Package != want.Package || got.VersionCode != want.VersionCode || !slices.Equal(got.SignerSHA256, want.SignerSHA256) {
			t.Fatalf("cached inspection %+v %v, want %+v", got, err, want)
		}
	}
	if n.Load() != 1 {
		t.Errorf("%d inspections of one unchanged blob at one API level, want 1", n.Load())
	}
	if _, err := f.Inspect(a.Path, 27); err != nil || n.Load() != 2 {
		t.Errorf("another API level: %v, %d inspections, want 2", err, n.Load())
	}
	// The blob rewritten in place (another build, same size): inspected anew.
	os.WriteFile(a.Path, fixture(t, "demo-v2.apk"), 0o600)
	later := time.Now().Add(time.Second)
	os.Chtimes(a.Path, later, later)
	got, err := f.Inspect(a.Path, 34)
	if err != nil || n.Load() != 3 || got.VersionCode != 2 {
		t.Errorf("changed blob: %+v %v, %d inspections, want versionCode 2 from a 3rd", got, err, n.Load())
	}
	// A file outside the cache (a pulled base.apk): every time.
	for range 2 {
		if _, err := f.Inspect(src, 34); err != nil {
			t.Fatal(err)
		}
	}
	if n.Load() != 5 {
		t.Errorf("%d inspections, want 5: a file outside the cache is inspected each time", n.Load())
	}
}

// TestCacheHitTouchesStaleBlobsOnly: a hit refreshes the blob's modification
// time (its last use, for eviction) only when it is older than touchEvery.
func TestCacheHitTouchesStaleBlobsOnly(t *testing.T) {
	f, src, a := fetchedDemo(t)
	recent := time.Now().Add(-touchEvery / 2).Truncate(time.Second)
	os.Chtimes(a.Path, recent, recent)
	if _, err := f.Fetch(context.Background(), "file://"+src, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(a.Path); !st.ModTime().Equal(recent) {
		t.Errorf("a blob used %v ago was touched: %v", touchEvery/2, st.ModTime())
	}
	stale := time.Now().Add(-2 * touchEvery)
	os.Chtimes(a.Path, stale, stale)
	if _, err := f.Fetch(context.Background(), "file://"+src, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(a.Path); time.Since(st.ModTime()) > touchEvery/2 {
		t.Errorf("a blob used %v ago was not touched: %v", 2*touchEvery, st.ModTime())
	}
}
