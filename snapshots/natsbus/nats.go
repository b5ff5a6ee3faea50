package natsbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// DuplicateWindow is the stream's deduplication window: a re-publish of an
// eventId within it is acknowledged as a duplicate and not stored again. It
// must exceed the worst delay between a row's first publish and its
// MarkPublished (a relay killed between the ack and the commit of its claim,
// a store or NATS outage): measured worst 60-75 s (a 60 s NATS cluster outage
// plus the relay's backoff); 10 minutes.
const DuplicateWindow = 10 * time.Minute

// Default limits of the AGENT_EVENTS stream (the daemon's --retention and
// --stream-max-bytes): messages older than DefaultStreamMaxAge, or the
// oldest beyond DefaultStreamMaxBytes, are discarded (DiscardOld). The store
// stays the source of truth; the stream is a window on it.
const (
	DefaultStreamMaxAge   = 720 * time.Hour
	DefaultStreamMaxBytes = int64(512) << 20 // 512 MiB: half the embedded server's JetStream store (EmbeddedOptions.MaxStore)
)

// StreamConfig is the AGENT_EVENTS stream for a single server (the embedded
// one): StreamConfigFor(1).
func StreamConfig() jetstream.StreamConfig { return StreamConfigFor(1) }

// StreamConfigFor is the AGENT_EVENTS stream with replicas copies: subjects
// agent.events.>, file storage, limits retention, the 10-minute duplicate
// window. With replicas 3 on a 3-node cluster a publish is acknowledged once
// a majority (2 of 3) stored it in the stream's raft log, so it survives the
// loss of any one node; whether it also survives a power loss depends on the
// servers' fsync (`jetstream { sync_interval: always }`, nats-server 2.10+;
// see docs/decisions.md). replicas < 1 counts as 1. Its limits are the
// defaults (DefaultStreamMaxAge, DefaultStreamMaxBytes); see
// StreamConfigLimited.
func StreamConfigFor(replicas int) jetstream.StreamConfig {
	return StreamConfigLimited(replicas, DefaultStreamMaxAge, DefaultStreamMaxBytes)
}

// StreamConfigLimited is StreamConfigFor with messages kept at most maxAge
// (<= 0: no age limit) and the stream at most maxBytes bytes (<= 0: no size
// limit), the oldest messages discarded first. A maxAge shorter than the
// duplicate window shortens the window to it (JetStream refuses a window
// longer than MaxAge).
func StreamConfigLimited(replicas int, maxAge time.Duration, maxBytes int64) jetstream.StreamConfig {
	dup := DuplicateWindow
	if maxAge <= 0 {
		maxAge = 0
	} else if maxAge < dup {
		dup = maxAge
	}
	if maxBytes <= 0 {
		maxBytes = -1
	}
	return jetstream.StreamConfig{
		MaxAge:      maxAge,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardOld,
		Name:        snapshots.StreamName,
		Description: "ScreenGraph run events, published by the agent's outbox relay",
		Subjects:    []string{snapshots.SubjectPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  dup,
		Replicas:    max(replicas, 1),
	}
}

// EnsureStream creates the stream or updates it to cfg.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("snapshots: ensure stream %s: %w", cfg.Name, err)
	}
	return st, nil
}

// JetStreamPublisher publishes outbox rows to JetStream with the eventId as
// Nats-Msg-Id and waits for the stream's ack. A duplicate ack (the eventId was
// stored before, inside the window) counts as success.
type JetStreamPublisher struct {
	js         jetstream.JetStream
	duplicates atomic.Int64
	ordered    orderedState // PublishOrdered's window state (nats_ordered.go)
	chain      chainState   // SendChain's chain (nats_chain.go)
	tail       struct {     // LastSequence's stream handle (ordered.go)
		sync.Mutex
		st jetstream.Stream
	}
}

var _ agent.Publisher = (*JetStreamPublisher)(nil)

// PublisherOption configures NewJetStreamPublisher.
type PublisherOption func(*publisherOptions)

type publisherOptions struct {
	replicas int
	maxAge   time.Duration
	maxBytes int64
}

// WithStreamLimits sets the AGENT_EVENTS stream's MaxAge and MaxBytes (see
// StreamConfigLimited; default DefaultStreamMaxAge and
// DefaultStreamMaxBytes). An existing stream is updated to them.
func WithStreamLimits(maxAge time.Duration, maxBytes int64) PublisherOption {
	return func(o *publisherOptions) { o.maxAge, o.maxBytes = maxAge, maxBytes }
}

// WithReplicas sets the AGENT_EVENTS stream's replicas (default 1, the
// embedded server; 3 on a 3-node cluster, the daemon's --nats-replicas). An
// existing stream is updated to it (JetStream scales a stream's replicas up
// and down in place).
func WithReplicas(n int) PublisherOption { return func(o *publisherOptions) { o.replicas = n } }

// NewJetStreamPublisher ensures the AGENT_EVENTS stream on nc's server
// (StreamConfigFor the WithReplicas option, default 1) and returns a
// publisher over it.
func NewJetStreamPublisher(ctx context.Context, nc *nats.Conn, opts ...PublisherOption) (*JetStreamPublisher, error) {
	o := publisherOptions{replicas: 1, maxAge: DefaultStreamMaxAge, maxBytes: DefaultStreamMaxBytes}
	for _, opt := range opts {
		opt(&o)
	}
	js, err := newPublisherJetStream(nc)
	if err != nil {
		return nil, err
	}
	if _, err := EnsureStream(ctx, js, StreamConfigLimited(o.replicas, o.maxAge, o.maxBytes)); err != nil {
		return nil, err
	}
	return &JetStreamPublisher{js: js}, nil
}

// newPublisherJetStream is the JetStream context of a publisher: its async
// publishes (PublishOrdered) give up on an ack after 10 s, so a lost message
// never holds a slot of nats.go's 4,000 outstanding acks.
func newPublisherJetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	return jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
}

// JetStream is the underlying context (consumers in tests and tools).
func (p *JetStreamPublisher) JetStream() jetstream.JetStream { return p.js }

// Publish sends body on subject with header Nats-Msg-Id: msgID and returns
// once the stream acknowledged it; ctx bounds the wait.
func (p *JetStreamPublisher) Publish(ctx context.Context, subject, msgID string, body []byte) error {
	ack, err := p.js.Publish(ctx, subject, body, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(snapshots.StreamName))
	if err == nil {
		err = provenStored(ack)
	}
	if err != nil {
		return fmt.Errorf("snapshots: publish %s (%s): %w", subject, msgID, err)
	}
	if ack.Duplicate {
		p.duplicates.Add(1)
	}
	return nil
}

// errUnstoredDuplicate: a duplicate ack without a stream sequence. A
// clustered server answers so for an eventId it saw proposed but has not
// stored (yet, or ever: the proposal may be lost in a leader change), so it
// is no proof of storage; the relay publishes the row again later.
var errUnstoredDuplicate = errors.New("duplicate of a message the stream has not stored (no stream sequence)")

// provenStored: ack shows its message is in the stream (stored now, or a
// duplicate of a stored one).
func provenStored(ack *jetstream.PubAck) error {
	if ack.Duplicate && ack.Sequence == 0 {
		return errUnstoredDuplicate
	}
	return nil
}

// Duplicates counts acks the stream flagged as duplicates (re-publishes it
// deduplicated by Nats-Msg-Id).
func (p *JetStreamPublisher) Duplicates() int64 { return p.duplicates.Load() }

// EmbeddedOptions configure StartEmbeddedWith.
type EmbeddedOptions struct {
	// Dir holds JetStream's file store (required).
	Dir string
	// Host and Port to listen on; default 127.0.0.1 and a random free port.
	// A fixed Port lets a restarted server take its clients back.
	Host string
	Port int
	// MaxMemory and MaxStore cap JetStream (the server's default is 75% of RAM
	// and of the disk); default 64 MiB and 1 GiB.
	MaxMemory, MaxStore int64
	// Auth, when set, authenticates every client (e.g. *TokenAuthenticator:
	// tenant tokens, natsauth.go); nil lets every client in.
	Auth server.Authentication
	// MaxConns caps the client connections (the server refuses the next
	// with "maximum connections exceeded"): they hold the daemon's own
	// file descriptors. 0: the server's default (64K).
	MaxConns int
}

// StartEmbedded starts an in-process NATS server with JetStream storing
// under dir, listening on 127.0.0.1 at a random port, and returns it with its
// client URL (nats://127.0.0.1:PORT). Shut it down with s.Shutdown().
func StartEmbedded(dir string) (*server.Server, string, error) {
	return StartEmbeddedWith(EmbeddedOptions{Dir: dir})
}

// StartEmbeddedWith is StartEmbedded with options.
func StartEmbeddedWith(o EmbeddedOptions) (*server.Server, string, error) {
	if o.Dir == "" {
		return nil, "", errors.New("snapshots: embedded NATS needs a store dir")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = server.RANDOM_PORT
	}
	if o.MaxMemory == 0 {
		o.MaxMemory = 64 << 20
	}
	if o.MaxStore == 0 {
		o.MaxStore = 1 << 30
	}
	s, err := server.NewServer(&server.Options{
		ServerName:                 "screengraph-agent",
		Host:                       o.Host,
		Port:                       o.Port,
		JetStream:                  true,
		StoreDir:                   o.Dir,
		JetStreamMaxMemory:         o.MaxMemory,
		JetStreamMaxStore:          o.MaxStore,
		NoSigs:                     true, // the daemon owns the process's signals
		NoLog:                      true,
		CustomClientAuthentication: o.Auth,
		MaxConn:                    o.MaxConns,
	})
	if err != nil {
		return nil, "", fmt.Errorf("snapshots: embedded NATS: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, "", errors.New("snapshots: embedded NATS not ready after 10s")
	}
	return s, s.ClientURL(), nil
}

// Connect connects to url and keeps reconnecting forever (the relay
// retries its publishes meanwhile).
func Connect(url string, opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.Name("screengraph-agent relay"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	return nats.Connect(url, append(base, opts...)...)
}

// MaxPayload is the NATS server's max_payload in bytes (the largest message,
// headers included, it accepts; default 1 MiB), or 0 while not connected.
func (p *JetStreamPublisher) MaxPayload() int64 { return p.js.Conn().MaxPayload() }
