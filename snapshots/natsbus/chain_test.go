package natsbus_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

func chainRow(tenant, run string, seq int) agent.OutboxRow {
	return agent.OutboxRow{RunID: run, Sequence: int64(seq), EventID: tenant + "-" + run + "-" + strconv.Itoa(seq),
		Subject: snapshots.Subject(tenant, run, ""), Body: []byte(`{"sequence":` + strconv.Itoa(seq) + `}`)}
}

// issue 22 item 1: the streaming relay's chain, with rows of two tenants
// interleaved, stores every row in the order sent, and no stored message
// names another tenant's eventId in Nats-Expected-Last-Msg-Id (the old
// chain named whatever row was sent before: beta's first event carried
// acme's last eventId); after another tenant's row the condition is
// Nats-Expected-Last-Sequence = the message's own stream sequence - 1.
func TestSendChainNamesNoOtherTenantsEvent(t *testing.T) {
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	_, pub := testenv.ConnectPublisher(t, url)
	ctx := t.Context()
	rows := []agent.OutboxRow{chainRow("acme", "r1", 1), chainRow("acme", "r1", 2), chainRow("beta", "r2", 1), chainRow("acme", "r3", 1),
		chainRow("acme", "r1", 3), chainRow("beta", "r2", 2), chainRow("beta", "r2", 3), chainRow("acme", "r3", 2)}
	var acks []snapshots.ChainAck
	for _, r := range rows {
		a, err := pub.SendChain(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	for i, a := range acks {
		if dup, err := a.Wait(ctx); err != nil || dup {
			t.Fatalf("row %s: duplicate %v, %v", rows[i].EventID, dup, err)
		}
	}
	st, err := pub.JetStream().Stream(ctx, snapshots.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		m, err := st.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != r.EventID {
			t.Fatalf("stream sequence %d holds %s, want %s", i+1, id, r.EventID)
		}
		tenant := strings.SplitN(r.EventID, "-", 2)[0]
		if prev := m.Header.Get(jetstream.ExpectedLastMsgIDHeader); prev != "" && !strings.HasPrefix(prev, tenant+"-") {
			t.Errorf("%s (tenant %s) names %s in %s", r.EventID, tenant, prev, jetstream.ExpectedLastMsgIDHeader)
		}
		if seq := m.Header.Get(jetstream.ExpectedLastSeqHeader); seq != "" && seq != strconv.Itoa(i) {
			t.Errorf("%s at stream sequence %d expects last sequence %s", r.EventID, i+1, seq)
		}
		if i > 0 && m.Header.Get(jetstream.ExpectedLastMsgIDHeader) == "" && m.Header.Get(jetstream.ExpectedLastSeqHeader) == "" {
			t.Errorf("%s carries no condition", r.EventID)
		}
	}
}

// A sequence condition names the row before itself, never a predicted
// position: when another writer stored a message after acme's row, beta's
// next row is refused (the chain broke), and so is every later row until
// the chain is reset.
func TestSendChainTenantSwitchRefusedAfterForeignWrite(t *testing.T) {
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	_, pub := testenv.ConnectPublisher(t, url)
	_, other := testenv.ConnectPublisher(t, url)
	ctx := t.Context()
	a, err := pub.SendChain(ctx, chainRow("acme", "r1", 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Publish(ctx, snapshots.Subject("zeta", "rz", ""), "zeta-1", []byte(`{"sequence":1}`)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []agent.OutboxRow{chainRow("beta", "r2", 1), chainRow("beta", "r2", 2), chainRow("acme", "r1", 2)} {
		a, err := pub.SendChain(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Wait(ctx); !errors.Is(err, snapshots.ErrChainBroken) {
			t.Errorf("%s after a foreign write: %v, want the chain broken", r.EventID, err)
		}
	}
	info, err := mustStream(ctx, t, pub).Info(ctx)
	if err != nil || info.State.Msgs != 2 {
		t.Fatalf("stream %+v %v, want acme's row and zeta's only", info.State, err)
	}
	pub.ResetChain()
	a, err = pub.SendChain(ctx, chainRow("beta", "r2", 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Wait(ctx); err != nil {
		t.Fatalf("a new chain's first row: %v", err)
	}
}

func mustStream(ctx context.Context, t *testing.T, pub *natsbus.JetStreamPublisher) jetstream.Stream {
	t.Helper()
	st, err := pub.JetStream().Stream(ctx, snapshots.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
