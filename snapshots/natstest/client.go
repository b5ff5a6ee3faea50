package natstest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Client is a test's NATS connection that records the server's
// asynchronous errors (permissions violations), for tests of what a
// tenant's credentials may publish and subscribe to.
type Client struct {
	Conn *nats.Conn
	mu   sync.Mutex
	errs []string
}

// Dial connects to url with opts (credentials, inbox prefix), without
// reconnecting; the connection is closed when the test ends. Errors: the
// connection's (an authorization refusal, a server that is not there).
func Dial(t testing.TB, url string, opts ...nats.Option) (*Client, error) {
	t.Helper()
	c := &Client{}
	opts = append(opts, nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		c.mu.Lock()
		c.errs = append(c.errs, err.Error())
		c.mu.Unlock()
	}))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	c.Conn = nc
	t.Cleanup(nc.Close)
	return c, nil
}

// Refused reports whether the server sent a permissions violation whose
// text holds what (a subject, quoted as the server quotes it: `"a.b"`),
// polling for up to 2 s after a flush.
func (c *Client) Refused(what string) bool {
	c.Conn.Flush()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		c.mu.Lock()
		for _, e := range c.errs {
			if strings.Contains(strings.ToLower(e), "permissions violation") && strings.Contains(e, what) {
				c.mu.Unlock()
				return true
			}
		}
		c.mu.Unlock()
	}
	return false
}
