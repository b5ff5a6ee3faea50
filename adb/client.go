package adb

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
)

// DefaultAddr is the adb server's default host:port.
const DefaultAddr = "127.0.0.1:5037"

// Client talks to one adb server over its host protocol (TCP). Every call opens its
// own connection (the server serves one request per connection), so a Client is
// safe for concurrent use. The zero value uses Addr() defaults.
type Client struct {
	// Addr is host:port of the adb server; empty means DefaultAddr, or
	// 127.0.0.1:$ANDROID_ADB_SERVER_PORT when that variable is set.
	Addr string
	// DialTimeout bounds the TCP connect when the context has no earlier deadline
	// (default 5 s).
	DialTimeout time.Duration

	// features caches host-serial:S:features per serial+transport so that shell
	// and install pick shell_v2 / cmd without an extra round trip per call.
	mu       sync.Mutex
	features map[string]parse.Features
	// transports is the transport id each serial's last service was
	// opened on (LastTransportID); under mu.
	transports map[string]int64
	// noTport: the server refused host:tport: (adb < 1.0.41).
	noTport atomic.Bool
}

// New returns a Client for the adb server at addr ("" = default, see Client.Addr).
func New(addr string) *Client { return &Client{Addr: addr} }

func (c *Client) addr() string {
	if c.Addr != "" {
		return c.Addr
	}
	if p := os.Getenv("ANDROID_ADB_SERVER_PORT"); p != "" {
		return net.JoinHostPort("127.0.0.1", p)
	}
	return DefaultAddr
}

// hostQuery sends req and returns the length-prefixed string that follows OKAY.
func (c *Client) hostQuery(ctx context.Context, op, req string) (string, error) {
	cn, err := c.dial(ctx, op)
	if err != nil {
		return "", err
	}
	defer cn.Close()
	if err := cn.request(req); err != nil {
		return "", err
	}
	return cn.readString()
}

// hostCommand sends req and only checks OKAY/FAIL.
func (c *Client) hostCommand(ctx context.Context, op, req string) error {
	cn, err := c.dial(ctx, op)
	if err != nil {
		return err
	}
	defer cn.Close()
	return cn.request(req)
}

// ServerVersion returns the adb server's internal version (host:version; 41 for
// adb 1.0.41).
func (c *Client) ServerVersion(ctx context.Context) (int, error) {
	s, err := c.hostQuery(ctx, "version", "host:version")
	if err != nil {
		return 0, err
	}
	v, perr := strconv.ParseInt(s, 16, 32)
	if perr != nil {
		return 0, protocolError("version", "bad version %q", s)
	}
	return int(v), nil
}

// Devices lists every device the server knows, in every state (host:devices-l).
func (c *Client) Devices(ctx context.Context) ([]parse.DeviceInfo, error) {
	s, err := c.hostQuery(ctx, "devices", "host:devices-l")
	if err != nil {
		return nil, err
	}
	return parse.ParseDevicesLong(s), nil
}

// GetState returns the state of one device (host-serial:S:get-state). adb 1.0.41
// answers FAIL "device offline" for an offline device and FAIL "device 'S' not
// found" for an unknown one; both come back as *Error (device_offline,
// device_not_found), never as a state.
func (c *Client) GetState(ctx context.Context, serial string) (parse.DeviceState, error) {
	s, err := c.hostQuery(ctx, "get-state", "host-serial:"+serial+":get-state")
	if err != nil {
		return parse.StateUnknown, err
	}
	return parse.DeviceState(strings.TrimSpace(s)), nil
}

// Features returns the device's adb features (host-serial:S:features), e.g.
// shell_v2, cmd, stat_v2.
func (c *Client) Features(ctx context.Context, serial string) (parse.Features, error) {
	s, err := c.hostQuery(ctx, "features", "host-serial:"+serial+":features")
	if err != nil {
		return nil, err
	}
	f := parse.ParseFeatures(s)
	c.mu.Lock()
	if c.features == nil {
		c.features = map[string]parse.Features{}
	}
	c.features[serial] = f
	c.mu.Unlock()
	return f, nil
}

// cachedFeatures returns the features of serial, asking the server once.
func (c *Client) cachedFeatures(ctx context.Context, serial string) (parse.Features, error) {
	c.mu.Lock()
	f, ok := c.features[serial]
	c.mu.Unlock()
	if ok {
		return f, nil
	}
	return c.Features(ctx, serial)
}

// forgetFeatures drops the cache entry: a device that went away may come back as a
// different image under the same serial.
func (c *Client) forgetFeatures(serial string) {
	c.mu.Lock()
	delete(c.features, serial)
	c.mu.Unlock()
}

// Connect asks the server to connect to a device over TCP (host:connect:HOST:PORT)
// and returns the server's message ("connected to …", "already connected to …").
// "failed to connect …" and "cannot connect …" come back as network_error.
func (c *Client) Connect(ctx context.Context, hostport string) (string, error) {
	s, err := c.hostQuery(ctx, "connect", "host:connect:"+hostport)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(s, "connected to") || strings.HasPrefix(s, "already connected to") {
		return s, nil
	}
	return s, &Error{ID: IDNetworkError, Retryable: true, Msg: "connect: " + s}
}

// Disconnect removes a TCP device (host:disconnect:HOST:PORT); "" disconnects all.
func (c *Client) Disconnect(ctx context.Context, hostport string) error {
	_, err := c.hostQuery(ctx, "disconnect", "host:disconnect:"+hostport)
	return err
}

// ReconnectOffline asks the server to kick every offline device so that it
// reconnects (host:reconnect-offline, what `adb reconnect offline` sends;
// supported by adb 1.0.41, measured). Prefer it to a server restart, which breaks
// every other session on the host.
func (c *Client) ReconnectOffline(ctx context.Context) error {
	_, err := c.hostQuery(ctx, "reconnect-offline", "host:reconnect-offline")
	return err
}

// Forward is one `adb forward` rule.
type Forward struct {
	Serial string
	Local  string // e.g. "tcp:8200"
	Remote string // e.g. "tcp:6790"
}

// Forward creates (or rebinds) a forward rule (host-serial:S:forward:LOCAL;REMOTE).
// local and remote are socket specs such as "tcp:8200", "tcp:6790"; local "tcp:0"
// lets the server pick a port. It returns the local spec actually bound.
func (c *Client) Forward(ctx context.Context, serial, local, remote string) (string, error) {
	cn, err := c.dial(ctx, "forward")
	if err != nil {
		return "", err
	}
	defer cn.Close()
	// The server answers OKAY for the host request, then OKAY/FAIL for the forward
	// itself, then (1.0.41) the bound port as a length-prefixed string.
	if err := cn.request("host-serial:" + serial + ":forward:" + local + ";" + remote); err != nil {
		return "", c.explainEmptyFail(ctx, serial, err)
	}
	if err := cn.status(); err != nil {
		return "", err
	}
	port, err := cn.readString()
	if err != nil || port == "" {
		// Older servers send nothing more; the rule is in place all the same.
		return local, nil
	}
	return "tcp:" + strings.TrimSpace(port), nil
}

// explainEmptyFail: adb 1.0.41 answers a forward/killforward for an unknown
// serial with "FAIL0000" (empty message, measured); ask get-state for the reason.
func (c *Client) explainEmptyFail(ctx context.Context, serial string, err error) error {
	var e *Error
	if !errors.As(err, &e) || e.ID != IDProcessError || !strings.HasSuffix(e.Msg, ": ") {
		return err
	}
	if _, serr := c.GetState(ctx, serial); serr != nil {
		return serr
	}
	return err
}

// ForwardList lists every forward rule of the server (host:list-forward).
func (c *Client) ForwardList(ctx context.Context) ([]Forward, error) {
	s, err := c.hostQuery(ctx, "list-forward", "host:list-forward")
	if err != nil {
		return nil, err
	}
	var out []Forward
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 {
			out = append(out, Forward{Serial: f[0], Local: f[1], Remote: f[2]})
		}
	}
	return out, nil
}

// ForwardRemove removes the rule bound to local (host-serial:S:killforward:LOCAL).
func (c *Client) ForwardRemove(ctx context.Context, serial, local string) error {
	cn, err := c.dial(ctx, "killforward")
	if err != nil {
		return err
	}
	defer cn.Close()
	if err := cn.request("host-serial:" + serial + ":killforward:" + local); err != nil {
		return c.explainEmptyFail(ctx, serial, err)
	}
	return cn.status()
}

// ForwardRemoveAll removes every forward rule of the server (host:killforward-all).
func (c *Client) ForwardRemoveAll(ctx context.Context) error {
	cn, err := c.dial(ctx, "killforward-all")
	if err != nil {
		return err
	}
	defer cn.Close()
	if err := cn.request("host:killforward-all"); err != nil {
		return err
	}
	return cn.status()
}

// transport opens a connection switched to the device serial, ready for
// one device service: host:tport:serial:S (adb >= 1.0.41), whose OKAY is
// followed by the transport's id (8 bytes, little-endian; adb.cpp
// handle_host_request), kept in the conn; an older server, which refuses
// tport as an unknown host service, gets host:transport:S (id 0).
func (c *Client) transport(ctx context.Context, op, serial string) (*conn, error) {
	cn, err := c.dial(ctx, op)
	if err != nil {
		return nil, err
	}
	if !c.noTport.Load() {
		err = cn.request("host:tport:serial:" + serial)
		if err == nil {
			err = cn.readTransportID()
		}
		if err == nil {
			c.noteTransport(serial, cn.transportID)
		} else if strings.Contains(err.Error(), "unknown host service") {
			c.noTport.Store(true)
			cn.Close()
			return c.transport(ctx, op, serial)
		}
	} else {
		err = cn.request("host:transport:" + serial)
	}
	if err != nil {
		cn.Close()
		if IDOf(err) == IDDeviceNotFound || IDOf(err) == IDDeviceOffline {
			c.forgetFeatures(serial)
		}
		return nil, err
	}
	return cn, nil
}

func (c *Client) noteTransport(serial string, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.transports == nil {
		c.transports = map[string]int64{}
	}
	c.transports[serial] = id
}

// LastTransportID is the adb transport id (host:tport:) the last service
// opened on serial through c ran on, without a round trip; 0 when none
// was opened or the server does not say (adb < 1.0.41). A device that
// reconnected or rebooted since is on a new one, which the next service
// opened on it shows.
func (c *Client) LastTransportID(serial string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.transports[serial]
}

type openedKey struct{}

// WithOpened returns ctx carrying fn, which Shell calls once the device
// accepted the command's stream (the server's OKAY follows the device's:
// adbd has started the shell), before it reads any output.
func WithOpened(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, openedKey{}, fn)
}

// openService opens service (e.g. "shell,v2,raw:ls", "sync:", "exec:…", "tcp:6790")
// on the device and returns the raw byte stream after OKAY.
func (c *Client) openService(ctx context.Context, op, serial, service string) (*conn, error) {
	cn, err := c.transport(ctx, op, serial)
	if err != nil {
		return nil, err
	}
	if err := cn.request(service); err != nil {
		cn.Close()
		return nil, err
	}
	if fn, ok := ctx.Value(openedKey{}).(func()); ok {
		fn()
	}
	return cn, nil
}

// OpenTCP opens a byte pipe to TCP port on the device (service tcp:PORT, what
// `adb forward` uses underneath). Closing the returned conn ends the pipe; the
// context bounds the whole life of the pipe.
func (c *Client) OpenTCP(ctx context.Context, serial string, port int) (net.Conn, error) {
	cn, err := c.openService(ctx, "tcp", serial, "tcp:"+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	return &serviceConn{conn: cn}, nil
}

// serviceConn adapts conn to net.Conn, reading through its buffer.
type serviceConn struct{ *conn }

func (s *serviceConn) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *serviceConn) Write(p []byte) (int, error) { return s.nc.Write(p) }
func (s *serviceConn) LocalAddr() net.Addr         { return s.nc.LocalAddr() }
func (s *serviceConn) RemoteAddr() net.Addr        { return s.nc.RemoteAddr() }
func (s *serviceConn) SetDeadline(t time.Time) error {
	return s.nc.SetDeadline(t)
}
func (s *serviceConn) SetReadDeadline(t time.Time) error  { return s.nc.SetReadDeadline(t) }
func (s *serviceConn) SetWriteDeadline(t time.Time) error { return s.nc.SetWriteDeadline(t) }
