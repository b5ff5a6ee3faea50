package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots/natstest"
	"github.com/screengraph/screengraph-agent/snapshots/pgtest"
)

// secretPieces reports every piece of secrets found in text: each secret
// whole and each of its 8-byte windows (no part may survive, not only the
// whole).
func secretPieces(text string, secrets ...string) []string {
	var found []string
	for _, s := range secrets {
		if strings.Contains(text, s) {
			found = append(found, s)
			continue
		}
		for i := 0; i+8 <= len(s); i++ {
			if strings.Contains(text, s[i:i+8]) {
				found = append(found, s[i:i+8])
				break
			}
		}
	}
	return found
}

// closedPort is a loopback port nothing listens on.
func closedPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p
}

// runBin runs the agent binary and returns stdout+stderr and its error.
func runBin(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(buildAgent(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestServeSecretsAfterUnescaping (issue 22 §3), through the real serve
// binary on a simulated device: an API token spelled with JSON escapes
// ("sgat\u005f…") in projectId or in the APK reference is refused and never
// stored; URL credentials holding quotes ("https://bob:Hunt'er2@…?token=ab'cd"
// and a ;jsessionid) in the APK reference and in projectId, spelled with
// escapes, leave no piece in the HTTP answers (submit, run, events, SSE,
// list), the CLI (`runs show|events`, json and text, through the API and
// the store), the NATS messages, the serve log or (projectId, the token)
// agent.db. A second daemon whose --nats-url password holds a quote says
// nothing of it in its log, /readyz or --print-config.
func TestServeSecretsAfterUnescaping(t *testing.T) {
	if testing.Short() {
		t.Skip("serve, a simulated device and a fetch that fails")
	}
	srv := simtest.StartADBServer(t)
	emu, _ := simtest.Launch(t, srv, simtest.Profile(t, "default"))
	srv.WaitState(t, emu.Serial(), "device", 10*time.Second)
	d := startDaemon(t, srv)

	nc, err := natstest.Dial(t, d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var published strings.Builder
	if _, err := nc.Conn.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		fmt.Fprintf(&published, "%s %s %v\n", m.Subject, m.Data, m.Header)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	nc.Conn.Flush()

	token := agent.TokenPrefix + "Q7fYw0pLk3TzR8mNc2VbX5sAe9GhJ1uDi4oK6qWyZtE"
	secrets := []string{"Hunt'er2", "ab'cdSECRET1", "JSESSIONSECRET", "Pr0j'ectPw", "PROJSESSIONID", token[len(agent.TokenPrefix):]}
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	port := strconv.Itoa(closedPort(t))
	// JSON escapes wherever a reader of the raw bytes would look.
	esc := strings.NewReplacer("_", `\u005f`, "'", `\u0027`, "@", `\u0040`, "/", `\/`, ":", `\u003a`, "=", `\u003d`).Replace
	body := func(project, ref string) string {
		return `{"projectId":"` + project + `","ensureDevice":{"deviceConfiguration":{"platformName":"android","deviceName":"` + emu.Serial() + `"}},` +
			`"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"` + appPkg + `","apkStorageObjectReference":"` + ref + `","expectedBuildSignatureSha256":"` + sha + `"}},` +
			`"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"` + appPkg + `"}},"waitIdle":{"idleHeuristicsConfiguration":{}}}`
	}
	post := func(b string) (int, string) {
		t.Helper()
		resp, err := http.Post(d.URL()+"/v1/runs", "application/json", strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	var shown []string
	see := func(where, text string) {
		t.Helper()
		if p := secretPieces(text, secrets...); len(p) > 0 {
			t.Errorf("%s holds %q:\n%s", where, p, text)
		}
		shown = append(shown, text)
	}

	// The escaped token: refused in projectId and inside the reference.
	for _, b := range []string{
		body(esc(token), "file://"+apk),
		body("p1", "https://localhost:"+port+"/app.apk?t="+esc(token)),
		body(`\u0073\u0067\u0061\u0074`+esc(token[4:]), "file://"+apk),
	} {
		code, answer := post(b)
		see("the answer to a token", answer)
		if code != http.StatusBadRequest || !strings.Contains(answer, "carries an API token") {
			t.Errorf("a request with an escaped token: %d %s", code, answer)
		}
	}

	ref := "https://bob:Hunt'er2@localhost:" + port + "/builds/app.apk?token=ab'cdSECRET1&x=1;jsessionid=JSESSIONSECRET"
	project := "https://carol:Pr0j'ectPw@projects.example/p;jsessionid=PROJSESSIONID"
	code, answer := post(body(esc(project), esc(ref)))
	see("the submit answer", answer)
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, answer)
	}
	var sub struct {
		RunID string `json:"runId"`
	}
	json.Unmarshal([]byte(answer), &sub)
	d.waitStatus(t, []string{sub.RunID}, 4*time.Minute, agent.RunFailed, agent.RunFinished)
	for _, p := range []string{"/v1/runs/" + sub.RunID, "/v1/runs/" + sub.RunID + "/events", "/v1/runs/" + sub.RunID + "/events?follow=1", "/v1/runs", "/v1/runs/" + sub.RunID + "/steps/1"} {
		resp, err := http.Get(d.URL() + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		see("GET "+p, string(b))
		if p == "/v1/runs/"+sub.RunID+"/events" {
			// Issue 22 §6: the fetch error says what failed, not where
			// localhost resolved to.
			if !strings.Contains(string(b), "connecting to localhost: connection refused") || strings.Contains(string(b), "127.0.0.1:"+port) || strings.Contains(string(b), "[::1]:"+port) {
				t.Errorf("the fetch failure should say \"connecting to localhost: connection refused\" and no address:\n%s", b)
			}
		}
	}
	for _, args := range [][]string{
		{"runs", "show", sub.RunID, "--server", d.URL(), "--output", "json"},
		{"runs", "show", sub.RunID, "--server", d.URL(), "--output", "text"},
		{"runs", "events", sub.RunID, "--server", d.URL(), "--output", "json"},
		{"runs", "show", sub.RunID, "--data-dir", d.dataDir, "--output", "json"},
		{"runs", "list", "--data-dir", d.dataDir, "--output", "json"},
	} {
		out, err := runBin(t, args...)
		if err != nil {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
		see(strings.Join(args[:2], " ")+" "+args[len(args)-1], out)
	}
	// The relay publishes the run's events: wait for its terminal one.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		msgs := published.String()
		mu.Unlock()
		if strings.Contains(msgs, agent.KindRunFailed) || strings.Contains(msgs, agent.KindRunFinished) {
			see("the NATS messages", msgs)
			if !strings.Contains(msgs, "projects.example") {
				t.Errorf("no NATS message carries the (redacted) projectId: the check proves nothing\n%s", msgs)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no terminal event published within 30 s:\n%s", msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	all := strings.Join(shown, "\n")
	if !strings.Contains(all, "localhost") || !strings.Contains(all, "/builds/app.apk") || !strings.Contains(all, agent.Redacted) {
		t.Error("nothing shown names the (redacted) reference: the checks prove nothing")
	}
	d.stop()
	logb, _ := os.ReadFile(filepath.Join(d.dataDir, "serve.log"))
	see("the serve log", string(logb))
	db, _ := os.ReadFile(filepath.Join(d.dataDir, "agent.db"))
	wal, _ := os.ReadFile(filepath.Join(d.dataDir, "agent.db-wal"))
	for _, s := range []string{token, "Pr0j'ectPw", "PROJSESSIONID"} {
		if bytes.Contains(db, []byte(s)) || bytes.Contains(wal, []byte(s)) {
			t.Errorf("agent.db holds %q", s)
		}
	}

	// --nats-url and --database-url with a quote in their passwords.
	natsURL := "nats://bob:Hunt'er2@127.0.0.1:" + strconv.Itoa(closedPort(t))
	for _, dsn := range []string{"postgres://u:pa'ssHunt'er2@db.example:5432/sg", "host=db.example user=u password='pa ss\\'Hunt\\'er2' dbname=sg"} {
		for _, format := range []string{"text", "json"} {
			out, err := runBin(t, "serve", "--data-dir", t.TempDir(), "--database-url", dsn, "--nats-url", natsURL, "--print-config", "--output", format)
			if err != nil {
				t.Errorf("--print-config %s: %v\n%s", dsn, err, out)
			}
			see("--print-config --output "+format, out)
			if !strings.Contains(out, "db.example") || !strings.Contains(out, "127.0.0.1") {
				t.Errorf("--print-config lost the readable part:\n%s", out)
			}
		}
	}
	d2 := startDaemon(t, srv, "--nats-url", natsURL)
	resp, err := http.Get(d2.URL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	see("/readyz", string(b))
	if !strings.Contains(string(b), "nats") {
		t.Errorf("/readyz shows no NATS check: %s", b)
	}
	d2.stop()
	logb, _ = os.ReadFile(filepath.Join(d2.dataDir, "serve.log"))
	see("the serve log with --nats-url", string(logb))
	if !strings.Contains(string(logb), "127.0.0.1") {
		t.Errorf("the log does not name the NATS server at all: the check proves nothing\n%s", logb)
	}
}

// keywordDSN is the keyword/value form of a pgtest URL, with a password
// holding a blank, quotes and a backslash (trust auth ignores it).
func keywordDSN(t testing.TB, url, password string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	q := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(password)
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable password='%s' connect_timeout=5", cfg.Host, cfg.Port, cfg.User, cfg.Database, q)
}

// TestKeywordDSNEverywhere (issue 23 §7): every command that takes
// --database-url accepts libpq's keyword/value form as well as the URL
// (serve, migrate, token create|list|revoke, nats-config, runs prune), and
// none prints the password, in either form, when the server cannot be
// reached.
func TestKeywordDSNEverywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("real Postgres")
	}
	pg, err := pgtest.Start("")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	url, err := pg.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const password = `s3 cr'et\Pa55`
	live := keywordDSN(t, url, password)
	cfg, _ := pgconn.ParseConfig(url)
	dead := strings.Replace(live, fmt.Sprintf("port=%d ", cfg.Port), fmt.Sprintf("port=%d ", closedPort(t)), 1)
	deadURL := fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable&connect_timeout=5", cfg.User, "s3cr%27et%5CPa55%20x", cfg.Host, closedPort(t), cfg.Database)
	pieces := []string{password, "s3 cr", "cr'et", `et\Pa55`, "s3cr%27et", "%5CPa55", `\'et`}
	leak := func(what, out string) {
		t.Helper()
		for _, p := range pieces {
			if strings.Contains(out, p) {
				t.Errorf("%s prints %q of the password:\n%s", what, p, out)
			}
		}
	}

	// Accepted: migrate, token create|list|revoke, nats-config, runs prune.
	out, err := runBin(t, "migrate", "--database-url", live)
	if err != nil {
		t.Fatalf("migrate with a keyword DSN: %v\n%s", err, out)
	}
	leak("migrate", out)
	out, err = runBin(t, "token", "create", "--tenant", "acme", "--output", "json", "--database-url", live)
	var ct tokenCreated
	if err != nil || json.Unmarshal([]byte(out), &ct) != nil || ct.ID == "" {
		t.Fatalf("token create with a keyword DSN: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"token", "list"}, {"nats-config", "--daemon-password", "d"}, {"runs", "prune", "--older-than", "720h"}, {"token", "revoke", ct.ID},
	} {
		out, err := runBin(t, append(args, "--database-url", live)...)
		if err != nil {
			t.Errorf("%v with a keyword DSN: %v\n%s", args, err, out)
		}
		leak(strings.Join(args, " "), out)
	}
	out, err = runBin(t, "serve", "--data-dir", t.TempDir(), "--database-url", live, "--print-config")
	if err != nil || !strings.Contains(out, "dbname=") {
		t.Errorf("serve --print-config with a keyword DSN: %v\n%s", err, out)
	}
	leak("serve --print-config", out)

	// Refused (nothing listens): no piece of the password, either form.
	for _, dsn := range []string{dead, deadURL} {
		for _, args := range [][]string{
			{"migrate"}, {"token", "list"}, {"token", "create", "--tenant", "acme"}, {"token", "revoke", ct.ID},
			{"nats-config", "--daemon-password", "d"}, {"runs", "prune", "--older-than", "720h"},
			{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--adb-server", "127.0.0.1:" + strconv.Itoa(closedPort(t))},
		} {
			for _, format := range []string{"text", "json"} {
				a := append(append([]string{}, args...), "--database-url", dsn)
				if args[0] != "nats-config" && args[0] != "token" || args[1] == "list" || args[1] == "create" {
					a = append(a, "--output", format)
				}
				out, err := runBin(t, a...)
				if err == nil {
					t.Errorf("%v succeeded without a server", a)
				}
				leak(fmt.Sprintf("%v", a), out)
			}
		}
	}
	// A string that is neither form is refused naming neither password.
	out, err = runBin(t, "serve", "--data-dir", t.TempDir(), "--database-url", "host=db password='"+`s3 cr\'et`, "--print-config")
	if err == nil || !strings.Contains(out, "not a Postgres connection string") {
		t.Errorf("an unterminated keyword DSN: %v\n%s", err, out)
	}
	leak("a broken keyword DSN", out)
}

// TestStoreDownAnswers503 (issue 23 §6): a fleet daemon (its
// --database-url in keyword form) whose Postgres is stopped answers every
// caller with a token (a tenant's, an admin's, an unknown one: none can be
// checked) 503 store_unavailable with Retry-After
// and nothing of the store (no address, port, user or database name); its
// log keeps the detail (a caller without a token gets 401, the store
// unasked). Once Postgres is back the same calls succeed.
func TestStoreDownAnswers503(t *testing.T) {
	if testing.Short() {
		t.Skip("real Postgres and serve")
	}
	pg, err := pgtest.Start("")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	url, err := pg.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dsn := keywordDSN(t, url, "pw")
	var tokens = map[string]string{}
	for name, args := range map[string][]string{"acme": {"--tenant", "acme"}, "admin": {"--tenant", "ops", "--admin"}} {
		out, err := runBin(t, append([]string{"token", "create", "--output", "json", "--database-url", dsn}, args...)...)
		var ct tokenCreated
		if err != nil || json.Unmarshal([]byte(out), &ct) != nil {
			t.Fatalf("token create: %v\n%s", err, out)
		}
		tokens[name] = ct.Token
	}
	srv := simtest.StartADBServer(t)
	d := startDaemon(t, srv, "--database-url", dsn)
	cfg, _ := pgconn.ParseConfig(url)
	store := []string{"127.0.0.1:" + strconv.Itoa(int(cfg.Port)), strconv.Itoa(int(cfg.Port)), "user=", "database=", cfg.Database, "failed to connect"}
	call := func(tok, method, path string) (int, string, http.Header) {
		t.Helper()
		var rd io.Reader
		if method == "POST" {
			rd = strings.NewReader(`{"ensureDevice":{"deviceConfiguration":{"deviceName":"emulator-5554"}}}`)
		}
		req, _ := http.NewRequest(method, d.URL()+path, rd)
		if rd != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	if code, b, _ := call(tokens["acme"], "GET", "/v1/runs"); code != 200 {
		t.Fatalf("GET /v1/runs with Postgres up: %d %s", code, b)
	}
	if err := pg.StopServer("fast"); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", tokens["acme"], tokens["admin"], "sgat_unknown"} {
		for _, rq := range [][2]string{{"GET", "/v1/runs"}, {"GET", "/v1/runs/01JBD0QJ8K9M2N3P4Q5R6S7T8V"}, {"POST", "/v1/runs"}, {"GET", "/v1/devices"}} {
			code, b, h := call(tok, rq[0], rq[1])
			who := "no token"
			if tok != "" {
				who = "token " + tok[:8]
			}
			if tok == "" {
				// No token to look up: 401 without asking the store.
				if code != http.StatusUnauthorized {
					t.Errorf("%s %s (no token) with Postgres down: %d %s", rq[0], rq[1], code, b)
				}
			} else if code != http.StatusServiceUnavailable || !strings.Contains(b, `"error_id":"store_unavailable"`) || h.Get("Retry-After") == "" {
				t.Errorf("%s %s (%s) with Postgres down: %d %v %s", rq[0], rq[1], who, code, h, b)
			}
			for _, s := range store {
				if strings.Contains(b, s) {
					t.Errorf("%s %s (%s) names the store (%q): %s", rq[0], rq[1], who, s, b)
				}
			}
		}
	}
	if log := d.log(); !strings.Contains(log, "failed to connect") || !strings.Contains(log, strconv.Itoa(int(cfg.Port))) {
		t.Errorf("the log lost the store's detail:\n%s", log)
	}
	if err := pg.StartServer(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, b, _ := call(tokens["acme"], "GET", "/v1/runs")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/runs 30 s after Postgres came back: %d %s", code, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
