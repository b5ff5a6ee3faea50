package natsbus

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/screengraph/screengraph-agent/agent"
)

// BusConfig is where a daemon publishes its events: an external NATS
// server or cluster (URL), or an in-process server storing under Dir.
type BusConfig struct {
	// URL is an external NATS server or cluster (comma-separated URLs);
	// "" starts an in-process server.
	URL string
	// Listen is the in-process server's host:port ("": 127.0.0.1 and a
	// random port); Dir keeps its JetStream files (required without URL).
	Listen, Dir string
	// Tokens, when set, makes the in-process server authenticate its
	// clients against the store's API tokens (TokenAuth); TokenLog reports
	// the connections it refuses (may be nil).
	Tokens   agent.Store
	TokenLog func(format string, args ...any)
	// MaxConns caps the in-process server's client connections
	// (EmbeddedOptions.MaxConns; 0: the server's default).
	MaxConns int
	// Replicas of the AGENT_EVENTS stream on an external cluster (0: 1);
	// MaxAge and MaxBytes its limits (0: DefaultStreamMaxAge,
	// DefaultStreamMaxBytes).
	Replicas int
	MaxAge   time.Duration
	MaxBytes int64
	// NotReady reports an external JetStream that does not answer within
	// 5 s of the start (may be nil): the daemon starts anyway, its events
	// wait in the outbox until the cluster answers.
	NotReady func(err error)
}

// Bus is a daemon's NATS side: the in-process server (nil with an external
// URL), the daemon's connection and its event publisher.
type Bus struct {
	Server    *server.Server
	Conn      *nats.Conn
	Publisher agent.Publisher
	// ClientURL is where events are published (nats://host:port; may hold
	// credentials: log it through agent.RedactString).
	ClientURL string
}

// OpenBus starts or reaches the NATS of cfg. An in-process server must
// start and its JetStream answer; an external one may be down (the
// connection keeps retrying and the publisher creates the stream once it
// answers). Errors (an *agent.Error, URLs redacted): invalid_request_error
// for a malformed Listen, process_error when the in-process server does not
// start, network_error when NATS or JetStream cannot be reached; what was
// started is stopped then.
func OpenBus(ctx context.Context, cfg BusConfig) (b *Bus, err error) {
	b = &Bus{}
	defer func() {
		if err != nil {
			b.Close()
			b = nil
		}
	}()
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultStreamMaxAge
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultStreamMaxBytes
	}
	if cfg.URL != "" {
		return b, b.openExternal(ctx, cfg)
	}
	return b, b.openInProcess(ctx, cfg)
}

// openExternal connects b to the external NATS of cfg.URL (retrying in the
// background while it is down) with a publisher that ensures the stream
// once JetStream answers.
func (b *Bus) openExternal(ctx context.Context, cfg BusConfig) (err error) {
	b.ClientURL = cfg.URL
	if b.Conn, err = Connect(b.ClientURL, nats.RetryOnFailedConnect(true)); err != nil {
		return agent.Wrap(agent.ErrNetwork, err, "NATS %s", agent.RedactString(b.ClientURL))
	}
	lp := NewLazyPublisher(b.Conn, StreamConfigLimited(max(cfg.Replicas, 1), cfg.MaxAge, cfg.MaxBytes))
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := lp.Ready(rctx); err != nil && cfg.NotReady != nil {
		cfg.NotReady(err)
	}
	b.Publisher = lp
	return nil
}

// openInProcess starts b's in-process server (its JetStream files in
// cfg.Dir, so events published survive a restart; the outbox holds the
// unpublished ones), connects to it and ensures the stream.
func (b *Bus) openInProcess(ctx context.Context, cfg BusConfig) (err error) {
	o := EmbeddedOptions{Dir: cfg.Dir, MaxConns: cfg.MaxConns}
	if cfg.Listen != "" {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return agent.Wrap(agent.ErrInvalidRequest, err, "--nats-listen %q", cfg.Listen)
		}
		o.Host = host
		if o.Port, err = strconv.Atoi(port); err != nil {
			return agent.Wrap(agent.ErrInvalidRequest, err, "--nats-listen %q", cfg.Listen)
		}
	}
	var own []nats.Option // the daemon's own credentials (tenancy)
	if cfg.Tokens != nil {
		if o.Auth, own, err = TokenAuth(cfg.Tokens, cfg.TokenLog); err != nil {
			return err
		}
	}
	if b.Server, b.ClientURL, err = StartEmbeddedWith(o); err != nil {
		return agent.Wrap(agent.ErrProcess, err, "embedded NATS on %s", cfg.Listen)
	}
	// The daemon's own connection to its own server is in-process (a
	// pipe, not loopback TCP): the relay's publishes and acks then cost no
	// socket syscalls on either side, the client's nor the server's.
	// Other programs still connect over ClientURL.
	if b.Conn, err = Connect(b.ClientURL, append(own, nats.InProcessServer(b.Server))...); err != nil {
		return agent.Wrap(agent.ErrNetwork, err, "NATS %s", agent.RedactString(b.ClientURL))
	}
	if b.Publisher, err = NewJetStreamPublisher(ctx, b.Conn, WithStreamLimits(cfg.MaxAge, cfg.MaxBytes)); err != nil {
		return agent.Wrap(agent.ErrNetwork, err, "NATS JetStream")
	}
	return nil
}

// Ready is the daemon's readiness check of NATS (GET /readyz): connected,
// and the server answers a flush within ctx (which needs a deadline). The error names the URL
// redacted.
func (b *Bus) Ready(ctx context.Context) error {
	if !b.Conn.IsConnected() {
		return errors.New("not connected to " + agent.RedactString(b.ClientURL))
	}
	return b.Conn.FlushWithContext(ctx)
}

// Close closes the connection, then stops the in-process server. Safe on a
// nil or partly opened Bus; stop the relay first (it publishes through it).
func (b *Bus) Close() {
	if b == nil {
		return
	}
	if b.Conn != nil {
		b.Conn.Close()
	}
	if b.Server != nil {
		b.Server.Shutdown()
		b.Server.WaitForShutdown()
	}
}
