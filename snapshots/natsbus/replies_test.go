package natsbus_test

import (
	"testing"

	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus/natsapi"
)

// issue 22 item 1: the daemon answers a control request of tenant acme
// only on acme's inbox or the daemon's users' _INBOX; every other reply
// subject is refused with its reason.
func TestControlReplies(t *testing.T) {
	rule := natsbus.ControlReplies("")
	for reply, want := range map[string]string{
		"_INBOX_acme.x1.y":                      "",
		"_INBOX.abc.1":                          "",
		"_INBOX_beta.x1":                        natsapi.RefusedForeignSubject,
		"_INBOX_acmeX.x1":                       natsapi.RefusedForeignSubject,
		"_INBOX_acme":                           natsapi.RefusedForeignSubject,
		"_INBOX":                                natsapi.RefusedForeignSubject,
		"agent.control.beta.01J":                natsapi.RefusedForeignSubject,
		"agent.control.acme.01J":                natsapi.RefusedForeignSubject,
		"orders.new":                            natsapi.RefusedForeignSubject,
		"agent.events.beta.01J":                 natsbus.RefusedStream,
		"agent.events.acme.01J":                 natsbus.RefusedStream, // its own, still stored by the stream
		"$JS.API.STREAM.PURGE.AGENT_EVENTS":     natsbus.RefusedJetStreamAPI,
		"$JS.API.STREAM.DELETE.AGENT_EVENTS":    natsbus.RefusedJetStreamAPI,
		"$JS.ACK.AGENT_EVENTS.c.1.2.3.4.0":      natsbus.RefusedJetStreamAPI,
		"$SYS.REQ.SERVER.PING":                  natsbus.RefusedSystem,
		"$KV.x.y":                               natsbus.RefusedSystem,
		"_INBOX_acme.*":                         natsapi.RefusedInvalidSubject,
		"_INBOX_acme.>":                         natsapi.RefusedInvalidSubject,
		"_INBOX_acme..x":                        natsapi.RefusedInvalidSubject,
		"_INBOX_acme.x y":                       natsapi.RefusedInvalidSubject,
		"":                                      natsapi.RefusedInvalidSubject,
		"_INBOX_acme.x\r\nPUB agent.events.b 0": natsapi.RefusedInvalidSubject,
	} {
		if got := rule("acme", reply); got != want {
			t.Errorf("reply %q of acme: %q, want %q", reply, got, want)
		}
	}
	// Another prefix for the daemon's own users replaces _INBOX.
	if got := natsbus.ControlReplies("_INBOX_ops")("acme", "_INBOX.abc"); got != natsapi.RefusedForeignSubject {
		t.Errorf("_INBOX with own prefix _INBOX_ops: %q", got)
	}
	if got := natsbus.ControlReplies("_INBOX_ops")("acme", "_INBOX_ops.abc"); got != "" {
		t.Errorf("_INBOX_ops.abc with own prefix _INBOX_ops: %q", got)
	}
}
