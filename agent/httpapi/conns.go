package httpapi

// Connection floods. Every HTTP connection holds one of the process's file
// descriptors, and so do the daemon's own dials (the adb server, Appium,
// Postgres, NATS, artifact downloads) and files (the store, blobs). Go's
// http.Server accepts without limit, so 1,500 idle keep-alive connections
// (no token needed to open one) used up a 1,024-descriptor process and the
// scheduler's adb dials failed with "socket: too many open files". So:
//
//   - at most ConnLimits.MaxConns connections are open at once
//     (golang.org/x/net/netutil.LimitListener: the next one waits in the
//     kernel's accept queue, holding no descriptor of ours), sized from the
//     process's RLIMIT_NOFILE so that the rest stays for the daemon's own work;
//   - at most MaxConnsPerAddr of them come from one remote IP address; the
//     next is closed as soon as it is accepted;
//   - under pressure (PressureConns open or more) keep-alives are switched
//     off: idle connections are closed at once and every response closes its
//     connection, until the count is back under half of MaxConns.

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
)

// ConnLimits bound the HTTP connections of the daemon (see above).
type ConnLimits struct {
	// MaxConns caps the connections open at once.
	MaxConns int
	// MaxConnsPerAddr caps the connections open at once from one remote IP.
	MaxConnsPerAddr int
	// PressureConns is the count of open connections from which keep-alives
	// are off and idle connections closed; back on under MaxConns/2.
	PressureConns int
}

// Descriptor budget of ConnLimitsFor.
const (
	// ReservedDescriptors stay for the daemon's own work whatever the
	// limit: adb and Appium dials (a few per device and run), the store's
	// files and pool, NATS (the embedded server's clients too), artifact
	// downloads and evidence blobs.
	ReservedDescriptors = 256
	// MaxHTTPConns is the most connections ConnLimitsFor gives HTTP.
	MaxHTTPConns = 8192
)

// ConnLimitsFor sizes the limits for a process allowed nofile descriptors
// (RLIMIT_NOFILE; 0 = unknown, taken as 1024): half of what is left after
// ReservedDescriptors, at least 16 and at most MaxHTTPConns, so HTTP never
// holds more than half of the descriptors; a quarter of that (at least 8)
// per remote address; pressure from three quarters. For nofile 1024: 384
// connections, 96 per address, pressure at 288.
func ConnLimitsFor(nofile uint64) ConnLimits {
	if nofile == 0 {
		nofile = 1024
	}
	n := 16
	if nofile > ReservedDescriptors {
		n = max(16, int(min((nofile-ReservedDescriptors)/2, MaxHTTPConns)))
	}
	return ConnLimits{MaxConns: n, MaxConnsPerAddr: max(8, n/4), PressureConns: max(1, n*3/4)}
}

// DescriptorLimit returns the process's RLIMIT_NOFILE soft limit (0 when it
// cannot be read). Go raises the soft limit to the hard one at start, so
// this is the operator's hard limit.
func DescriptorLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}

// ConnGuard applies ConnLimits to a server and its listener.
type ConnGuard struct {
	l    ConnLimits
	srv  *http.Server
	open atomic.Int64
	off  atomic.Bool // keep-alives switched off
	// switchMu orders the keep-alive switches (apply).
	switchMu sync.Mutex
	mu       sync.Mutex
	byAddr   map[string]int
	// Refused counts connections closed at accept for their address's cap.
	Refused atomic.Int64
	// Pressured counts the times keep-alives were switched off.
	Pressured atomic.Int64
}

// LimitConns makes srv (httpapi.NewServer's) and ln obey l: it returns the
// listener to serve on and sets srv.ConnState (chaining any hook already
// there). Zero fields of l: ConnLimitsFor(DescriptorLimit()).
func LimitConns(srv *http.Server, ln net.Listener, l ConnLimits) (net.Listener, *ConnGuard) {
	d := ConnLimitsFor(DescriptorLimit())
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxConnsPerAddr <= 0 {
		l.MaxConnsPerAddr = min(d.MaxConnsPerAddr, l.MaxConns)
	}
	if l.PressureConns <= 0 {
		l.PressureConns = max(1, l.MaxConns*3/4)
	}
	g := &ConnGuard{l: l, srv: srv, byAddr: map[string]int{}}
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateIdle && g.off.Load() {
			// Under pressure a connection going idle is closed rather than
			// kept for a next request that may never come (its response
			// may have been written before keep-alives went off).
			c.Close()
		}
		g.state(s)
		if prev != nil {
			prev(c, s)
		}
	}
	return &addrLimitListener{Listener: netutil.LimitListener(ln, l.MaxConns), g: g}, g
}

// Limits returns the limits in force.
func (g *ConnGuard) Limits() ConnLimits { return g.l }

// Open returns the connections open now (counted by srv's ConnState).
func (g *ConnGuard) Open() int { return int(g.open.Load()) }

// state counts open connections and switches keep-alives off at
// PressureConns, back on under MaxConns/2.
func (g *ConnGuard) state(s http.ConnState) {
	var n int64
	switch s {
	case http.StateNew:
		n = g.open.Add(1)
	case http.StateClosed, http.StateHijacked:
		n = g.open.Add(-1)
	default:
		return
	}
	switch {
	case n >= int64(g.l.PressureConns) && g.off.CompareAndSwap(false, true):
		g.Pressured.Add(1)
		go g.apply()
	case n < int64(g.l.MaxConns/2) && g.off.CompareAndSwap(true, false):
		go g.apply()
	}
}

// apply sets srv's keep-alives to the current state. Switching them off
// closes the idle connections (and new ones silent for 5 s), so it runs
// off the accept loop's goroutine, which runs the ConnState hook; switchMu
// keeps two switches from landing in the wrong order.
func (g *ConnGuard) apply() {
	g.switchMu.Lock()
	defer g.switchMu.Unlock()
	g.srv.SetKeepAlivesEnabled(!g.off.Load())
}

// Metrics are the guard's figures for /metrics:
//
//	screengraph_http_connections_open            gauge
//	screengraph_http_connections_max             gauge, MaxConns
//	screengraph_http_connections_refused_total   counter, closed at accept (per-address cap)
//	screengraph_http_keepalive_pressure_total    counter, times keep-alives were switched off
func (g *ConnGuard) Metrics() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "screengraph_http_connections_open",
			Help: "HTTP connections open now."}, func() float64 { return float64(g.Open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "screengraph_http_connections_max",
			Help: "Most HTTP connections open at once (from RLIMIT_NOFILE); more wait in the accept queue."}, func() float64 { return float64(g.l.MaxConns) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "screengraph_http_connections_refused_total",
			Help: "HTTP connections closed at accept: their remote address held its cap."}, func() float64 { return float64(g.Refused.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "screengraph_http_keepalive_pressure_total",
			Help: "Times keep-alives were switched off (idle connections closed) for too many open connections."}, func() float64 { return float64(g.Pressured.Load()) }),
	}
}

// addrLimitListener closes, as soon as it is accepted, a connection whose
// remote IP already holds MaxConnsPerAddr.
type addrLimitListener struct {
	net.Listener
	g *ConnGuard
}

func (l *addrLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.g.mu.Lock()
		ok := l.g.byAddr[ip] < l.g.l.MaxConnsPerAddr
		if ok {
			l.g.byAddr[ip]++
		}
		l.g.mu.Unlock()
		if !ok {
			l.g.Refused.Add(1)
			c.Close() // also frees its place under MaxConns
			continue
		}
		return &addrConn{Conn: c, release: func() { l.g.release(ip) }}, nil
	}
}

func (g *ConnGuard) release(ip string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byAddr[ip]--; g.byAddr[ip] <= 0 {
		delete(g.byAddr, ip)
	}
}

func remoteIP(c net.Conn) string {
	a := c.RemoteAddr()
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

type addrConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *addrConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
