package agent

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testdata/jcs holds the RFC 8785 test vectors as published with the
// reference implementation (cyberphone/json-canonicalization, copied from
// github.com/gowebpki/jcs v1.0.1 testdata, Apache-2.0): input/X.json must
// canonicalize to output/X.json, whose bytes outhex/X.txt spells in hex.
// values.json is RFC 8785 section 3.2.2's example, weird.json section 3.2.3's.
func TestCanonicalJSONRFC8785Vectors(t *testing.T) {
	inputs, err := filepath.Glob("testdata/jcs/input/*.json")
	if err != nil || len(inputs) < 9 {
		t.Fatalf("vectors: %v (%d files)", err, len(inputs))
	}
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata/jcs/output", name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := CanonicalJSON(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
			hx, err := os.ReadFile(filepath.Join("testdata/jcs/outhex", strings.TrimSuffix(name, ".json")+".txt"))
			if err == nil {
				wantBytes, err := hex.DecodeString(strings.Join(strings.Fields(string(hx)), ""))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, wantBytes) {
					t.Fatalf("bytes differ from outhex: % x", got)
				}
			}
			// Canonicalization is idempotent.
			again, err := CanonicalJSON(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("not idempotent: %s %v", again, err)
			}
		})
	}
}

func TestCanonicalJSONRejects(t *testing.T) {
	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":}`, `{"a\q":1}`, `[1,]`, ``, `{} x`} {
		if out, err := CanonicalJSON([]byte(bad)); err == nil {
			t.Errorf("%q: accepted as %q", bad, out)
		}
	}
}

// The layout of ChecksumInput is a published contract; this vector was
// computed with coreutils: printf '%s' '<input>' | sha256sum.
func TestChecksumVector(t *testing.T) {
	payload := json.RawMessage(`{ "c": [1E30, 4.50], "b": 1, "a": "x" }`)
	in, err := ChecksumInput("01ARZ3NDEKTSV4RRFFQ69G5FAV", "01BX5ZZKBKACTAV9WEVGEMMVRZ", 42, "agent.node.finished", payload)
	if err != nil {
		t.Fatal(err)
	}
	const wantIn = `01ARZ3NDEKTSV4RRFFQ69G5FAV|01BX5ZZKBKACTAV9WEVGEMMVRZ|42|agent.node.finished|{"a":"x","b":1,"c":[1e+30,4.5]}`
	if string(in) != wantIn {
		t.Fatalf("input\n got %s\nwant %s", in, wantIn)
	}
	sum, err := Checksum("01ARZ3NDEKTSV4RRFFQ69G5FAV", "01BX5ZZKBKACTAV9WEVGEMMVRZ", 42, "agent.node.finished", payload)
	if err != nil {
		t.Fatal(err)
	}
	if sum != "4fbfb36fc47e34c5cadbcce2877d37ab1345762530038c3d341de87059769f8d" {
		t.Fatalf("checksum %s", sum)
	}
}

type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time { c.t = c.t.Add(time.Millisecond / 2); return c.t }

func TestNewEventSealsAndVerifies(t *testing.T) {
	clk := &stepClock{t: time.Date(2025, 10, 23, 12, 0, 0, 0, time.FixedZone("CEST", 2*3600))}
	ids := NewULIDs(clk, rand.New(rand.NewSource(1)))
	run := Run{RunID: "01BX5ZZKBKACTAV9WEVGEMMVRZ", TenantID: "01HZX0TENANT1234567890", ProjectID: "01HZX0PROJECT12345678"}
	e, err := NewEvent(run, 7, KindNodeStarted, map[string]any{"z": 1, "a": "<b>&"}, clk, ids)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Payload) != `{"a":"<b>&","z":1}` {
		t.Fatalf("payload not canonical: %s", e.Payload)
	}
	if e.TS != "2025-10-23T10:00:00.001Z" || e.Version != "1" || e.TenantID != run.TenantID || e.ProjectID != run.ProjectID {
		t.Fatalf("envelope %+v", e)
	}
	if len(e.EventID) != 26 || len(e.Checksum) != 64 {
		t.Fatalf("ids %q %q", e.EventID, e.Checksum)
	}
	if err := VerifyChecksum(e); err != nil {
		t.Fatal(err)
	}
	for _, mutate := range []func(*Event){
		func(e *Event) { e.Sequence++ },
		func(e *Event) { e.Kind = KindNodeFinished },
		func(e *Event) { e.EventID = "01ARZ3NDEKTSV4RRFFQ69G5FAV" },
		func(e *Event) { e.RunID = "x" },
		func(e *Event) { e.Payload = json.RawMessage(`{"a":"<b>&","z":2}`) },
	} {
		m := e
		mutate(&m)
		if err := VerifyChecksum(m); err == nil {
			t.Errorf("mutation not detected: %+v", m)
		}
	}
	// Re-encoding the payload (other key order, whitespace) keeps the checksum.
	m := e
	m.Payload = json.RawMessage("{ \"z\": 1.0, \"a\": \"\\u003cb\\u003e\\u0026\" }")
	if err := VerifyChecksum(m); err != nil {
		t.Fatalf("reordered payload: %v", err)
	}
}

func TestULIDsMonotonicOnStandingClock(t *testing.T) {
	clk := fixedClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	ids := NewULIDs(clk, rand.New(rand.NewSource(2)))
	prev := ""
	for i := 0; i < 1000; i++ {
		id := ids.NewID()
		if id <= prev {
			t.Fatalf("id %d %s not after %s", i, id, prev)
		}
		prev = id
	}
}

func TestSeeds(t *testing.T) {
	r := Run{RunID: "01BX5ZZKBKACTAV9WEVGEMMVRZ"}
	s1, s2 := RunSeed(r), RunSeed(r)
	if s1 != s2 || s1 < 0 || s1 > MaxSafeInteger {
		t.Fatalf("run seed %d %d", s1, s2)
	}
	if RunSeed(Run{RunID: "other"}) == s1 {
		t.Fatal("seed does not depend on runId")
	}
	r.Input = json.RawMessage(`{"randomSeed": 987654}`)
	if RunSeed(r) != 987654 {
		t.Fatalf("explicit seed ignored: %d", RunSeed(r))
	}
	r.Input = json.RawMessage(`{"randomSeed": 1e300}`)
	if RunSeed(r) != s1 {
		t.Fatal("out-of-range seed not ignored")
	}
	a, b := StepSeed(5, 0, "EnsureDevice"), StepSeed(5, 1, "EnsureDevice")
	if a == b || a != StepSeed(5, 0, "EnsureDevice") || a > MaxSafeInteger || a < 0 {
		t.Fatalf("step seeds %d %d", a, b)
	}
}

// TestNewEventCanonicalizesOnce: an event NewEvent made is canonicalized once
// in all, though the store verifies it (VerifyChecksum) after the engine
// sealed it; an event re-encoded, changed or sealed long ago (evicted from
// the memo) is still verified in full.
func TestNewEventCanonicalizesOnce(t *testing.T) {
	clk := &stepClock{t: time.Date(2025, 10, 23, 12, 0, 0, 0, time.UTC)}
	ids := NewULIDs(clk, rand.New(rand.NewSource(2)))
	run := Run{RunID: "01BX5ZZKBKACTAV9WEVGEMMVRZ", TenantID: "01HZX0TENANT1234567890"}
	before := canonicalCalls.Load()
	e, err := NewEvent(run, 1, KindNodeFinished, map[string]any{"nodeName": "WaitIdle", "n": 1.5e3}, clk, ids)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyChecksum(e); err != nil {
		t.Fatal(err)
	}
	if n := canonicalCalls.Load() - before; n != 1 {
		t.Fatalf("NewEvent + VerifyChecksum canonicalized %d times, want 1", n)
	}
	// The checksum is the contract's (ChecksumInput over the canonical payload).
	if want, _ := Checksum(e.EventID, e.RunID, e.Sequence, e.Kind, e.Payload); want != e.Checksum {
		t.Fatalf("checksum %s, contract says %s", e.Checksum, want)
	}
	// Re-encoded payload: the full path, still valid.
	m := e
	m.Payload = json.RawMessage(`{ "n": 1500.0, "nodeName": "WaitIdle" }`)
	before = canonicalCalls.Load()
	if err := VerifyChecksum(m); err != nil {
		t.Fatalf("re-encoded payload: %v", err)
	}
	if n := canonicalCalls.Load() - before; n != 1 {
		t.Fatalf("re-encoded payload verified with %d transforms, want 1 (the full path)", n)
	}
	// A payload whose raw bytes hash to a remembered checksum only when they
	// are the sealed ones: another value is a mismatch.
	m.Payload = json.RawMessage(`{"n":1501,"nodeName":"WaitIdle"}`)
	if err := VerifyChecksum(m); !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("changed payload: %v", err)
	}
	// Evicted from the memo: verified in full, still valid.
	for i := range sealedMemo {
		if _, err := NewEvent(run, int64(2+i), KindNodeStarted, nil, clk, ids); err != nil {
			t.Fatal(err)
		}
	}
	if sealed.has(e.Checksum) {
		t.Fatal("memo kept more than sealedMemo checksums")
	}
	before = canonicalCalls.Load()
	if err := VerifyChecksum(e); err != nil {
		t.Fatal(err)
	}
	if n := canonicalCalls.Load() - before; n != 1 {
		t.Fatalf("evicted event verified with %d transforms, want 1", n)
	}
}

// BenchmarkEventSealVerify: one event made (NewEvent) and verified as the
// store does (VerifyChecksum), side by side with the cost before NewEvent
// canonicalized once (its payload transformed again by Seal, then by a full
// verification): an agent.node.finished-sized payload.
func BenchmarkEventSealVerify(b *testing.B) {
	clk := SystemClock{}
	ids := NewULIDs(clk, nil)
	run := Run{RunID: "01BX5ZZKBKACTAV9WEVGEMMVRZ", TenantID: "01HZX0TENANT1234567890"}
	out := map[string]any{"nodeName": "WaitIdle", "stepOrdinal": 3, "durationMillis": 35, "status": "SUCCEEDED",
		"output": map[string]any{"runId": run.RunID, "uiStabilityAssessment": map[string]any{"quietWindowObservedMillis": 612, "networkInFlightStatus": "NONE"},
			"nodeName": "WaitIdle", "success": true, "humanReadableFailureSummary": "", "errorId": nil}}
	for _, bc := range []struct {
		name string
		seal func(e *Event) error
		ver  func(e Event) error
	}{
		{"three-transforms-before", func(e *Event) error { return e.Seal() }, func(e Event) error {
			sum, err := Checksum(e.EventID, e.RunID, e.Sequence, e.Kind, e.Payload)
			if err == nil && sum != e.Checksum {
				err = ErrChecksumMismatch
			}
			return err
		}},
		{"one-transform", func(*Event) error { return nil }, VerifyChecksum},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e, err := NewEvent(run, 1, KindNodeFinished, out, clk, ids)
				if err == nil {
					err = bc.seal(&e)
				}
				if err == nil {
					err = bc.ver(e)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
