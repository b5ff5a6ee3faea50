package natsbus

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// LazyPublisher is a JetStreamPublisher made on first use: a daemon may
// start while its NATS cluster is down (runs go on, commits wait in the
// outbox), and the stream is ensured with cfg once NATS answers. Until then
// Publish fails and the relay backs off and retries.
type LazyPublisher struct {
	nc  *nats.Conn
	cfg jetstream.StreamConfig

	mu  sync.Mutex
	pub *JetStreamPublisher
}

var (
	_ agent.Publisher            = (*LazyPublisher)(nil)
	_ snapshots.OrderedPublisher = (*LazyPublisher)(nil)
)

// NewLazyPublisher returns a publisher over nc that ensures the stream cfg
// (e.g. StreamConfig() with Replicas 3) at its first successful Publish.
func NewLazyPublisher(nc *nats.Conn, cfg jetstream.StreamConfig) *LazyPublisher {
	return &LazyPublisher{nc: nc, cfg: cfg}
}

// Ready ensures the stream now; an error means NATS (or its JetStream) does
// not answer yet.
func (p *LazyPublisher) Ready(ctx context.Context) error {
	_, err := p.get(ctx)
	return err
}

func (p *LazyPublisher) get(ctx context.Context) (*JetStreamPublisher, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pub != nil {
		return p.pub, nil
	}
	js, err := newPublisherJetStream(p.nc)
	if err != nil {
		return nil, err
	}
	if _, err := EnsureStream(ctx, js, p.cfg); err != nil {
		return nil, err
	}
	p.pub = &JetStreamPublisher{js: js}
	return p.pub, nil
}

// Publish implements agent.Publisher (see JetStreamPublisher.Publish).
func (p *LazyPublisher) Publish(ctx context.Context, subject, msgID string, body []byte) error {
	pub, err := p.get(ctx)
	if err != nil {
		return err
	}
	return pub.Publish(ctx, subject, msgID, body)
}

// PublishOrdered implements OrderedPublisher (see
// JetStreamPublisher.PublishOrdered): the relay pipelines its claims.
func (p *LazyPublisher) PublishOrdered(ctx context.Context, rows []agent.OutboxRow) ([]bool, error) {
	pub, err := p.get(ctx)
	if err != nil {
		return make([]bool, len(rows)), err
	}
	return pub.PublishOrdered(ctx, rows)
}

// MaxPayload: see JetStreamPublisher.MaxPayload.
func (p *LazyPublisher) MaxPayload() int64 { return p.nc.MaxPayload() }
