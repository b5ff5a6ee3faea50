package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/httpapitest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// echoNode is the graph's only node: it echoes every string of the run's
// input in progress lines and fails naming the APK reference, as a fetch
// error does, so whatever a request carries reaches events and messages.
type echoNode struct{}

func (echoNode) Name() string { return "Fetch" }

func (echoNode) Run(_ context.Context, in agent.NodeInput) agent.NodeResult {
	var v any
	json.Unmarshal(in.Run.Input, &v)
	var deltas []agent.TokenDelta
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			deltas = append(deltas, agent.TokenDelta{Kind: "log", Text: "input " + x})
		case map[string]any:
			for k, e := range x {
				deltas = append(deltas, agent.TokenDelta{Kind: "log", Text: "key " + k})
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	ref := nodes.ArtifactRef(in.Run)
	return agent.NodeResult{Output: &agenttest.Output{Echo: ref, Detail: map[string]any{"ref": ref, "serial": in.Run.Serial, "project": in.Run.ProjectID}},
		Deltas: deltas,
		Err:    agent.Errorf(agent.ErrArtifactUnavailable, "fetching %q for %s (project %s): refused", ref, in.Run.Serial, in.Run.ProjectID)}
}

// secretsEnv is the API over a real service, engine and embedded store,
// with the setup graph's request decoding (nodes.NewSetupRun) and every log
// line of the API and the service kept.
type secretsEnv struct {
	url   string
	store *sqlite.Store
	mu    sync.Mutex
	logs  strings.Builder
}

func (e *secretsEnv) logf(format string, args ...any) {
	e.mu.Lock()
	fmt.Fprintf(&e.logs, format+"\n", args...)
	e.mu.Unlock()
}

func newSecretsEnv(t testing.TB) *secretsEnv {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &secretsEnv{store: st}
	prepare := servicetest.Prepare(func(_ context.Context, runID string, body []byte) (agent.Run, error) {
		run, err := nodes.NewSetupRun(runID, body, "", 1)
		run.Graph = "test"
		return run, err
	})
	srv := httpapitest.Start(t, httpapitest.Config{Store: st, Node: echoNode{}, Prepare: prepare, Plain: true,
		Service: func(c *service.Config) {
			c.Devices = hostDevices{"emulator-5554"}
			c.Logf = e.logf
		},
		API: func(c *httpapi.Config) { c.Logf = e.logf }})
	e.url = srv.URL
	return e
}

func (e *secretsEnv) do(t testing.TB, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.url+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// secretFields are the string fields of a run request a secret is put in:
// {ref} is replaced by the (encoded) string.
var secretFields = []string{
	`"projectId":{ref}`,
	`"ensureDevice":{"deviceConfiguration":{"deviceName":{ref}}}`,
	`"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app","apkStorageObjectReference":{ref}}}`,
	`"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":{ref}}}`,
	`"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app","androidLaunchActivityName":{ref}}}`,
	`"waitIdle":{"idleHeuristicsConfiguration":{},"note":{ref}}`,
}

// runRequest is a run request with s (JSON-encoded by spell) in field.
func runRequest(field int, s string, spell int) string {
	fields := map[string]string{
		"projectId":      `"projectId":"p1"`,
		"ensureDevice":   `"ensureDevice":{"deviceConfiguration":{"deviceName":"emulator-5554"}}`,
		"provisionApp":   `"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app","apkStorageObjectReference":"https://artifacts.example.com/app.apk"}}`,
		"launchOrAttach": `"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}}`,
	}
	f := strings.Replace(secretFields[field%len(secretFields)], "{ref}", jsonSpelling(s, spell), 1)
	key := f[1 : strings.Index(f[1:], `"`)+1]
	fields[key] = f
	var parts []string
	for _, k := range []string{"projectId", "ensureDevice", "provisionApp", "launchOrAttach", "waitIdle"} {
		if v, ok := fields[k]; ok {
			parts = append(parts, v)
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// jsonSpelling encodes s as a JSON string: 0 as encoding/json does, 1 with
// every byte a \u escape, 2 with '_', '@', ':', '/' and '=' escaped (and
// '/' as "\/"), 3 with every other letter escaped.
func jsonSpelling(s string, spell int) string {
	plain, _ := json.Marshal(s)
	switch spell % 4 {
	case 1:
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range s {
			if r > 0xffff {
				return string(plain)
			}
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		return b.String() + `"`
	case 2:
		return strings.NewReplacer("_", `\u005f`, "@", `\u0040`, ":", `\u003a`, "/", `\/`, "=", `\u003D`).Replace(string(plain))
	case 3:
		var b strings.Builder
		inner := string(plain[1 : len(plain)-1])
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			if c == '\\' && i+1 < len(inner) { // keep encoding/json's escapes whole
				b.WriteString(inner[i : i+2])
				i++
				continue
			}
			if ('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') && i%2 == 0 {
				fmt.Fprintf(&b, `\u%04X`, c)
				continue
			}
			b.WriteByte(c)
		}
		return `"` + b.String() + `"`
	}
	return string(plain)
}

// secretOf maps fuzz bytes to a secret of kind: 0 an API token, 1 a URL
// password, 2 a signed-URL query value, 3 a ;jsessionid value. Passwords
// take any printable ASCII a URL's userinfo may hold once parsed, quotes
// included; values stop where a parameter does ('&', ';', '#').
func secretOf(kind int, raw []byte) (secret, value string) {
	const tokenChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	const passChars = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789'\"!$&()*+,;=:~-._"
	const valueChars = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789'\"!$()*+,=:~-._/?"
	pick := func(chars string, n int) string {
		b := make([]byte, n)
		for i := range b {
			c := byte(i * 7)
			if i < len(raw) {
				c = raw[i]
			}
			b[i] = chars[int(c)%len(chars)]
		}
		// Start and end with a letter: a secret is what its owner typed,
		// not where prose punctuation would end it.
		b[0], b[n-1] = 'Q', 'z'
		return string(b)
	}
	switch kind % 4 {
	case 0:
		tok := agent.TokenPrefix + pick(tokenChars, 43)
		return tok, tok
	case 1:
		p := pick(passChars, 12+len(raw)%12)
		return p, "https://bob:" + p + "@artifacts.example.com/builds/app.apk?x=1"
	case 2:
		v := pick(valueChars, 12+len(raw)%12)
		return v, "https://artifacts.example.com/app.apk?X-Amz-Date=20250101T000000Z&token=" + v + "&v=2"
	default:
		v := pick(valueChars, 12+len(raw)%12)
		return v, "https://artifacts.example.com/app.apk;jsessionid=" + v
	}
}

// leaks reports the first 8-byte piece of secret found in text ("" when
// none): none of the secret's bytes may survive, not only the whole.
func leaks(text, secret string) string {
	const w = 8
	for i := 0; i+w <= len(secret); i++ {
		if strings.Contains(text, secret[i:i+w]) {
			return secret[i : i+w]
		}
	}
	return ""
}

// checkRequestSecret submits a run request holding secret (in value, in
// field, spelled spell) and checks that no answer, event, stored envelope
// or log line holds a piece of it; an API token is refused outright and
// never stored.
func checkRequestSecret(t *testing.T, e *secretsEnv, field, spell, kind int, raw []byte) {
	secret, value := secretOf(kind, raw)
	body := runRequest(field, value, spell)
	var seen []string
	see := func(where, text string) {
		t.Helper()
		if p := leaks(text, secret); p != "" {
			t.Fatalf("%s holds %q of the secret %q (request %s):\n%s", where, p, secret, body, text)
		}
		seen = append(seen, text)
	}
	code, answer := e.do(t, "POST", "/v1/runs", body)
	see("the submit answer", answer)
	if kind%4 == 0 && code != http.StatusBadRequest {
		t.Fatalf("a request carrying an API token (%s): %d %s", body, code, answer)
	}
	if code == http.StatusAccepted {
		var resp httpapi.SubmitResponse
		if err := json.Unmarshal([]byte(answer), &resp); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			run, err := e.store.GetRun(context.Background(), agent.Admin(), resp.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if run.Status.Terminal() {
				see("the stored projectId", run.ProjectID)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s still %s", resp.RunID, run.Status)
			}
			time.Sleep(5 * time.Millisecond)
		}
		for _, p := range []string{"/v1/runs/" + resp.RunID, "/v1/runs/" + resp.RunID + "/events", "/v1/runs/" + resp.RunID + "/events?follow=1", "/v1/runs"} {
			_, b := e.do(t, "GET", p, "")
			see("GET "+p, b)
		}
		evs, err := e.store.Events(context.Background(), agent.Admin(), resp.RunID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			t.Fatal("no events")
		}
		for _, ev := range evs {
			b, _ := json.Marshal(ev) // the envelope the relay publishes
			see("stored event "+ev.Kind, string(b))
		}
	} else if code != http.StatusBadRequest {
		t.Fatalf("submit: %d %s", code, answer)
	}
	e.mu.Lock()
	logs := e.logs.String()
	e.mu.Unlock()
	see("the logs", logs)
	if !strings.Contains(strings.Join(seen, "\n"), "<REDACTED>") && code == http.StatusAccepted {
		t.Fatalf("nothing shown was redacted: the secret went nowhere (request %s)", body)
	}
}

// FuzzRunRequestSecrets: for any run request holding an API token or URL
// credentials (userinfo password, signed-URL query value, ;jsessionid) in
// any of its string fields, under any JSON spelling, no piece of the secret
// appears in the HTTP answers (submit, run, events, SSE, list), the stored
// event envelopes (what the relay publishes to NATS) or the logs.
func FuzzRunRequestSecrets(f *testing.F) {
	for field := range secretFields {
		for spell := range 4 {
			for kind := range 4 {
				f.Add(uint8(field), uint8(spell), uint8(kind), []byte(fmt.Sprintf("seed%d%d%d'\"x", field, spell, kind)))
			}
		}
	}
	e := newSecretsEnv(f)
	f.Fuzz(func(t *testing.T, field, spell, kind uint8, raw []byte) {
		if len(raw) > 64 {
			raw = raw[:64]
		}
		checkRequestSecret(t, e, int(field), int(spell), int(kind), raw)
	})
}
