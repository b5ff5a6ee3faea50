package android

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"syscall"
)

// inDeviceNet is the device's loopback TCP: servers inside the device (the
// UiAutomator2 server on 6790) listen on a port, and the transport's tcp:PORT
// service dials it. Connections are in-memory pipes. It has its own lock, so it
// may be used with or without d.mu held.
type inDeviceNet struct {
	mu        sync.Mutex
	listeners map[int]*pipeListener
	conns     map[int]int // port -> established connections
}

func newInDeviceNet() *inDeviceNet {
	return &inDeviceNet{listeners: map[int]*pipeListener{}, conns: map[int]int{}}
}

// ErrConnRefused is what dialing a port nobody listens on returns (wraps
// syscall.ECONNREFUSED, as adbd's tcp: service sees it).
var ErrConnRefused = fmt.Errorf("connection refused: %w", syscall.ECONNREFUSED)

// Listen opens an in-device TCP listener on 127.0.0.1:port (1..65535). An
// http.Server can Serve on it. Errors: the port is out of range or already in
// use (wraps syscall.EADDRINUSE).
func (d *Device) Listen(port int) (net.Listener, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("listen tcp 127.0.0.1:%d: invalid port", port)
	}
	n := d.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.listeners[port]; ok {
		return nil, fmt.Errorf("listen tcp 127.0.0.1:%d: %w", port, syscall.EADDRINUSE)
	}
	l := &pipeListener{n: n, port: port, accept: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[port] = l
	return l, nil
}

// DialTCP connects to an in-device listener, as adbd's tcp:PORT service does.
// Errors: ErrConnRefused when nothing listens, ctx's error when it ends first.
func (d *Device) DialTCP(ctx context.Context, port int) (net.Conn, error) {
	n := d.net
	n.mu.Lock()
	l, ok := n.listeners[port]
	n.mu.Unlock()
	if !ok {
		return nil, ErrConnRefused
	}
	client, server := net.Pipe()
	cc := &countedConn{Conn: client, n: n, port: port}
	sc := &pipeConn{Conn: server, local: tcpAddr(port), remote: tcpAddr(40000 + port%20000)}
	select {
	case l.accept <- sc:
		n.mu.Lock()
		n.conns[port]++
		n.mu.Unlock()
		return cc, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, ErrConnRefused
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// tcpListeners returns the listening ports, sorted (for /proc/net/tcp).
func (d *Device) tcpListeners() []int {
	n := d.net
	n.mu.Lock()
	defer n.mu.Unlock()
	ports := make([]int, 0, len(n.listeners))
	for p := range n.listeners {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	return ports
}

// tcpConnections returns how many dialed connections to each port are open.
func (d *Device) tcpConnections() map[int]int {
	n := d.net
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[int]int, len(n.conns))
	for p, c := range n.conns {
		if c > 0 {
			out[p] = c
		}
	}
	return out
}

func tcpAddr(port int) *net.TCPAddr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port} }

type pipeListener struct {
	n      *inDeviceNet
	port   int
	accept chan net.Conn
	done   chan struct{}
	once   sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	err := errors.New("already closed")
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.listeners[l.port] == l {
			delete(l.n.listeners, l.port)
		}
		l.n.mu.Unlock()
		err = nil
	})
	if err != nil {
		return net.ErrClosed
	}
	return nil
}

func (l *pipeListener) Addr() net.Addr { return tcpAddr(l.port) }

type pipeConn struct {
	net.Conn
	local, remote net.Addr
}

func (c *pipeConn) LocalAddr() net.Addr  { return c.local }
func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }

type countedConn struct {
	net.Conn
	n    *inDeviceNet
	port int
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.n.mu.Lock()
		c.n.conns[c.port]--
		c.n.mu.Unlock()
	})
	return c.Conn.Close()
}

func (c *countedConn) LocalAddr() net.Addr  { return tcpAddr(40000 + c.port%20000) }
func (c *countedConn) RemoteAddr() net.Addr { return tcpAddr(c.port) }
