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
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
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
	// RootCAs verify https servers; nil means the system's roots
	// (SSL_CERT_FILE, SSL_CERT_DIR).
	RootCAs *x509.CertPool
	// AllowHTTP permits plain http:// references (tests, internal mirrors).
	AllowHTTP bool
	// S3 configures s3:// references.
	S3 S3Options
	// Policy confines what a fetch may reach (serve); the zero value
	// confines nothing (run).
	Policy Policy
	// MaxBytes caps one artifact (Content-Length first, then the bytes
	// read); 0 means DefaultMaxBytes.
	MaxBytes int64
	// IdleTimeout ends a download whose body sends nothing for that long;
	// 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// CacheMaxBytes caps the cached blobs' total size; beyond it the least
	// recently used blobs are deleted. 0 means no cap.
	CacheMaxBytes int64
}

// Defaults of Options.
const (
	DefaultMaxBytes    int64 = 2 << 30
	DefaultIdleTimeout       = 60 * time.Second
)

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

	// http[true] is the client used while the API has tenants; both check
	// every dialed address against opt.Policy.
	http map[bool]*http.Client
	// evictMu serializes cache evictions.
	evictMu sync.Mutex

	// inspected holds Inspect's results for cached blobs (see Inspect);
	// guarded by inspectMu, at most maxInspected entries.
	inspectMu sync.Mutex
	inspected map[inspectKey]apk.Info
}

// inspectKey names one inspection of a cached blob: the blob's path (its
// SHA-256, checked when it was stored), the size and modification time its
// file has, and the device API level the signers were chosen for.
type inspectKey struct {
	path        string
	size, mtime int64
	apiLevel    int
}

// maxInspected bounds Fetcher.inspected; when full it starts again empty
// (a daemon's runs use a handful of builds at a time).
const maxInspected = 256

// touchEvery is how stale a cached blob's modification time (its last use,
// for eviction) may get before a cache hit refreshes it: a write per hit
// would also change the key of its cached inspection every time.
const touchEvery = time.Minute

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
	// used is the blob's modification time when lookup found it (not saved).
	used time.Time
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
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.IdleTimeout <= 0 {
		opt.IdleTimeout = DefaultIdleTimeout
	}
	roots, err := resolveRoots(opt.Policy.FileRoots)
	if err != nil {
		return nil, agent.Wrap(agent.ErrInvalidRequest, err, "artifacts")
	}
	opt.Policy.FileRoots = roots
	// The cache holds tenants' artifacts: owner only.
	for _, d := range []string{"", "sha256", "tmp"} {
		if err := os.MkdirAll(filepath.Join(opt.CacheDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("artifacts: cache dir: %w", err)
		}
	}
	f := &Fetcher{opt: opt, index: map[string]indexEntry{}, http: map[bool]*http.Client{
		false: opt.Policy.guardedClient(false, opt.RootCAs),
		true:  opt.Policy.guardedClient(true, opt.RootCAs),
	}}
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
		if err := f.opt.Policy.checkURL(u); err != nil {
			return apk.Artifact{}, err
		}
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
	if !a.CacheHit {
		f.evict(a.Path)
	}
	return a, nil
}

// CheckRef refuses at submission a reference this fetcher would refuse
// whatever it finds (a malformed ref, a numeric host spelling, file:// on a
// daemon without file roots): invalid_request_error. "" is accepted (no
// artifact).
func (f *Fetcher) CheckRef(ref string) error {
	if strings.TrimSpace(ref) == "" {
		return nil
	}
	u, err := parseRef(ref, f.opt.AllowHTTP)
	if err != nil {
		return err
	}
	return f.opt.Policy.checkURL(u)
}

// Inspect reads the APK at path for a device of apiLevel; see apk.Inspect.
// A blob of this cache (a Fetch's Path) is parsed and its signature
// verified once per (path, size, modification time, apiLevel): its name is
// the SHA-256 its bytes had when stored, and a file changed since has
// another size or modification time. Other paths, and failures, are
// inspected every time. The result is the caller's own (slices copied).
func (f *Fetcher) Inspect(path string, apiLevel int) (apk.Info, error) {
	if filepath.Dir(path) != filepath.Join(f.opt.CacheDir, "sha256") {
		return inspectAPK(path, apiLevel)
	}
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return inspectAPK(path, apiLevel) // which says what is wrong
	}
	k := inspectKey{path: path, size: st.Size(), mtime: st.ModTime().UnixNano(), apiLevel: apiLevel}
	f.inspectMu.Lock()
	info, ok := f.inspected[k]
	f.inspectMu.Unlock()
	if ok {
		return cloneInfo(info), nil
	}
	info, err = inspectAPK(path, apiLevel)
	if err != nil {
		return info, err
	}
	f.inspectMu.Lock()
	if f.inspected == nil || len(f.inspected) >= maxInspected {
		f.inspected = map[inspectKey]apk.Info{}
	}
	f.inspected[k] = cloneInfo(info)
	f.inspectMu.Unlock()
	return info, nil
}

// inspectAPK is apk.Inspect (a test counts its calls).
var inspectAPK = apk.Inspect

func cloneInfo(i apk.Info) apk.Info {
	i.SignerSHA256 = slices.Clone(i.SignerSHA256)
	return i
}

// parseRef is parseURLRef (a test counts its calls: one at submit, one at
// fetch).
var parseRef = parseURLRef

// parseURLRef checks a reference and returns it as a URL (a bare absolute
// path becomes file://).
func parseURLRef(ref string, allowHTTP bool) (*url.URL, error) {
	if strings.HasPrefix(ref, "/") {
		return &url.URL{Scheme: "file", Path: ref}, nil
	}
	u, err := url.Parse(ref)
	if err != nil {
		return nil, agent.Wrap(agent.ErrInvalidRequest, err, "apkStorageObjectReference %q", ref)
	}
	if err := checkRefURL(ref, u, allowHTTP); err != nil {
		return nil, err
	}
	return u, nil
}

// checkRefURL checks a parsed reference's scheme and host (see parseRef).
func checkRefURL(ref string, u *url.URL, allowHTTP bool) error {
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" || !strings.HasPrefix(u.Path, "/") {
			return agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: file references are file:///absolute/path", ref)
		}
		return nil
	case "s3":
		if u.Host == "" || strings.Trim(u.Path, "/") == "" {
			return agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: expected s3://bucket/key", ref)
		}
		return nil
	case "http":
		if !allowHTTP {
			return agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: plain http is not allowed (use https)", ref)
		}
	case "https":
	default:
		return agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: unsupported scheme (file, https, s3)", ref)
	}
	if u.Host == "" {
		return agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: no host", ref)
	}
	if numericHost(u.Hostname()) {
		return agent.Errorf(agent.ErrInvalidRequest, "apkStorageObjectReference %q: host %q is neither a name nor a canonical IP address", agent.RedactString(ref), u.Hostname())
	}
	return nil
}

// numericHost reports a host that looks like a number but is not a
// canonical IP address: 127.1, 2130706433, 0x7f000001, 0177.0.0.1. Such
// spellings mean an address to some resolvers (inet_aton) and a name to
// others; no DNS name ends in a numeric label, so they are refused before
// any lookup.
func numericHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return false
	}
	if t := strings.TrimSuffix(h, "."); t != h {
		if _, err := netip.ParseAddr(t); err == nil {
			return true // "127.0.0.1." is a name to Go's resolver
		}
		h = t
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(strings.ToLower(last), "0x") {
		return true
	}
	return strings.Trim(last, "0123456789") == ""
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
// with the recorded size (e.used is the file's modification time).
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
	e.used = st.ModTime()
	return e, true
}

// touch marks the blob at path used now, unless it was marked within
// touchEvery (used is its modification time): the modification time orders
// evictions (LRU).
func (f *Fetcher) touch(path string, used time.Time) {
	now := time.Now()
	if d := now.Sub(used); d >= 0 && d < touchEvery {
		return
	}
	_ = os.Chtimes(path, now, now)
}

// record stores ref's entry and rewrites index.json (temp file + rename).
func (f *Fetcher) record(ref string, e indexEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index[ref] = e
	f.saveIndexLocked()
}

// forget drops ref's entry (its blob was evicted).
func (f *Fetcher) forget(ref string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.index, ref)
	f.saveIndexLocked()
}

func (f *Fetcher) saveIndexLocked() {
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
	f.touch(f.blobPath(e.SHA256), e.used)
	return apk.Artifact{Ref: ref, Path: f.blobPath(e.SHA256), SHA256: e.SHA256, Size: e.Size, CacheHit: true}
}

// store copies r into the cache, hashing while writing, and renames the temp
// file to sha256/<hex>.apk. want >= 0 is the expected size: fewer bytes mean
// a truncated transfer (retryable). More than MaxBytes (declared or read) is
// refused; on any failure the partial file is deleted.
func (f *Fetcher) store(r io.Reader, want int64, progress func(done, total int64)) (sum string, n int64, err error) {
	if want > f.opt.MaxBytes {
		return "", 0, tooLarge(want, f.opt.MaxBytes)
	}
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
	n, err = io.Copy(w, io.LimitReader(r, f.opt.MaxBytes+1))
	if err != nil {
		var ae *agent.Error
		if errors.As(err, &ae) {
			return "", n, err
		}
		return "", n, unavailable(true, err, "download interrupted after %d bytes", n)
	}
	if n > f.opt.MaxBytes {
		return "", n, tooLarge(n, f.opt.MaxBytes)
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
	f.touch(f.blobPath(sum), time.Time{})
	return sum, n, nil
}

func tooLarge(n, max int64) *agent.Error {
	e := unavailable(false, nil, "artifact of %d bytes or more exceeds --artifact-max-bytes %d", n, max)
	e.Code = CodeTooLarge
	return e
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
// while it is installed even if the source is rewritten). With
// Policy.ConfineFiles the file must resolve under a file root, and every
// failure reads the same (nothing tells whether the file exists).
func (f *Fetcher) fetchFile(_ context.Context, ref, path string, progress func(done, total int64)) (apk.Artifact, error) {
	var (
		src *os.File
		st  os.FileInfo
		err error
	)
	if f.opt.Policy.ConfineFiles {
		if src, st, err = openConfined(f.opt.Policy.FileRoots, ref, path); err != nil {
			return apk.Artifact{}, err
		}
	} else {
		if st, err = os.Stat(path); err != nil {
			return apk.Artifact{}, unavailable(false, err, "%s", ref)
		}
		if !st.Mode().IsRegular() {
			return apk.Artifact{}, unavailable(false, nil, "%s is not a regular file", ref)
		}
		if src, err = os.Open(path); err != nil {
			return apk.Artifact{}, unavailable(false, err, "%s", ref)
		}
	}
	defer src.Close()
	if e, ok := f.lookup(ref); ok && e.Size == st.Size() && e.ModTime == st.ModTime().UnixNano() {
		return f.hit(ref, e), nil
	}
	sum, n, err := f.store(src, st.Size(), progress)
	if err != nil {
		return apk.Artifact{}, err
	}
	f.record(ref, indexEntry{SHA256: sum, Size: n, ModTime: st.ModTime().UnixNano(), FetchedAt: time.Now().UTC()})
	return apk.Artifact{Path: f.blobPath(sum), SHA256: sum, Size: n}, nil
}
