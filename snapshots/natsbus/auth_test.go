package natsbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/natstest"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// natsClient is a tenant's connection (natstest.Client) under the name
// these tests use.
type natsClient struct {
	*natstest.Client
	nc *nats.Conn
}

func (c *natsClient) violated(t *testing.T, what string) bool {
	t.Helper()
	return c.Refused(what)
}

func connectAs(t *testing.T, url string, opts ...nats.Option) (*natsClient, error) {
	c, err := natstest.Dial(t, url, opts...)
	if err != nil {
		return nil, err
	}
	return &natsClient{Client: c, nc: c.Conn}, nil
}

type natsAuthEnv struct {
	url    string
	store  *sqlite.Store
	daemon *nats.Conn
	js     jetstream.JetStream
	tokens map[string]string
	ids    map[string]string
}

// newNATSAuthEnv starts the embedded NATS server authenticating against an
// embedded store; with tokens, creates tokens for acme, beta, an admin and a
// revoked acme one, and publishes two events of run r1 (acme) and r2 (beta)
// through the daemon's connection.
func newNATSAuthEnv(t *testing.T, tokens bool) *natsAuthEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &natsAuthEnv{store: st, tokens: map[string]string{}, ids: map[string]string{}}
	if tokens {
		for _, k := range []struct {
			name, tenant string
			admin        bool
		}{{"acme", "acme", false}, {"beta", "beta", false}, {"admin", "ops", true}, {"revoked", "acme", false}} {
			tok, rec := storetest.NewAPIToken(k.tenant, k.admin)
			if err := st.CreateToken(context.Background(), rec); err != nil {
				t.Fatal(err)
			}
			if k.name == "revoked" {
				st.RevokeToken(context.Background(), rec.ID)
			}
			e.tokens[k.name], e.ids[k.name] = tok, rec.ID
		}
	}
	internal, _ := agent.NewToken()
	srv, url, err := natsbus.StartEmbeddedWith(natsbus.EmbeddedOptions{Dir: filepath.Join(dir, "nats"),
		Auth: &natsbus.TokenAuthenticator{Tokens: st, Internal: internal}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	e.url = url
	if e.daemon, err = natsbus.Connect(url, nats.Token(internal)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.daemon.Close)
	pub, err := natsbus.NewJetStreamPublisher(context.Background(), e.daemon)
	if err != nil {
		t.Fatal(err)
	}
	e.js = pub.JetStream()
	for _, s := range []string{"agent.events.acme.r1", "agent.events.beta.r2"} {
		for i := range 2 {
			if err := pub.Publish(context.Background(), s, s+string(rune('0'+i)), []byte(`{"subject":"`+s+`"}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return e
}

func (e *natsAuthEnv) tenant(t *testing.T, who, tenant string) *natsClient {
	t.Helper()
	c, err := connectAs(t, e.url, nats.Token(e.tokens[who]), nats.CustomInboxPrefix(natsbus.TenantInboxPrefix(tenant)))
	if err != nil {
		t.Fatalf("connect as %s: %v", who, err)
	}
	return c
}

// Without tokens in the store the embedded server is open as before.
func TestNATSAuthNoTokensOpen(t *testing.T) {
	e := newNATSAuthEnv(t, false)
	c, err := connectAs(t, e.url)
	if err != nil {
		t.Fatalf("anonymous connect without tokens: %v", err)
	}
	sub, err := c.nc.SubscribeSync("agent.events.>")
	if err != nil {
		t.Fatal(err)
	}
	// The subscription must be on the server before the publish.
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	e.daemon.Publish("agent.events.x.y", []byte("{}"))
	if _, err := sub.NextMsg(2 * time.Second); err != nil {
		t.Errorf("anonymous subscriber got nothing: %v", err)
	}
}

// With tokens, no token, an unknown, a revoked token, or a token under
// another id as user name cannot connect.
func TestNATSAuthRefusesConnect(t *testing.T) {
	e := newNATSAuthEnv(t, true)
	other, _ := agent.NewToken()
	for name, opts := range map[string][]nats.Option{
		"none":       nil,
		"unknown":    {nats.Token(other)},
		"revoked":    {nats.Token(e.tokens["revoked"])},
		"wrong user": {nats.UserInfo(e.ids["beta"], e.tokens["acme"])},
	} {
		if _, err := connectAs(t, e.url, opts...); !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("connect with %s token: %v, want an authorization violation", name, err)
		}
	}
	// user = token id, password = token works as nats.Token does.
	if _, err := connectAs(t, e.url, nats.UserInfo(e.ids["acme"], e.tokens["acme"])); err != nil {
		t.Errorf("connect as user id/password token: %v", err)
	}
}

// Tenant isolation on NATS: every way to another tenant's events or
// control is refused, the tenant's own work.
func TestNATSAuthTenantIsolation(t *testing.T) {
	e := newNATSAuthEnv(t, true)
	acme := e.tenant(t, "acme", "acme")

	// Core subscriptions outside its subjects: permissions violations.
	for _, s := range []string{"agent.events.beta.>", "agent.events.beta.r2", "agent.events.>", "agent.events.*.r2", ">", "_INBOX.>", "_INBOX_beta.>", "agent.control.>"} {
		sub, err := acme.nc.SubscribeSync(s)
		if err != nil {
			t.Fatal(err)
		}
		if !acme.violated(t, `"`+s+`"`) {
			t.Errorf("acme subscribed to %s without a permissions violation", s)
		}
		e.daemon.Publish("agent.events.beta.r2", []byte("live"))
		if m, err := sub.NextMsg(50 * time.Millisecond); err == nil {
			t.Errorf("acme got %s on %s", m.Data, s)
		}
	}
	// Its own events with core NATS neither (issue 22): the relay's
	// JetStream publishes carry the daemon's ack inbox, which
	// allow_responses would let acme answer, forging the stream's ack.
	checkNoForgedAck(t, e, acme)

	// JetStream: a consumer filtered to beta, an unfiltered one, one whose
	// request body filters beta under acme's subject, a durable: refused.
	ctxFor := func(d time.Duration) context.Context {
		c, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return c
	}
	ctx := func() context.Context { return ctxFor(3 * time.Second) }
	// A denied request gets no answer: wait briefly, the violation is checked.
	denied := func() context.Context { return ctxFor(300 * time.Millisecond) }
	js, _ := jetstream.New(acme.nc)
	for name, cfg := range map[string]jetstream.ConsumerConfig{
		"filtered to beta": {Name: "c1", FilterSubject: "agent.events.beta.>", DeliverSubject: "_INBOX_acme.c1"},
		"one run of beta":  {Name: "c2", FilterSubject: "agent.events.beta.r2", DeliverSubject: "_INBOX_acme.c2"},
		"unfiltered":       {Name: "c3", DeliverSubject: "_INBOX_acme.c3"},
		"several filters":  {Name: "c4", FilterSubjects: []string{"agent.events.acme.>", "agent.events.beta.>"}, DeliverSubject: "_INBOX_acme.c4"},
	} {
		if _, err := js.CreateOrUpdatePushConsumer(denied(), snapshots.StreamName, cfg); err == nil {
			t.Errorf("acme created a consumer %s", name)
		}
		if !acme.violated(t, "$JS.API.CONSUMER.CREATE.AGENT_EVENTS."+cfg.Name) {
			t.Errorf("consumer %s: no permissions violation", name)
		}
	}
	if _, err := js.CreateOrUpdateConsumer(denied(), snapshots.StreamName, jetstream.ConsumerConfig{Name: "c5", FilterSubject: "agent.events.beta.>"}); err == nil || !acme.violated(t, "$JS.API.CONSUMER.CREATE.AGENT_EVENTS.c5") {
		t.Errorf("acme's pull consumer on beta's subjects: %v, want a permissions violation", err)
	}
	// The filtered-create subject names acme, the body beta: the server
	// refuses the mismatch.
	body, _ := json.Marshal(map[string]any{"stream_name": snapshots.StreamName, "config": map[string]any{
		"name": "c6", "filter_subject": "agent.events.beta.>", "deliver_subject": "_INBOX_acme.c6", "ack_policy": "none"}})
	if m, err := acme.nc.RequestWithContext(ctx(), "$JS.API.CONSUMER.CREATE.AGENT_EVENTS.c6.agent.events.acme.>", body); err != nil || !strings.Contains(string(m.Data), `"error"`) {
		t.Errorf("mismatched filter: %v %s, want the server's error", err, msgData(m))
	}
	// A pull consumer the daemon (or another tenant) made: MSG.NEXT by its
	// name is denied; so are stream info, consumer listing and deletion.
	if _, err := e.js.CreateOrUpdateConsumer(context.Background(), snapshots.StreamName, jetstream.ConsumerConfig{Durable: "beta-reader", FilterSubject: "agent.events.beta.>"}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"$JS.API.CONSUMER.MSG.NEXT.AGENT_EVENTS.beta-reader", "$JS.API.STREAM.INFO.AGENT_EVENTS", "$JS.API.CONSUMER.LIST.AGENT_EVENTS",
		"$JS.API.CONSUMER.NAMES.AGENT_EVENTS", "$JS.API.CONSUMER.INFO.AGENT_EVENTS.beta-reader", "$JS.API.CONSUMER.DELETE.AGENT_EVENTS.beta-reader",
		"$JS.API.CONSUMER.CREATE.AGENT_EVENTS", "$JS.API.CONSUMER.DURABLE.CREATE.AGENT_EVENTS.x", "$JS.API.STREAM.MSG.GET.AGENT_EVENTS", "agent.events.beta.r2"} {
		m, err := acme.nc.RequestWithContext(denied(), subj, []byte(`{"batch":1,"subjects_filter":">","last_by_subj":"agent.events.beta.r2"}`))
		if err == nil {
			t.Errorf("acme's request on %s answered: %s", subj, m.Data)
		}
		if !acme.violated(t, subj) {
			t.Errorf("no permissions violation for publish to %s", subj)
		}
	}
	if _, err := e.js.Consumer(context.Background(), snapshots.StreamName, "beta-reader"); err != nil {
		t.Errorf("beta's consumer is gone after acme's refused delete: %v", err)
	}

	// Its own: a push consumer on acme's subjects replays acme's events only.
	pc, err := js.CreateOrUpdatePushConsumer(ctx(), snapshots.StreamName, jetstream.ConsumerConfig{Name: "mine",
		FilterSubject: "agent.events.acme.>", DeliverSubject: natsbus.TenantInboxPrefix("acme") + ".mine", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("acme's own push consumer: %v", err)
	}
	got := make(chan jetstream.Msg, 16)
	cc, err := pc.Consume(func(m jetstream.Msg) { m.Ack(); got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	for i := range 2 {
		select {
		case m := <-got:
			if m.Subject() != "agent.events.acme.r1" {
				t.Errorf("acme's consumer delivered %s", m.Subject())
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("acme's consumer delivered %d of 2 events", i)
		}
	}

	// Control: beta's subject is denied and never reaches the daemon;
	// acme's own is delivered.
	ctl, _ := e.daemon.SubscribeSync("agent.control.>")
	e.daemon.Flush()
	acme.nc.Publish("agent.control.beta.r2", []byte(`{"kind":"agent.run.cancellation_requested"}`))
	if !acme.violated(t, "agent.control.beta.r2") {
		t.Error("publishing control to beta's run: no permissions violation")
	}
	acme.nc.Publish("agent.control.acme.r1", []byte(`{"kind":"agent.run.pause_requested"}`))
	acme.nc.Flush()
	m, err := ctl.NextMsg(2 * time.Second)
	if err != nil || m.Subject != "agent.control.acme.r1" {
		t.Errorf("the daemon got %v (%v), want acme's control only", msgSubject(m), err)
	}
	if m, err := ctl.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("the daemon also got %s", m.Subject)
	}

	// The admin token sees every tenant.
	adm, err := connectAs(t, e.url, nats.Token(e.tokens["admin"]))
	if err != nil {
		t.Fatal(err)
	}
	all, _ := adm.nc.SubscribeSync("agent.events.>")
	adm.nc.Flush()
	e.daemon.Publish("agent.events.beta.r2", []byte("live"))
	if _, err := all.NextMsg(2 * time.Second); err != nil {
		t.Errorf("admin subscriber: %v", err)
	}
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

func msgSubject(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return m.Subject
}

// checkNoForgedAck: acme's core subscription to its own event subjects is a
// permissions violation, so a JetStream publish of the daemon there (a
// relay's) is not delivered to acme, and the daemon's ack inbox gets the
// stream's ack only. With a subscription there acme received the publish
// with its reply subject (_INBOX.…) and, through allow_responses, answered
// it: an error ack forged by a tenant reached the relay.
func checkNoForgedAck(t *testing.T, e *natsAuthEnv, acme *natsClient) {
	t.Helper()
	own, err := acme.nc.SubscribeSync("agent.events.acme.>")
	if err != nil {
		t.Fatal(err)
	}
	if !acme.violated(t, `"agent.events.acme.>"`) {
		t.Error("acme subscribed to its own event subjects with core NATS")
	}
	spy, _ := e.daemon.SubscribeSync("_INBOX.>")
	e.daemon.Flush()
	f, err := e.js.PublishMsgAsync(&nats.Msg{Subject: "agent.events.acme.r1", Data: []byte(`{"subject":"agent.events.acme.r1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := own.NextMsg(500 * time.Millisecond); err == nil {
		t.Errorf("acme got the relay's publish, reply subject %q", m.Reply)
		m.Respond([]byte(`{"error":{"code":503,"err_code":10999,"description":"forged by acme"}}`))
		acme.nc.Flush()
	}
	select {
	case <-f.Ok():
	case err := <-f.Err():
		t.Fatalf("the daemon's publish: %v", err)
	}
	for {
		m, err := spy.NextMsg(300 * time.Millisecond)
		if err != nil {
			break
		}
		if !strings.Contains(string(m.Data), `"stream":"AGENT_EVENTS"`) {
			t.Errorf("the daemon's inbox got %s", m.Data)
		}
	}
}
