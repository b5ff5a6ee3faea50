package main

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// A stored event a JetStream consumer pushed onto a control subject is no
// control request: it carries Nats-Msg-Id (every AGENT_EVENTS message does)
// or an ack reply subject.
func TestIsJetStreamDelivery(t *testing.T) {
	ev := nats.NewMsg("agent.control.beta.01J")
	ev.Header.Set(nats.MsgIdHdr, "01JEVENT")
	acked := &nats.Msg{Subject: "agent.control.beta.01J", Reply: "$JS.ACK.AGENT_EVENTS.c.1.1.1.1.0"}
	req := &nats.Msg{Subject: "agent.control.beta.01J", Reply: "_INBOX_beta.abc", Data: []byte(`{"kind":"agent.run.pause_requested"}`)}
	if !isJetStreamDelivery(ev) || !isJetStreamDelivery(acked) {
		t.Error("a JetStream delivery taken for a control request")
	}
	if isJetStreamDelivery(req) || isJetStreamDelivery(&nats.Msg{Subject: "agent.control.a.b"}) {
		t.Error("a control request taken for a JetStream delivery")
	}
}
