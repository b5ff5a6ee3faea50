package httpapi

// Browser guard: without tokens (the laptop default) any web page the user
// visits could drive the API through the user's browser. Three checks run on
// every request, before authentication and routing:
//
//  1. Host (DNS rebinding): the Host header must name the address the
//     connection arrived on — its IP, or any loopback spelling
//     (127.0.0.1, localhost, [::1]) when that address is loopback — with its
//     port, or a name configured with serve --allowed-host (NAME: any port;
//     NAME:PORT: that port). A page at http://evil.example:7420 rebound to
//     127.0.0.1 sends Host evil.example:7420 and is answered 421.
//  2. Cross-origin (CSRF): net/http.CrossOriginProtection refuses a
//     state-changing request (POST) a browser marks cross-site
//     (Sec-Fetch-Site) or whose Origin is not the Host: 403. Requests
//     without either header (curl, the CLI) pass.
//  3. Content type: a POST with a body must be Content-Type
//     application/json (415): forms and "simple" fetches, which a page may
//     send cross-site without a CORS preflight, cannot.

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/screengraph/screengraph-agent/agent"
)

// MaxAllowedHosts bounds Config.AllowedHosts.
const MaxAllowedHosts = 64

// CheckAllowedHost validates one --allowed-host value: a DNS name or an IP,
// optionally with :PORT (an IPv6 address with a port in brackets), at most
// 253 bytes. The error is invalid_request_error naming the flag.
func CheckAllowedHost(h string) error {
	name, port, err := splitHostPort(h)
	bad := err != nil || name == "" || len(h) > 253
	if !bad && port != "" {
		bad = !validPort(port)
	}
	if !bad {
		if _, perr := netip.ParseAddr(name); perr != nil {
			for _, label := range strings.Split(name, ".") {
				if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
					bad = true
					break
				}
			}
		}
	}
	if bad {
		return agent.Errorf(agent.ErrInvalidRequest, "--allowed-host %q: must be a host name or IP, optionally with :PORT", h)
	}
	return nil
}

func validPort(p string) bool {
	if len(p) == 0 || len(p) > 5 {
		return false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n > 0 && n < 65536
}

// splitHostPort splits "host", "host:port", "[v6]" or "[v6]:port"; the port
// is "" when absent.
func splitHostPort(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		if strings.HasSuffix(s, "]") {
			return s[1 : len(s)-1], "", nil
		}
		return net.SplitHostPort(s)
	}
	if strings.Count(s, ":") == 0 {
		return s, "", nil
	}
	if strings.Count(s, ":") > 1 {
		return s, "", nil // a bare IPv6 address
	}
	return net.SplitHostPort(s)
}

// hostGuard holds the parsed Config.AllowedHosts.
type hostGuard struct {
	// names maps a lower-case allowed name to its port ("": any).
	names map[string][]string
}

func newHostGuard(allowed []string) *hostGuard {
	g := &hostGuard{names: map[string][]string{}}
	for _, a := range allowed {
		name, port, err := splitHostPort(a)
		if err != nil || name == "" {
			continue // serve validates with CheckAllowedHost first
		}
		name = strings.ToLower(strings.TrimSuffix(name, "."))
		g.names[name] = append(g.names[name], port)
	}
	return g
}

// allows reports whether the Host header host names this daemon for a
// connection that arrived on local.
func (g *hostGuard) allows(host string, local net.Addr) bool {
	name, port, err := splitHostPort(host)
	if err != nil || name == "" {
		return false
	}
	if port == "" {
		port = "80"
	} else if !validPort(port) {
		return false
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, p := range g.names[name] {
		if p == "" || p == port {
			return true
		}
	}
	return namesLocal(name, port, local)
}

// namesLocal reports whether name:port (name lower case, without a final
// dot) is the address the connection arrived on: its IP (any loopback one
// for a loopback address, "localhost" too) and its port.
func namesLocal(name, port string, local net.Addr) bool {
	ta, ok := local.(*net.TCPAddr)
	if !ok {
		return false
	}
	la, ok := netip.AddrFromSlice(ta.IP)
	if !ok || port != strconv.Itoa(ta.Port) {
		return false
	}
	la = la.Unmap()
	if la.IsLoopback() && name == "localhost" {
		return true
	}
	ha, err := netip.ParseAddr(name)
	if err != nil {
		return false
	}
	ha = ha.Unmap().WithZone("")
	return ha == la.WithZone("") || (la.IsLoopback() && ha.IsLoopback())
}

// browserGuard wraps h with the three checks above.
func browserGuard(h http.Handler, allowed []string) http.Handler {
	g := newHostGuard(allowed)
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, agent.Wrap(agent.ErrPermission, agent.ErrForbidden,
			"%s %s: cross-origin request refused (Origin %q is not this daemon; browsers may not drive the API from another site)",
			r.Method, r.URL.Path, cut(r.Header.Get("Origin"), 100)))
	}))
	inner := cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.ContentLength != 0 {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != "application/json" {
				got := "no Content-Type"
				if ct := r.Header.Get("Content-Type"); ct != "" {
					got = fmt.Sprintf("Content-Type %q", cut(ct, 100))
				}
				writeError(w, http.StatusUnsupportedMediaType, agent.Errorf(agent.ErrInvalidRequest,
					"%s %s: %s: send the body as Content-Type: application/json", r.Method, r.URL.Path, got))
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		if !g.allows(r.Host, local) {
			writeError(w, http.StatusMisdirectedRequest, agent.Wrap(agent.ErrPermission, agent.ErrForbidden,
				"Host %q is not this daemon's listen address nor a --allowed-host name: refused (DNS rebinding protection; serve --allowed-host NAME accepts a name)",
				cut(r.Host, 100)))
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// cut shortens s to n bytes for an error message.
func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
