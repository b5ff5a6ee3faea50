package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/nodes"
)

// LocalStore is what the in-process API reads: the run rows, events,
// snapshots and leases of a store this process opened, and its Close.
type LocalStore interface {
	agent.Store
	agent.Leases
	Close() error
}

// localHost is the Host header of the in-process API (an --allowed-host
// name: the in-memory connection has no TCP address to compare with).
const localHost = "local-store"

// ServeLocal serves the daemon's HTTP API over st in this process, for the
// CLI's client commands on a data dir no daemon serves: each command is
// written once, against the returned client, and reads the store as the
// daemon would (its routes, shapes, errors and redaction). Nothing is
// scheduled or resumed: the run service is built but never started, so no
// run moves and no lease is taken. The API is reached over an in-memory
// listener (no port, no socket); every caller is admin, as the owner of the
// data dir is (the API without tokens). stop ends the server and closes st.
func ServeLocal(st LocalStore) (cl *client.Client, stop func(), err error) {
	// The chain's structure only (no device is driven): the error report
	// lists its nodes in order.
	g, err := nodes.NewSetupGraph(nodes.SetupDeps{})
	if err != nil {
		return nil, nil, err
	}
	svc, err := service.New(service.Config{Store: st, Leases: st, Prepare: nodes.SetupPreparer{}, NewID: newID,
		Holder: "cli:" + strconv.Itoa(os.Getpid())})
	if err != nil {
		return nil, nil, err
	}
	cfg := httpapi.Config{Service: svc, Graph: g, AllowedHosts: []string{localHost}}
	if ts, ok := st.(agent.Tokens); ok {
		// The token commands: the store's tokens, made, listed and revoked
		// through the API as through a daemon's (no token needed here).
		cfg.TokenAdmin = TokenAdmin(ts)
	}
	api := httpapi.New(cfg)
	ln := newMemListener()
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	hc := &http.Client{Transport: &http.Transport{DialContext: ln.dial, DisableCompression: true}}
	stop = func() {
		// Streams (runs events --follow) end with their command's ctx;
		// Close ends what is left at once.
		srv.Close()
		<-done
		hc.CloseIdleConnections()
		st.Close()
	}
	return client.New("http://"+localHost, "", hc), stop, nil
}

// memListener is a net.Listener of in-memory connections (net.Pipe): dial
// hands the server one end and returns the other.
type memListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

func (l *memListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	server, c := net.Pipe()
	select {
	case l.conns <- server:
		return c, nil
	case <-l.closed:
		return nil, errors.New("in-process API closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type memAddr struct{}

func (memAddr) Network() string { return "memory" }
func (memAddr) String() string  { return localHost }
