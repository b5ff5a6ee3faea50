// Package artifacts fetches APK artifacts to a local content-addressed cache
// and inspects them. References are file:///abs/path (or a bare absolute
// path), https://host/path (http:// only when Options.AllowHTTP) and
// s3://bucket/key.
//
// Cache layout under Options.CacheDir:
//
//	sha256/<hex>.apk   the bytes, named by their SHA-256; written once (temp file + rename)
//	index.json         ref -> {sha256, size, validators}
//	tmp/               downloads in progress
//
// Cache rule: a second Fetch of the same ref downloads nothing when the cached
// file still exists with its recorded size and the source is unchanged:
//
//	file://  same size and same modification time (ns) as recorded
//	https:// the server answers 304 to a conditional GET (If-None-Match with the
//	         recorded ETag, else If-Modified-Since with the recorded Last-Modified);
//	         a response with neither validator is never reused
//	s3://    HeadObject reports the recorded ETag and size
//
// Otherwise the ref is downloaded again; identical bytes land on the same file.
package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device/artifacts/apk"
)

// Options configure a Fetcher.
type Options struct {
	// CacheDir is the cache root (created when missing). Required.
	CacheDir string
	// Timeout bounds one download, request and body; 0 means 10 minutes.
	Timeout time.Duration
	// HTTPClient is used for https:// (and http://); nil means a client with
	// no overall timeout of its own (Timeout applies through the context).
	HTTPClient HTTPDoer
	// AllowHTTP permits plain http:// references (tests, internal mirrors).
	AllowHTTP bool
	// S3 configures s3:// references.
	S3 S3Options
}

// S3Options configure the S3 client. Empty fields fall back to the AWS SDK's
// default chain: AWS_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
// AWS_SESSION_TOKEN, AWS_PROFILE and the shared config files,
// AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, then instance roles.
type S3Options struct {
	// Endpoint is a custom endpoint URL (MinIO, gofakes3, a regional endpoint).
	Endpoint string
	// Region; when still empty after the default chain, "us-east-1".
	Region string
	// Static credentials; both empty means the default chain.
	AccessKeyID, SecretAccessKey, SessionToken string
	// PathStyle addresses buckets as endpoint/bucket/key (MinIO, gofakes3)
	// instead of bucket.endpoint/key.
	PathStyle bool
	// MaxAttempts of the SDK's retryer; 0 means the SDK default (3).
	MaxAttempts int
}

// Fetcher fetches and inspects artifacts. Safe for concurrent use.
type Fetcher struct {
	opt Options

	mu    sync.Mutex // guards index and its file
	index map[string]indexEntry

	s3once sync.Once
	s3     s3API
	s3err  error
}

// indexEntry is what index.json records for one ref.
type indexEntry struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// ModTime is a file:// source's modification time (UnixNano).
	ModTime int64 `json:"modTime,omitempty"`
	// ETag / LastModified are the https:// or s3:// validators as received.
	ETag         string    `json:"etag,omitempty"`
	LastModified string    `json:"lastModified,omitempty"`
	FetchedAt    time.Time `json:"fetchedAt"`
}

// New returns a Fetcher over opt.CacheDir, loading its index (a corrupt index
// is ignored: it only saves downloads).
func New(opt Options) (*Fetcher, error) {
	if opt.CacheDir == "" {
		return nil, errors.New("artifacts: CacheDir is required")
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Minute
	}
	if opt.HTTPClient == nil {
		opt.HTTPClient = defaultHTTPClient()
	}
	for _, d := range []string{"sha256", "tmp"} {
		if err := os.MkdirAll(filepath.Join(opt.CacheDir, d), 0o755); err != nil {
			return nil, fmt.Errorf("artifacts: cache dir: %w", err)
		}
	}
	f := &Fetcher{opt: opt, index: map[string]indexEntry{}}
	if b, err := os.ReadFile(f.indexPath()); err == nil {
		_ = json.Unmarshal(b, &f.index)
		if f.index == nil {
			f.index = map[string]indexEntry{}
		}
	}
	return f, nil
}

// Fetch makes the artifact at ref available on local disk and returns where.
// progress (may be nil) receives the bytes downloaded so far and the total
// (-1 when unknown); a cache hit reports nothing.
//
// Errors are *agent.Error: invalid_request_error for a malformed or
// unsupported ref; artifact_unavailable otherwise, retryable for network
// failures, timeouts, HTTP 5xx/408/429 and a truncated body, not retryable for
// a missing object (404, NoSuchKey, NoSuchBucket), denied access (401/403,
// AccessDenied, bad credentials) or an unreadable local file; interrupted when
// ctx is canceled.
func (f *Fetcher) Fetch(ctx context.Context, ref string, progress func(done, total int64)) (apk.Artifact, error) {
	u, err := parseRef(ref, f.opt.AllowHTTP)
	if err != nil {
		return apk.Artifact{}, err
	}
	var a apk.Artifact
	switch u.Scheme {
	case "file":
		a, err = f.fetchFile(ctx, ref, u.Path, progress)
	case "https", "http":
		a, err = f.fetchHTTP(ctx, ref, u, progress)
	case "s3":
		a, err = f.fetchS3(ctx, ref, u.Host, strings.TrimPrefix(u.Path, "/"), progress)
	}
	if err != nil {
		return apk.Artifact{}, ctxAware(ctx, err)
	}
	a.Ref = ref
	return a, nil
}

// Inspect reads the APK at path for a device of apiLevel; see apk.Inspect.
func (f *Fetcher) Inspect(path string, apiLevel int) (apk.Info, error) {
	return apk.Inspect(path, apiLevel)
}

// parseRef checks a reference and returns it as a URL (a bare absolute path
// becomes file://).
func parseRef(ref string, allowHTTP bool) (*url.URL, error) {
	if strings.HasPrefix(ref, "/") {
		return &url.URL{Scheme: "file", Path: ref}, nil
	}
	u, err := url.Parse(ref)
	if err != nil {
		return nil, agent.Wrap(agent.ErrInvalidRequest, err, "apkStorageObjectReference %q", ref)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" || !strings.HasPrefix(u.Path, "/") {
			return nil, agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: file references are file:///absolute/path", ref)
		}
	case "https":
	case "http":
		if !allowHTTP {
			return nil, agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: plain http is not allowed (use https)", ref)
		}
	case "s3":
		if u.Host == "" || strings.Trim(u.Path, "/") == "" {
			return nil, agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: expected s3://bucket/key", ref)
		}
	default:
		return nil, agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: unsupported scheme (file, https, s3)", ref)
	}
	if (u.Scheme == "https" || u.Scheme == "http") && u.Host == "" {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: no host", ref)
	}
	return u, nil
}

// unavailable builds artifact_unavailable with the given retryability.
func unavailable(retryable bool, cause error, format string, args ...any) *agent.Error {
	e := agent.Wrap(agent.ErrArtifactUnavailable, cause, format, args...)
	e.Retryable = retryable
	return e
}

// ctxAware turns any failure after ctx ended into timeout/interrupted, so a
// canceled run is not reported as a missing artifact.
func ctxAware(ctx context.Context, err error) error {
	switch ctx.Err() {
	case context.Canceled:
		return agent.Wrap(agent.ErrInterrupted, err, "fetch canceled")
	case context.DeadlineExceeded:
		return agent.Wrap(agent.ErrTimeout, err, "fetch deadline exceeded")
	}
	return err
}

func (f *Fetcher) indexPath() string { return filepath.Join(f.opt.CacheDir, "index.json") }

func (f *Fetcher) blobPath(sum string) string {
	return filepath.Join(f.opt.CacheDir, "sha256", sum+".apk")
}

// lookup returns the index entry of ref when its cached file still exists
// with the recorded size.
func (f *Fetcher) lookup(ref string) (indexEntry, bool) {
	f.mu.Lock()
	e, ok := f.index[ref]
	f.mu.Unlock()
	if !ok {
		return e, false
	}
	st, err := os.Stat(f.blobPath(e.SHA256))
	if err != nil || st.Size() != e.Size {
		return e, false
	}
	return e, true
}

// record stores ref's entry and rewrites index.json (temp file + rename).
func (f *Fetcher) record(ref string, e indexEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index[ref] = e
	b, err := json.MarshalIndent(f.index, "", "  ")
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Join(f.opt.CacheDir, "tmp"), "index-*.json")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), f.indexPath()) != nil {
		os.Remove(tmp.Name())
	}
}

func (f *Fetcher) hit(ref string, e indexEntry) apk.Artifact {
	return apk.Artifact{Ref: ref, Path: f.blobPath(e.SHA256), SHA256: e.SHA256, Size: e.Size, CacheHit: true}
}

// store copies r into the cache, hashing while writing, and renames the temp
// file to sha256/<hex>.apk. want >= 0 is the expected size: fewer bytes mean
// a truncated transfer (retryable).
func (f *Fetcher) store(r io.Reader, want int64, progress func(done, total int64)) (sum string, n int64, err error) {
	tmp, err := os.CreateTemp(filepath.Join(f.opt.CacheDir, "tmp"), "fetch-*.part")
	if err != nil {
		return "", 0, unavailable(false, err, "cache: create temp file")
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	w := &progressWriter{w: io.MultiWriter(tmp, h), total: want, fn: progress}
	n, err = io.Copy(w, r)
	if err != nil {
		var ae *agent.Error
		if errors.As(err, &ae) {
			return "", n, err
		}
		return "", n, unavailable(true, err, "download interrupted after %d bytes", n)
	}
	if want >= 0 && n != want {
		return "", n, unavailable(true, nil, "download truncated: %d of %d bytes", n, want)
	}
	if err = tmp.Sync(); err == nil {
		err = tmp.Close()
	}
	if err != nil {
		return "", n, unavailable(false, err, "cache: write")
	}
	sum = hex.EncodeToString(h.Sum(nil))
	if err = os.Rename(tmp.Name(), f.blobPath(sum)); err != nil {
		return "", n, unavailable(false, err, "cache: rename")
	}
	return sum, n, nil
}

type progressWriter struct {
	w     io.Writer
	done  int64
	total int64
	fn    func(done, total int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.done += int64(n)
	if p.fn != nil {
		p.fn(p.done, p.total)
	}
	return n, err
}

// fetchFile copies a local file into the cache (so the artifact stays stable
// while it is installed even if the source is rewritten).
func (f *Fetcher) fetchFile(_ context.Context, ref, path string, progress func(done, total int64)) (apk.Artifact, error) {
	st, err := os.Stat(path)
	if err != nil {
		return apk.Artifact{}, unavailable(false, err, "%s", ref)
	}
	if !st.Mode().IsRegular() {
		return apk.Artifact{}, unavailable(false, nil, "%s is not a regular file", ref)
	}
	if e, ok := f.lookup(ref); ok && e.Size == st.Size() && e.ModTime == st.ModTime().UnixNano() {
		return f.hit(ref, e), nil
	}
	src, err := os.Open(path)
	if err != nil {
		return apk.Artifact{}, unavailable(false, err, "%s", ref)
	}
	defer src.Close()
	sum, n, err := f.store(src, st.Size(), progress)
	if err != nil {
		return apk.Artifact{}, err
	}
	f.record(ref, indexEntry{SHA256: sum, Size: n, ModTime: st.ModTime().UnixNano(), FetchedAt: time.Now().UTC()})
	return apk.Artifact{Path: f.blobPath(sum), SHA256: sum, Size: n}, nil
}
