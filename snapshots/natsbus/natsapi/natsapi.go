// Package natsapi is the daemon's NATS control API, beside the HTTP API
// (agent/httpapi): control requests published on
// <prefix>.<tenantId>.<runId> (prefix agent.control) go through the same
// service method as POST /v1/runs/{id}/cancel|pause|resume|policy, with the
// subject's tenant as the caller's agent.Scope. The tenant check is the
// service's, never repeated here: a run of another tenant is answered
// exactly like an unknown run.
//
// A reply goes only where the requester may listen (Config.Replies): a
// request's reply subject is the requester's choice, and the daemon's
// connection may publish almost anywhere (the stream's subjects, the
// JetStream API), so answering any reply subject would let a tenant make the
// daemon write into another tenant's events or purge the stream. A reply
// subject the rule refuses is dropped, never published, and counted in
// screengraph_nats_control_refused_total{reason}.
package natsapi

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

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

// ReplyRule decides whether a control request published on tenant's
// control subject may be answered on reply: "" allows it, anything else
// refuses it and is the reason (a short label, e.g. "stream_subject", the
// reason label of screengraph_nats_control_refused_total). Whoever may
// publish on <prefix>.<tenant>.* (the tenant's own users, admins, the
// daemon) is the requester, so the rule admits only subjects every such
// requester may subscribe to and nothing else can capture (a stream, the
// JetStream API): natsbus.ControlReplies.
type ReplyRule func(tenant, reply string) (reason string)

// Reasons for refusing a reply subject (the metric's reason label) that
// InboxReplies gives; other rules may add their own.
const (
	RefusedInvalidSubject = "invalid_subject" // not a literal subject: empty token, wildcard, space
	RefusedForeignSubject = "foreign_subject" // not an inbox of the requester
)

// DefaultOwnInboxPrefix is the inbox prefix of the daemon's own users
// (admins, the daemon, and every client while no token exists): nats.go's
// default, _INBOX.
const DefaultOwnInboxPrefix = "_INBOX"

// InboxReplies is the rule used when Config.Replies is nil: a reply subject
// must be a literal subject under the tenant's inbox prefix
// (_INBOX_<tenant>., natsbus.TenantInboxPrefix) or under own + "." (the
// daemon's own users' prefix, DefaultOwnInboxPrefix when own is "").
func InboxReplies(own string) ReplyRule {
	if own == "" {
		own = DefaultOwnInboxPrefix
	}
	return func(tenant, reply string) string {
		if !LiteralSubject(reply) {
			return RefusedInvalidSubject
		}
		if strings.HasPrefix(reply, "_INBOX_"+tenant+".") || strings.HasPrefix(reply, own+".") {
			return ""
		}
		return RefusedForeignSubject
	}
}

// LiteralSubject reports whether s is a subject a client may publish to:
// dot-separated non-empty tokens, no wildcard token (* or >), no space,
// tab, CR or LF.
func LiteralSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	return true
}

// Config wires the control subscription.
type Config struct {
	Conn    *nats.Conn
	Service Controller
	// Prefix is the control subjects' prefix (snapshots.ControlSubjectPrefix).
	Prefix string
	// Replies decides which reply subjects are answered (nil:
	// InboxReplies(DefaultOwnInboxPrefix)); a refused one is dropped and
	// counted.
	Replies ReplyRule
	// ReplyReasons are the reasons Replies may give besides
	// RefusedInvalidSubject and RefusedForeignSubject: the metric shows each
	// at 0 from the start.
	ReplyReasons []string
	// Registerer, when set, gets the handler's metric:
	//
	//	screengraph_nats_control_refused_total{reason}  counter, control
	//	    requests whose reply subject was refused (not answered), by the
	//	    rule's reason; the request itself is still handled
	Registerer prometheus.Registerer
	// Logf reports refused requests; may be nil.
	Logf func(format string, args ...any)
}

// Subscribe subscribes cfg.Conn (queue group QueueGroup) to
// <Prefix>.*.* and records each control request through cfg.Service. When a
// message has a reply subject that cfg.Replies admits (the requester's
// inbox; any other is dropped and counted, never published to), the reply
// is httpapi.ControlResponse
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
	if cfg.Replies == nil {
		cfg.Replies = InboxReplies(DefaultOwnInboxPrefix)
	}
	h := handler{cfg: cfg, refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "screengraph_nats_control_refused_total",
		Help: "NATS control requests whose reply subject is not the requester's inbox: the reply was dropped, never published. By reason.",
	}, []string{"reason"})}
	// The rule's usual reasons show from the start, at 0.
	for _, r := range append([]string{RefusedInvalidSubject, RefusedForeignSubject}, cfg.ReplyReasons...) {
		h.refused.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(h.refused); err != nil {
			return nil, agent.Wrap(agent.ErrInternal, err, "natsapi: registering metrics")
		}
	}
	return cfg.Conn.QueueSubscribe(cfg.Prefix+".*.*", QueueGroup, h.handle)
}

type handler struct {
	cfg     Config
	refused *prometheus.CounterVec
}

func (h handler) logf(format string, args ...any) {
	if h.cfg.Logf != nil {
		h.cfg.Logf(format, args...)
	}
}

func (h handler) handle(m *nats.Msg) {
	if IsJetStreamDelivery(m) {
		return
	}
	// The subscription's subject has exactly two tokens after the prefix.
	tenant, runID, _ := strings.Cut(strings.TrimPrefix(m.Subject, h.cfg.Prefix+"."), ".")
	// The reply subject is decided on before anything else: a refused one
	// is never published to, whatever the request's fate. The request is
	// still handled (as a request without reply subject would be): what
	// it asks is the requester's own to ask.
	replyTo := m.Reply
	if replyTo != "" {
		if reason := h.cfg.Replies(tenant, replyTo); reason != "" {
			h.refused.WithLabelValues(reason).Inc()
			h.logf("control on %s: reply subject refused (%s), not answered", m.Subject, reason)
			replyTo = ""
		}
	}
	reply := func(v any) {
		if replyTo == "" {
			return
		}
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte(`{"success":false,"error":"internal_error: encoding the reply failed"}`)
		}
		if err := h.cfg.Conn.Publish(replyTo, agent.RedactJSON(b)); err != nil {
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
