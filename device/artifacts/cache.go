package artifacts

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// evictGrace protects blobs used this recently from eviction: a run holds
// the path between Fetch and its install.
const evictGrace = 10 * time.Minute

// evict deletes the least recently used blobs (by modification time, which
// a cache hit refreshes) until the cache holds at most CacheMaxBytes, never
// keep (the blob just fetched) nor one used within evictGrace; their index
// entries go with them.
func (f *Fetcher) evict(keep string) {
	if f.opt.CacheMaxBytes <= 0 {
		return
	}
	f.evictMu.Lock()
	defer f.evictMu.Unlock()
	dir := filepath.Join(f.opt.CacheDir, "sha256")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type blob struct {
		path string
		size int64
		used time.Time
	}
	var blobs []blob
	var total int64
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		blobs = append(blobs, blob{filepath.Join(dir, e.Name()), info.Size(), info.ModTime()})
		total += info.Size()
	}
	sort.Slice(blobs, func(i, j int) bool { return blobs[i].used.Before(blobs[j].used) })
	removed := map[string]bool{}
	for _, b := range blobs {
		if total <= f.opt.CacheMaxBytes {
			break
		}
		if b.path == keep || time.Since(b.used) < evictGrace {
			continue
		}
		if os.Remove(b.path) == nil {
			total -= b.size
			removed[strings.TrimSuffix(filepath.Base(b.path), ".apk")] = true
		}
	}
	if len(removed) == 0 {
		return
	}
	f.mu.Lock()
	var refs []string
	for ref, e := range f.index {
		if removed[e.SHA256] {
			refs = append(refs, ref)
		}
	}
	f.mu.Unlock()
	for _, ref := range refs {
		f.forget(ref)
	}
}

// idleReader ends a body read that delivers nothing for d: the timer,
// re-armed by every read that returns bytes, cancels the request's context
// with errStalled as its cause.
type idleReader struct {
	r     io.Reader
	d     time.Duration
	timer *time.Timer
}

var errStalled = errors.New("download stalled")

func newIdleReader(r io.Reader, d time.Duration, cancel context.CancelCauseFunc) *idleReader {
	return &idleReader{r: r, d: d, timer: time.AfterFunc(d, func() { cancel(errStalled) })}
}

func (i *idleReader) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	if n > 0 {
		i.timer.Reset(i.d)
	}
	return n, err
}

func (i *idleReader) stop() { i.timer.Stop() }
