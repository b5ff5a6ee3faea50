package nodes_test

import (
	"context"
	"slices"
	"testing"

	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/nodes"
)

// The keys are the ones daemons already wrote (a changed key would lose
// every remembered session and verification at the upgrade): checked
// byte for byte, with the server's URL never in the key.
func TestStoreSessions(t *testing.T) {
	ctx := context.Background()
	st := agenttest.NewStore()
	a := nodes.StoreSessions{KV: st, Server: "http://user:secret@127.0.0.1:4723"}
	b := nodes.StoreSessions{KV: st, Server: "http://127.0.0.1:4724"}
	if id, err := a.Get(ctx, "emulator-5554"); err != nil || id != "" {
		t.Fatalf("Get before Put = %q, %v", id, err)
	}
	if err := a.Put(ctx, "emulator-5554", "sess-1"); err != nil {
		t.Fatal(err)
	}
	if id, err := a.Get(ctx, "emulator-5554"); err != nil || id != "sess-1" {
		t.Errorf("Get = %q, %v", id, err)
	}
	// Another Appium server does not know the session.
	if id, err := b.Get(ctx, "emulator-5554"); err != nil || id != "" {
		t.Errorf("another server's Get = %q, %v", id, err)
	}
	raw, err := st.GetKV(ctx, "appium/session/fefbc741e5d3/emulator-5554")
	if err != nil || string(raw) != "sess-1" {
		t.Errorf("stored under another key: %q, %v", raw, err)
	}
	if err := a.Forget(ctx, "emulator-5554"); err != nil {
		t.Fatal(err)
	}
	if id, err := a.Get(ctx, "emulator-5554"); err != nil || id != "" {
		t.Errorf("Get after Forget = %q, %v", id, err)
	}
}

func TestStoreVerifications(t *testing.T) {
	ctx := context.Background()
	st := agenttest.NewStore()
	v := &nodes.StoreVerifications{KV: st}
	key := nodes.VerificationKey{Serial: "emulator-5554", Package: "com.example.app", VersionCode: 42,
		LastUpdateTime: "2024-05-01 10:11:12", CodePath: "/data/app/com.example.app-1"}
	if s, ok, err := v.Get(ctx, key); err != nil || ok || s != nil {
		t.Fatalf("Get before Put = %v, %v, %v", s, ok, err)
	}
	if err := v.Put(ctx, key, []string{"ab12", "cd34"}); err != nil {
		t.Fatal(err)
	}
	if s, ok, err := v.Get(ctx, key); err != nil || !ok || !slices.Equal(s, []string{"ab12", "cd34"}) {
		t.Errorf("Get = %v, %v, %v", s, ok, err)
	}
	const stored = `provision/verified/{"serial":"emulator-5554","packageId":"com.example.app","versionCode":42,"lastUpdateTime":"2024-05-01 10:11:12","codePath":"/data/app/com.example.app-1"}`
	if raw, err := st.GetKV(ctx, stored); err != nil || string(raw) != `["ab12","cd34"]` {
		t.Errorf("stored under another key or shape: %q, %v", raw, err)
	}
	// Another build of the package: no record.
	key.VersionCode = 43
	if _, ok, err := v.Get(ctx, key); err != nil || ok {
		t.Errorf("Get of another build = %v, %v", ok, err)
	}
	// A value that does not decode counts as none (read by a process that
	// did not record it).
	if err := st.PutKV(ctx, stored, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	key.VersionCode = 42
	if _, ok, err := (&nodes.StoreVerifications{KV: st}).Get(ctx, key); err != nil || ok {
		t.Errorf("Get of a garbled record = %v, %v", ok, err)
	}
}

// countingKV counts the store reads of a KV.
type countingKV struct {
	nodes.KV
	reads int
}

func (c *countingKV) GetKV(ctx context.Context, key string) ([]byte, error) {
	c.reads++
	return c.KV.GetKV(ctx, key)
}

// A record read or put is answered from memory afterwards (a build's
// signers never change); a key without one is read from the store each
// time, so a record another process adds is found.
func TestStoreVerificationsRemembers(t *testing.T) {
	ctx := context.Background()
	st := &countingKV{KV: agenttest.NewStore()}
	key := nodes.VerificationKey{Serial: "emulator-5554", Package: "com.example.app", VersionCode: 42,
		LastUpdateTime: "2024-05-01 10:11:12", CodePath: "/data/app/com.example.app-1"}
	writer := &nodes.StoreVerifications{KV: st} // another process, sharing the store
	v := &nodes.StoreVerifications{KV: st}
	for range 2 {
		if _, ok, err := v.Get(ctx, key); err != nil || ok {
			t.Fatalf("Get before Put = %v, %v", ok, err)
		}
	}
	if st.reads != 2 {
		t.Errorf("%d store reads for a key without a record, want 2 (one per Get)", st.reads)
	}
	if err := writer.Put(ctx, key, []string{"ab12"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s, ok, err := v.Get(ctx, key)
		if err != nil || !ok || !slices.Equal(s, []string{"ab12"}) {
			t.Fatalf("Get = %v, %v, %v", s, ok, err)
		}
		s[0] = "changed by the caller"
	}
	if st.reads != 3 {
		t.Errorf("%d store reads, want 3: a record found is remembered", st.reads)
	}
	key2 := key
	key2.CodePath = "/data/app/com.example.app-2"
	if err := v.Put(ctx, key2, []string{"cd34"}); err != nil {
		t.Fatal(err)
	}
	if s, ok, err := v.Get(ctx, key2); err != nil || !ok || !slices.Equal(s, []string{"cd34"}) || st.reads != 3 {
		t.Errorf("Get after Put = %v, %v, %v (%d reads, want 3)", s, ok, err, st.reads)
	}
}
