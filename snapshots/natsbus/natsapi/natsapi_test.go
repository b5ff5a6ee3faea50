package natsapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus/natsapi"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// committed wraps the service: it counts the Control calls that returned,
// so a reply can be checked to come after its request's commit.
type committed struct {
	svc      *service.Service
	returned atomic.Int64
}

func (c *committed) Control(ctx context.Context, sc agent.Scope, runID, kind string, v int) (agent.Control, error) {
	ctl, err := c.svc.Control(ctx, sc, runID, kind, v)
	c.returned.Add(1)
	return ctl, err
}

type env struct {
	t     *testing.T
	store *sqlite.Store
	ctl   *committed
	nc    *nats.Conn // the test's client (the daemon has its own)
	url   string
	sub   *nats.Subscription // the daemon's control subscription
}

// newEnv is the control subscription of a real service over an embedded
// store, on an embedded NATS server (loopback, random port).
func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := service.New(service.Config{Store: st, Leases: st, NewID: func() string { return ulid.Make().String() }, Holder: "serve:test",
		Prepare: servicetest.Prepare(func(context.Context, string, []byte) (agent.Run, error) {
			return agent.Run{}, errors.New("no submits here")
		})})
	if err != nil {
		t.Fatal(err)
	}
	ns, url, err := natsbus.StartEmbedded(filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	daemon, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(daemon.Close)
	e := &env{t: t, store: st, ctl: &committed{svc: svc}, url: url}
	sub, err := natsapi.Subscribe(natsapi.Config{Conn: daemon, Service: e.ctl, Prefix: snapshots.ControlSubjectPrefix, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	e.sub = sub
	if err := daemon.Flush(); err != nil {
		t.Fatal(err)
	}
	if e.nc, err = nats.Connect(url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	return e
}

func (e *env) run(tenant string) string {
	e.t.Helper()
	r := storetest.NewRun(tenant, "emulator-5554")
	if err := e.store.CreateRun(context.Background(), r); err != nil {
		e.t.Fatal(err)
	}
	return r.RunID
}

// request sends body on the control subject of tenant and run and returns
// the reply.
func (e *env) request(tenant, runID, body string) []byte {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := e.nc.RequestWithContext(ctx, snapshots.ControlSubjectPrefix+"."+tenant+"."+runID, []byte(body))
	if err != nil {
		e.t.Fatalf("control on %s.%s: %v", tenant, runID, err)
	}
	return m.Data
}

// refusal decodes an agent error format reply and returns its message.
func refusal(t *testing.T, reply []byte, id agent.ErrorID) string {
	t.Helper()
	var rep struct {
		Success *bool  `json:"success"`
		Error   string `json:"error"`
		Errors  []struct {
			ErrorID string `json:"error_id"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(reply, &rep); err != nil || rep.Success == nil || *rep.Success || len(rep.Errors) != 1 {
		t.Fatalf("reply %s is not the agent error format (%v)", reply, err)
	}
	if got := rep.Errors[0].ErrorID; got != string(id) {
		t.Fatalf("reply %s: error_id %v, want %s", reply, got, id)
	}
	return rep.Error
}

func (e *env) pending(runID string) []agent.Control {
	e.t.Helper()
	cs, err := e.store.PendingControl(context.Background(), runID)
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

// A recorded request is answered only after its commit: when the reply
// arrives, the store already holds the request it names.
func TestControlRepliesAfterCommit(t *testing.T) {
	e := newEnv(t)
	id := e.run("acme")
	reply := e.request("acme", id, `{"kind":"agent.run.pause_requested"}`)
	pending := e.pending(id) // read first: the reply is already here
	var got httpapi.ControlResponse
	if err := json.Unmarshal(reply, &got); err != nil || !got.Recorded || got.RunID != id || got.RequestID == "" {
		t.Fatalf("reply %s (%v)", reply, err)
	}
	if e.ctl.returned.Load() != 1 {
		t.Fatalf("replied before the service returned (%d returns)", e.ctl.returned.Load())
	}
	if len(pending) != 1 || pending[0].ID != got.RequestID || pending[0].Kind != agent.KindPauseRequested {
		t.Fatalf("pending %+v, want the request %s", pending, got.RequestID)
	}
}

// A control for another tenant's run is answered exactly like one for a run
// that does not exist, and records nothing.
func TestControlOtherTenantLikeUnknown(t *testing.T) {
	e := newEnv(t)
	beta := e.run("beta")
	unknown := ulid.Make().String()
	other := refusal(t, e.request("acme", beta, `{"kind":"agent.run.cancellation_requested"}`), agent.ErrInvalidRequest)
	none := refusal(t, e.request("acme", unknown, `{"kind":"agent.run.cancellation_requested"}`), agent.ErrInvalidRequest)
	if strings.ReplaceAll(other, beta, "ID") != strings.ReplaceAll(none, unknown, "ID") || !strings.Contains(none, "not found") {
		t.Fatalf("another tenant's run: %q\nan unknown run: %q", other, none)
	}
	if p := e.pending(beta); len(p) != 0 {
		t.Fatalf("beta's run got %+v", p)
	}
	r, err := e.store.GetRun(context.Background(), agent.Admin(), beta)
	if err != nil || r.Status != agent.RunPending {
		t.Fatalf("beta's run %+v %v, want it PENDING", r, err)
	}
}

// Bodies go through the strict decoder: each is refused with
// invalid_request_error naming the key, and nothing is recorded.
func TestControlBadBodies(t *testing.T) {
	e := newEnv(t)
	id := e.run("acme")
	for _, tc := range []struct{ body, want string }{
		{`{"kind":`, `ends early`},
		{`not json`, `not valid JSON`},
		{`{"kind":"agent.run.pause_requested","kind":"agent.run.cancellation_requested"}`, `duplicate key "kind" at $`},
		{`{"Kind":"agent.run.cancellation_requested"}`, `key "Kind" at $ matches field "kind" only by case`},
		{`{"kind":"agent.run.policy_switch_requested","policyVersion":1,"policyversion":2}`, `keys "policyVersion" and "policyversion" at $ differ only by case`},
		{`{"kind":"agent.run.cancellation_requested","runId":"x"}`, `unknown key "runId" at $`},
		{`{"kind":"agent.run.pause_requested"} {"kind":"agent.run.cancellation_requested"}`, `data after the JSON value`},
		{`{"kind":"agent.run.pause_requested","x":"` + strings.Repeat("a", natsapi.MaxMessageBytes) + `"}`, `at most 4096`},
		{`{"kind":"agent.run.stop"}`, `unknown control kind`},
	} {
		if msg := refusal(t, e.request("acme", id, tc.body), agent.ErrInvalidRequest); !strings.Contains(msg, tc.want) {
			t.Errorf("%.80s: %q, want it to say %q", tc.body, msg, tc.want)
		}
	}
	if p := e.pending(id); len(p) != 0 {
		t.Fatalf("refused bodies recorded %+v", p)
	}
}

// A subject whose tenant token breaks the tenant id rule is refused.
func TestControlInvalidTenantSubject(t *testing.T) {
	e := newEnv(t)
	id := e.run("acme")
	for _, tenant := range []string{strings.Repeat("a", 65), "acmé", "a+b"} {
		msg := refusal(t, e.request(tenant, id, `{"kind":"agent.run.cancellation_requested"}`), agent.ErrInvalidRequest)
		if !strings.Contains(msg, "must be 1-64 of A-Z, a-z, 0-9, '_' and '-'") || !strings.Contains(msg, "subject") {
			t.Errorf("tenant %q: %q", tenant, msg)
		}
	}
}

// A stored event a JetStream consumer delivered onto a control subject (it
// carries Nats-Msg-Id) is no request: ignored,
// unanswered, nothing recorded.
func TestControlIgnoresJetStreamDelivery(t *testing.T) {
	e := newEnv(t)
	id := e.run("acme")
	subject := snapshots.ControlSubjectPrefix + ".acme." + id
	inbox, err := e.nc.SubscribeSync(nats.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	ev := nats.NewMsg(subject)
	ev.Header.Set(nats.MsgIdHdr, ulid.Make().String())
	ev.Reply = inbox.Subject
	ev.Data = []byte(`{"kind":"agent.run.cancellation_requested"}`)
	// (A message replying to $JS.ACK.… only the server may send: a client's
	// is a permissions violation; TestIsJetStreamDelivery covers it.)
	if err := e.nc.PublishMsg(ev); err != nil {
		t.Fatal(err)
	}
	// One subscription handles messages in order: when this request's
	// reply is here, the delivery was handled.
	var got httpapi.ControlResponse
	if err := json.Unmarshal(e.request("acme", id, `{"kind":"agent.run.pause_requested"}`), &got); err != nil || !got.Recorded {
		t.Fatalf("the request after the deliveries: %+v %v", got, err)
	}
	if n, _, _ := inbox.Pending(); n != 0 {
		t.Errorf("a JetStream delivery was answered (%d replies)", n)
	}
	p := e.pending(id)
	if len(p) != 1 || p[0].Kind != agent.KindPauseRequested {
		t.Fatalf("pending %+v, want only the pause", p)
	}
	if r, _ := e.store.GetRun(context.Background(), agent.Admin(), id); r.Status != agent.RunPending {
		t.Fatalf("run %s after ignored cancels", r.Status)
	}
}

func TestIsJetStreamDelivery(t *testing.T) {
	ev := nats.NewMsg("agent.control.beta.01J")
	ev.Header.Set(nats.MsgIdHdr, "01JEVENT")
	acked := &nats.Msg{Subject: "agent.control.beta.01J", Reply: "$JS.ACK.AGENT_EVENTS.c.1.1.1.1.0"}
	req := &nats.Msg{Subject: "agent.control.beta.01J", Reply: "_INBOX_beta.abc", Data: []byte(`{"kind":"agent.run.pause_requested"}`)}
	if !natsapi.IsJetStreamDelivery(ev) || !natsapi.IsJetStreamDelivery(acked) {
		t.Error("a JetStream delivery taken for a control request")
	}
	if natsapi.IsJetStreamDelivery(req) || natsapi.IsJetStreamDelivery(&nats.Msg{Subject: "agent.control.a.b"}) {
		t.Error("a control request taken for a JetStream delivery")
	}
}

func TestSubscribeNeedsConfig(t *testing.T) {
	var ae *agent.Error
	if _, err := natsapi.Subscribe(natsapi.Config{}); !errors.As(err, &ae) || ae.ID != agent.ErrInternal {
		t.Fatalf("empty config: %v", err)
	}
}

// newEnvWith is newEnv with the daemon's control subscription configured by
// cfg (Conn, Service and Prefix are filled in).
func newEnvWith(t *testing.T, cfg natsapi.Config) (*env, *nats.Conn) {
	t.Helper()
	e := newEnv(t)
	// newEnv's own subscription answers too (same queue group): replace it
	// by one of a second daemon connection made here, alone in the group.
	e.sub.Unsubscribe()
	daemon, err := nats.Connect(e.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(daemon.Close)
	cfg.Conn, cfg.Service, cfg.Prefix = daemon, e.ctl, snapshots.ControlSubjectPrefix
	sub, err := natsapi.Subscribe(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := daemon.Flush(); err != nil {
		t.Fatal(err)
	}
	return e, daemon
}

// issue 22 item 1: a control request's reply subject is answered only when
// it is an inbox of the requester. One with its reply subject on another
// tenant's event subject or on the JetStream API's purge of AGENT_EVENTS is
// handled but not answered there (the stream keeps its messages, nothing
// reaches the event subject), and counted by reason; a request on the
// tenant's own inbox and one on the daemon's users' _INBOX get their answer.
func TestControlRepliesOnlyToRequesterInbox(t *testing.T) {
	reg := prometheus.NewRegistry()
	e, _ := newEnvWith(t, natsapi.Config{Registerer: reg, Logf: t.Logf})
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: snapshots.StreamName, Subjects: []string{snapshots.SubjectPrefix + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	beta := e.run("beta")
	for i := 0; i < 3; i++ {
		if _, err := js.Publish(ctx, "agent.events.beta."+beta, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	betaEvents, _ := e.nc.SubscribeSync("agent.events.beta.>")
	purges, _ := e.nc.SubscribeSync("$JS.API.STREAM.>")
	others, _ := e.nc.SubscribeSync("_INBOX_beta.>")
	e.nc.Flush()
	acme := e.run("acme")
	subject := snapshots.ControlSubjectPrefix + ".acme." + acme
	for _, reply := range []string{"agent.events.beta." + beta, "$JS.API.STREAM.PURGE.AGENT_EVENTS", "_INBOX_beta.steal", "agent.events.beta.*", "agent.control.beta." + beta} {
		if err := e.nc.PublishRequest(subject, reply, []byte(`{"kind":"agent.run.pause_requested"}`)); err != nil {
			t.Fatal(err)
		}
	}
	// One subscription handles messages in order: once this request on
	// acme's own inbox is answered, the ones before it were handled.
	inbox, _ := e.nc.SubscribeSync("_INBOX_acme.r1")
	e.nc.Flush()
	if err := e.nc.PublishRequest(subject, inbox.Subject, []byte(`{"kind":"agent.run.resume_requested"}`)); err != nil {
		t.Fatal(err)
	}
	m, err := inbox.NextMsg(10 * time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"recorded":true`) {
		t.Fatalf("the request on acme's inbox: %v %s", err, msgData(m))
	}
	// And one on the daemon's users' inbox (nats.go's default).
	if got := e.request("acme", acme, `{"kind":"agent.run.resume_requested"}`); !strings.Contains(string(got), `"recorded":true`) {
		t.Fatalf("the request on _INBOX: %s", got)
	}
	e.nc.Flush()
	for _, s := range []*nats.Subscription{betaEvents, purges, others} {
		if m, err := s.NextMsg(200 * time.Millisecond); err == nil {
			t.Errorf("the daemon answered on %s: %s", m.Subject, m.Data)
		}
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 3 {
		t.Fatalf("AGENT_EVENTS after the requests: %+v %v, want its 3 messages", info, err)
	}
	refused := func(reason string) float64 { return refusedCount(t, reg, reason) }
	if got := refused(natsapi.RefusedForeignSubject); got != 4 {
		t.Errorf("refused foreign_subject %v, want 4", got)
	}
	if got := refused(natsapi.RefusedInvalidSubject); got != 1 {
		t.Errorf("refused invalid_subject %v, want 1", got)
	}
	// The requests themselves were handled: their own tenant's to make.
	if p := e.pending(acme); len(p) != 7 {
		t.Errorf("acme's run has %d control requests, want 7", len(p))
	}
}

// refusedCount is screengraph_nats_control_refused_total{reason} on reg.
func refusedCount(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "screengraph_nats_control_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no screengraph_nats_control_refused_total{reason=%q}", reason)
	return 0
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

func TestLiteralSubject(t *testing.T) {
	for s, want := range map[string]bool{"_INBOX.a.b": true, "a": true, "": false, "a..b": false, ".a": false, "a.": false,
		"a.*": false, "a.>": false, "a b": false, "a\tb": false, "a\r\nPUB x 1": false, "a.b*": true} {
		if got := natsapi.LiteralSubject(s); got != want {
			t.Errorf("LiteralSubject(%q) = %v", s, got)
		}
	}
}
