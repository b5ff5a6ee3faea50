// Package natsapi is the daemon's NATS control API, beside the HTTP API
// (agent/httpapi): control requests published on
// <prefix>.<tenantId>.<runId> (prefix agent.control) go through the same
// service method as POST /v1/runs/{id}/cancel|pause|resume|policy, with the
// subject's tenant as the caller's agent.Scope. The tenant check is the
// service's, never repeated here: a run of another tenant is answered
// exactly like an unknown run.
package natsapi

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
)

// QueueGroup is the queue group of every daemon's control subscription: in
// a fleet one daemon (any: the store is shared) records each request once.
const QueueGroup = "screengraph-agent-control"

// MaxMessageBytes bounds a control message's body; a larger one is refused
// (invalid_request_error) before it is decoded.
const MaxMessageBytes = 4 << 10

// HandleTimeout bounds the handling of one message (the service call).
const HandleTimeout = 10 * time.Second

// ControlMessage is the body of a control request:
// {"kind": "agent.run.cancellation_requested" | "agent.run.pause_requested" |
// "agent.run.resume_requested" | "agent.run.policy_switch_requested",
// "policyVersion": N (policy switch only)}. It is decoded by strictjson:
// unknown keys, duplicate keys and case variants of a key are refused.
type ControlMessage struct {
	Kind          string `json:"kind"`
	PolicyVersion int    `json:"policyVersion,omitempty"`
}

// Controller records a control request for a run seen by sc
// (*service.Service): agent.ErrNotFound for a run sc does not see.
type Controller interface {
	Control(ctx context.Context, sc agent.Scope, runID, kind string, policyVersion int) (agent.Control, error)
}

// Config wires the control subscription.
type Config struct {
	Conn    *nats.Conn
	Service Controller
	// Prefix is the control subjects' prefix (snapshots.ControlSubjectPrefix).
	Prefix string
	// Logf reports refused requests; may be nil.
	Logf func(format string, args ...any)
}

// Subscribe subscribes cfg.Conn (queue group QueueGroup) to
// <Prefix>.*.* and records each control request through cfg.Service. When a
// message has a reply subject, the reply is httpapi.ControlResponse
// ({"runId","kind","requestId","recorded":true}), sent only after the
// request is committed, or the agent error format (httpapi.ErrorBody):
// invalid_request_error for a body that is not a ControlMessage, an invalid
// tenant id in the subject, or an unknown run (or one of another tenant).
// A stored event a JetStream consumer delivered onto a control subject is
// no request: it is ignored (IsJetStreamDelivery).
func Subscribe(cfg Config) (*nats.Subscription, error) {
	if cfg.Conn == nil || cfg.Service == nil || cfg.Prefix == "" {
		return nil, agent.Errorf(agent.ErrInternal, "natsapi: Conn, Service and Prefix are required")
	}
	h := handler{cfg: cfg}
	return cfg.Conn.QueueSubscribe(cfg.Prefix+".*.*", QueueGroup, h.handle)
}

type handler struct{ cfg Config }

func (h handler) logf(format string, args ...any) {
	if h.cfg.Logf != nil {
		h.cfg.Logf(format, args...)
	}
}

func (h handler) handle(m *nats.Msg) {
	if IsJetStreamDelivery(m) {
		return
	}
	reply := func(v any) {
		if m.Reply == "" {
			return
		}
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte(`{"success":false,"error":"internal_error: encoding the reply failed"}`)
		}
		if err := m.Respond(agent.RedactJSON(b)); err != nil {
			h.logf("control reply on %s: %v", m.Subject, err)
		}
	}
	fail := func(err error) {
		h.logf("control on %s: %v", m.Subject, agent.RedactString(err.Error()))
		if agent.IsStoreUnavailable(err) {
			err = httpapi.StoreUnavailable(err, false) // a tenant's message: nothing of the store
		}
		reply(httpapi.ErrorBody(err, ""))
	}
	// The subscription's subject has exactly two tokens after the prefix.
	tenant, runID, _ := strings.Cut(strings.TrimPrefix(m.Subject, h.cfg.Prefix+"."), ".")
	// The subject's tenant is the scope: NATS permissions (natsauth) let a
	// tenant's user publish on its own control subjects only.
	sc, err := agent.Tenant(tenant)
	if err != nil {
		fail(agent.InvalidTenantID("subject "+h.cfg.Prefix+".<tenantId>.<runId>", tenant))
		return
	}
	if len(m.Data) > MaxMessageBytes {
		fail(agent.Errorf(agent.ErrInvalidRequest, "$: the control message is %d bytes, at most %d", len(m.Data), MaxMessageBytes))
		return
	}
	var msg ControlMessage
	if err := strictjson.Decode(m.Data, &msg); err != nil {
		fail(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), HandleTimeout)
	defer cancel()
	c, err := h.cfg.Service.Control(ctx, sc, runID, msg.Kind, msg.PolicyVersion)
	if err != nil {
		fail(err)
		return
	}
	// Sent only now: the request is committed when Control returns.
	reply(httpapi.ControlResponse{RunID: runID, Kind: msg.Kind, RequestID: c.ID, Recorded: true})
}

// IsJetStreamDelivery reports whether a message on a control subject is a
// stored event a JetStream consumer delivered there (a tenant may point its
// push consumer's deliver subject at any subject outside the stream's, e.g.
// another tenant's agent.control.<T>.<run>): every AGENT_EVENTS message
// carries Nats-Msg-Id, and an acked delivery replies to $JS.ACK.….
func IsJetStreamDelivery(m *nats.Msg) bool {
	return m.Header.Get(nats.MsgIdHdr) != "" || strings.HasPrefix(m.Reply, "$JS.ACK.")
}
