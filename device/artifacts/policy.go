package artifacts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/screengraph/screengraph-agent/agent"
)

// Codes refining permission_error when a policy refuses a reference. Each
// names the rule that refused it.
const (
	// CodeFileOutsideRoots: a file:// reference that does not resolve (after
	// "..", symlinks) to a regular file under a --artifact-file-root. Also
	// used for a missing or unreadable file there: the error never tells.
	CodeFileOutsideRoots = "ARTIFACT_FILE_OUTSIDE_ROOTS"
	// CodeFileNoRoots: file:// on a daemon configured without file roots.
	CodeFileNoRoots = "ARTIFACT_FILE_ROOTS_UNSET"
	// CodeDestination: an https destination address in a refused range
	// (the message names the range's rule and --artifact-allow-cidr).
	CodeDestination = "ARTIFACT_DESTINATION_REFUSED"
	// CodeRedirect: a redirect to plain http, to another scheme, or past
	// the 5th hop.
	CodeRedirect = "ARTIFACT_REDIRECT_REFUSED"
	// CodeBucket: an s3:// bucket not in --artifact-s3-bucket.
	CodeBucket = "ARTIFACT_S3_BUCKET_REFUSED"
	// CodeTooLarge (artifact_unavailable): the artifact exceeds --artifact-max-bytes.
	CodeTooLarge = "ARTIFACT_TOO_LARGE"
	// CodeStalled (artifact_unavailable, retryable): the body sent nothing
	// for --artifact-idle-timeout.
	CodeStalled = "ARTIFACT_DOWNLOAD_STALLED"
)

// MaxRedirects is how many redirects one https fetch follows.
const MaxRedirects = 5

// Policy confines what a fetch may reach on someone's behalf. The daemon
// builds it once from its configuration (serve's --artifact-* flags); the
// zero value confines nothing (the one-shot `run`, the user's own process).
type Policy struct {
	// ConfineFiles limits file:// (and bare absolute paths) to FileRoots;
	// with no FileRoots every file reference is refused.
	ConfineFiles bool
	// FileRoots are directories file references must resolve under (after
	// "..", symlinks). New resolves them once.
	FileRoots []string
	// AllowCIDRs are destination ranges an https fetch may dial even when
	// a rule below refuses them (--artifact-allow-cidr).
	AllowCIDRs []netip.Prefix
	// S3Buckets, when Tenanted reports true, are the only buckets s3://
	// may name (--artifact-s3-bucket).
	S3Buckets []string
	// Tenanted reports whether the API has tenants (the store holds API
	// tokens). Then https may not dial loopback, private (RFC 1918,
	// fc00::/7), link-local, CGNAT (100.64.0.0/10), unspecified (0.0.0.0/8,
	// ::) or multicast addresses, and s3:// needs S3Buckets. Otherwise only
	// link-local (cloud metadata: 169.254.0.0/16, fe80::/10) is refused.
	// nil means never tenanted. An error counts as tenanted.
	Tenanted func(context.Context) (bool, error)
}

func (p *Policy) tenanted(ctx context.Context) bool {
	if p.Tenanted == nil {
		return false
	}
	t, err := p.Tenanted(ctx)
	return t || err != nil
}

// CheckRef refuses at submission what the policy refuses whatever the
// file system holds: today a file reference on a daemon without file roots
// (invalid_request_error naming --artifact-file-root). Other refusals happen
// at fetch time, where they are checked against what is actually reached.
func (p *Policy) CheckRef(ref string) error {
	u, err := parseRef(ref, true)
	if err != nil {
		return err
	}
	return p.checkURL(u)
}

// checkURL is CheckRef on a reference parseRef has parsed.
func (p *Policy) checkURL(u *url.URL) error {
	if u.Scheme == "file" && p.ConfineFiles && len(p.FileRoots) == 0 {
		e := agent.Errorf(agent.ErrInvalidRequest, "file references are refused: the daemon has no --artifact-file-root (config key artifact-file-root, SCREENGRAPH_ARTIFACT_FILE_ROOTS)")
		e.Code = CodeFileNoRoots
		return e
	}
	return nil
}

func refused(code, format string, args ...any) *agent.Error {
	e := agent.Errorf(agent.ErrPermission, format, args...)
	e.Code = code
	e.Retryable = false
	return e
}

// resolveRoots makes every root absolute and symlink-free, so resolved
// paths can be compared with them.
func resolveRoots(roots []string) ([]string, error) {
	out := make([]string, 0, len(roots))
	for _, r := range roots {
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, fmt.Errorf("artifact file root %q: %w", r, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("artifact file root %q: %w", r, err)
		}
		if st, err := os.Stat(real); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("artifact file root %q is not a directory", r)
		}
		out = append(out, real)
	}
	return out, nil
}

// openConfined opens path when it resolves to a regular file under one of
// roots, through os.Root, so a symlink swapped in after the check still
// cannot lead outside. Every failure is the same error: whether the file
// exists is not told.
func openConfined(roots []string, ref, path string) (*os.File, os.FileInfo, error) {
	no := refused(CodeFileOutsideRoots, "%s is not a readable regular file under the daemon's --artifact-file-root directories", ref)
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, nil, no
	}
	for _, r := range roots {
		rel, err := filepath.Rel(r, real)
		if err != nil || !filepath.IsLocal(rel) {
			continue
		}
		root, err := os.OpenRoot(r)
		if err != nil {
			return nil, nil, no
		}
		// O_NONBLOCK: a FIFO placed under a root must not hang the fetch.
		f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		root.Close()
		if err != nil {
			return nil, nil, no
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			return nil, nil, no
		}
		return f, st, nil
	}
	return nil, nil, no
}

// deniedRule names the rule that refuses ip, or "" when none does. ip is
// unmapped first (::ffff:127.0.0.1 is loopback), and an address that embeds
// an IPv4 address is judged by it too: NAT64 (64:ff9b::/96),
// IPv4-compatible (::/96, deprecated), 6to4 (2002::/16, the IPv4 address in
// bits 16-47) and Teredo (2001::/32, the server's IPv4 address in bits
// 32-63 and the client's, inverted, in the last 32). While tenanted it also
// refuses site-local (fec0::/10, deprecated) addresses and, through
// Policy.control, the host's own interface addresses.
func deniedRule(ip netip.Addr, tenanted bool) string {
	ip = ip.Unmap()
	if rule := embeddedRule(ip, tenanted); rule != "" {
		return rule
	}
	if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
		return "link-local (cloud metadata) addresses"
	}
	if !tenanted {
		return ""
	}
	return tenantedRule(ip)
}

// embeddedRule judges an IPv6 address that embeds IPv4 ones (NAT64,
// IPv4-compatible, 6to4, Teredo) by those (see deniedRule); "" when it
// embeds none that is refused.
func embeddedRule(ip netip.Addr, tenanted bool) string {
	if !ip.Is6() {
		return ""
	}
	b := ip.As16()
	var embedded []netip.Addr
	kind := ""
	switch {
	case nat64.Contains(ip):
		kind, embedded = "NAT64 addresses", []netip.Addr{netip.AddrFrom4([4]byte(b[12:]))}
	case ipv4Compatible.Contains(ip) && !ip.IsUnspecified() && !ip.IsLoopback():
		kind, embedded = "IPv4-compatible (::/96) addresses", []netip.Addr{netip.AddrFrom4([4]byte(b[12:]))}
	case sixToFour.Contains(ip):
		kind, embedded = "6to4 (2002::/16) addresses", []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	case teredo.Contains(ip):
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		kind, embedded = "Teredo (2001::/32) addresses", []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}
	}
	for _, v4 := range embedded {
		if rule := deniedRule(v4, tenanted); rule != "" {
			if kind == "NAT64 addresses" {
				return rule // 64:ff9b::7f00:1 is as loopback as 127.0.0.1
			}
			return kind + " embedding " + rule
		}
	}
	if kind == "IPv4-compatible (::/96) addresses" && tenanted {
		return kind // deprecated (RFC 4291): nothing public is reached this way
	}
	return ""
}

// tenantedRule: the ranges refused only while tenanted.
func tenantedRule(ip netip.Addr) string {
	switch {
	case ip.IsLoopback():
		return "loopback addresses"
	case ip.IsUnspecified() || thisNetwork.Contains(ip):
		return "unspecified addresses"
	case ip.IsPrivate():
		return "private addresses (RFC 1918, fc00::/7)"
	case siteLocal.Contains(ip):
		return "site-local (fec0::/10) addresses"
	case cgnat.Contains(ip):
		return "shared (CGNAT, 100.64.0.0/10) addresses"
	case ip.IsMulticast() || ip == broadcast:
		return "multicast and broadcast addresses"
	}
	return ""
}

var (
	nat64          = netip.MustParsePrefix("64:ff9b::/96")
	ipv4Compatible = netip.MustParsePrefix("::/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	teredo         = netip.MustParsePrefix("2001::/32")
	siteLocal      = netip.MustParsePrefix("fec0::/10")
	thisNetwork    = netip.MustParsePrefix("0.0.0.0/8")
	cgnat          = netip.MustParsePrefix("100.64.0.0/10")
	broadcast      = netip.MustParseAddr("255.255.255.255")
)

// interfaceAddrs lists the host's own addresses (every interface's), read
// at each dial: addresses come and go with interfaces. A var for tests.
var interfaceAddrs = func() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// ownAddress reports whether ip is one of the host's own interface
// addresses (a public address of the host reaches its own services, e.g.
// the daemon's API or an admin port bound to 0.0.0.0). When the interfaces
// cannot be read, every address counts as the host's own.
func ownAddress(ip netip.Addr) bool {
	as, err := interfaceAddrs()
	if err != nil {
		return true
	}
	for _, a := range as {
		if a == ip {
			return true
		}
	}
	return false
}

// errDestination marks a dial the policy refused (kept in the chain for
// errors.As; it carries the agent error to report).
type errDestination struct{ e *agent.Error }

func (d *errDestination) Error() string { return d.e.Error() }

// control is the dialer's check of the address about to be connected (every
// DNS answer, every redirect hop): a refused one is never connected.
func (p *Policy) control(tenanted bool) func(ctx context.Context, network, address string, _ syscall.RawConn) error {
	return func(ctx context.Context, network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &errDestination{refused(CodeDestination, "destination refused: not an IP address and port")}
		}
		ip := ap.Addr().Unmap()
		for _, c := range p.AllowCIDRs {
			if c.Contains(ip) {
				return nil
			}
		}
		rule := deniedRule(ip, tenanted)
		if rule == "" && tenanted && ownAddress(ip) {
			rule = "this host's own addresses"
		}
		if rule != "" {
			// The address itself is not named: it is the host's network
			// layout (what a name resolves to), not the tenant's to learn.
			return &errDestination{refused(CodeDestination, "destination refused: %s are not fetched on a tenant's behalf (allow a range with --artifact-allow-cidr)", rule)}
		}
		return nil
	}
}

// guardedClient is the https client of one mode (tenanted or not): its
// dialer checks each address, it uses no proxy (a proxy would be the only
// address checked), and it follows at most MaxRedirects redirects, never
// from https to anything else.
func (p *Policy) guardedClient(tenanted bool, roots *x509.CertPool) *http.Client {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, ControlContext: p.control(tenanted)}
	t := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		ExpectContinueTimeout: time.Second,
	}
	if roots != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: t, CheckRedirect: checkRedirect}
}

func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		return refused(CodeRedirect, "more than %d redirects", MaxRedirects)
	}
	prev := via[len(via)-1].URL.Scheme
	if req.URL.Scheme != "https" && (prev == "https" || req.URL.Scheme != "http") {
		return refused(CodeRedirect, "redirect from %s to %s refused (https is never redirected to another scheme)", prev, req.URL.Scheme)
	}
	return nil
}

// destinationError returns the policy refusal in err's chain, if any.
func destinationError(err error) *agent.Error {
	var d *errDestination
	if errors.As(err, &d) {
		return d.e
	}
	var ae *agent.Error
	if errors.As(err, &ae) && ae.ID == agent.ErrPermission {
		return ae
	}
	return nil
}

// checkBucket refuses a bucket outside S3Buckets when tenanted.
func (p *Policy) checkBucket(ctx context.Context, bucket string) error {
	if !p.tenanted(ctx) || slices.Contains(p.S3Buckets, bucket) {
		return nil
	}
	return refused(CodeBucket, "s3 bucket %q is not one the daemon fetches from on a tenant's behalf (--artifact-s3-bucket)", bucket)
}

// ParseCIDRs parses --artifact-allow-cidr values (a bare address is a /32
// or /128).
func ParseCIDRs(vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if !strings.Contains(v, "/") {
			a, err := netip.ParseAddr(v)
			if err != nil {
				return nil, agent.Wrap(agent.ErrInvalidRequest, err, "artifact-allow-cidr %q", v)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		pf, err := netip.ParsePrefix(v)
		if err != nil {
			return nil, agent.Wrap(agent.ErrInvalidRequest, err, "artifact-allow-cidr %q", v)
		}
		out = append(out, pf.Masked())
	}
	return out, nil
}

// Config is the daemon's artifact configuration as given (serve's
// --artifact-* flags, config keys and SCREENGRAPH_ARTIFACT_* variables).
type Config struct {
	// FileRoots: --artifact-file-root (repeatable).
	FileRoots []string
	// AllowCIDRs: --artifact-allow-cidr (repeatable; CIDR or bare address).
	AllowCIDRs []string
	// S3Buckets: --artifact-s3-bucket (repeatable).
	S3Buckets []string
	// MaxBytes: --artifact-max-bytes, plain bytes or with a unit (2GiB,
	// 500MB); "" means DefaultMaxBytes.
	MaxBytes string
	// IdleTimeout: --artifact-idle-timeout; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// CacheMaxBytes: --artifact-cache-max-bytes, like MaxBytes; "" means no cap.
	CacheMaxBytes string
}

// DaemonOptions turns c into the Options of a daemon's fetcher over
// cacheDir: file references confined to the roots, destinations and buckets
// checked while tenanted reports true (the store holds API tokens).
// Errors: invalid_request_error naming the key.
func (c Config) DaemonOptions(cacheDir string, tenanted func(context.Context) (bool, error)) (Options, error) {
	cidrs, err := ParseCIDRs(c.AllowCIDRs)
	if err != nil {
		return Options{}, err
	}
	maxBytes, err := parseBytes("artifact-max-bytes", c.MaxBytes)
	if err != nil {
		return Options{}, err
	}
	cacheMax, err := parseBytes("artifact-cache-max-bytes", c.CacheMaxBytes)
	if err != nil {
		return Options{}, err
	}
	if c.IdleTimeout < 0 {
		return Options{}, agent.Errorf(agent.ErrInvalidRequest, "artifact-idle-timeout must be > 0, not %s", c.IdleTimeout)
	}
	var buckets []string
	for _, b := range c.S3Buckets {
		if b = strings.TrimSpace(b); b != "" {
			buckets = append(buckets, b)
		}
	}
	return Options{CacheDir: cacheDir, MaxBytes: maxBytes, IdleTimeout: c.IdleTimeout, CacheMaxBytes: cacheMax,
		Policy: Policy{ConfineFiles: true, FileRoots: c.FileRoots, AllowCIDRs: cidrs, S3Buckets: buckets, Tenanted: tenanted}}, nil
}

// parseBytes reads a size: plain bytes ("2147483648") or with a unit
// ("2GiB", "500 MB"); "" is 0.
func parseBytes(key, s string) (int64, error) {
	if strings.TrimSpace(s) == "" {
		return 0, nil
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 || n > math.MaxInt64 {
		return 0, agent.Errorf(agent.ErrInvalidRequest, "%s %q: a size in bytes (2147483648) or with a unit (2GiB)", key, s)
	}
	return int64(n), nil
}
