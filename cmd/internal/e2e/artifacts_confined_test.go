package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/fixtures"
)

// acceptCounter counts the connections a listener accepted.
type acceptCounter struct {
	net.Listener
	n *atomic.Int32
}

func (l acceptCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// tlsServerOn starts an https server on ip (a loopback address) with a
// certificate for that address, counting accepted connections; it returns
// the server and its certificate in PEM.
func tlsServerOn(t *testing.T, ip string, h http.Handler, accepts *atomic.Int32) (*httptest.Server, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: ip},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP(ip)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("cannot listen on %s (all of 127.0.0.0/8 is loopback on Linux): %v", ip, err)
	}
	s := httptest.NewUnstartedServer(h)
	s.Listener = acceptCounter{l, accepts}
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestServeArtifactFetchConfined drives the serve binary with API tokens:
// file:// outside the roots, https to loopback spelled several ways, a
// redirect from the allowed server to a refused one, an endless body and a
// zip bomb APK are each refused at submission (400) or fail their run once
// with the rule's code; no connection reaches the refused server, nothing
// lands in the cache but what was allowed, the daemon stays healthy.
func TestServeArtifactFetchConfined(t *testing.T) {
	slow(t, "chains through Appium with artifact servers")
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	apkPath, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	apkBytes, err := os.ReadFile(apkPath)
	if err != nil {
		t.Fatal(err)
	}
	sha := signerDigest(t, apkPath)
	var bomb bytes.Buffer
	if err := fixtures.ZipBomb(&bomb, "resources.arsc", 1<<30, 1000); err != nil {
		t.Fatal(err)
	}

	// The refused server: loopback 127.0.0.1, which the daemon may not reach.
	var refusedAccepts, allowedAccepts atomic.Int32
	refused, refusedPEM := tlsServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(apkBytes) }), &refusedAccepts)
	rport := strconv.Itoa(refused.Listener.Addr().(*net.TCPAddr).Port)
	// The allowed server: 127.0.0.3, listed in --artifact-allow-cidr.
	allowed, allowedPEM := tlsServerOn(t, "127.0.0.3", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/app.apk":
			w.Write(apkBytes)
		case "/to-refused.apk":
			http.Redirect(w, r, "https://127.0.0.1:"+rport+"/app.apk", http.StatusFound)
		case "/endless.apk":
			chunk := bytes.Repeat([]byte{'A'}, 64<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/bomb.apk":
			w.Write(bomb.Bytes())
		}
	}), &allowedAccepts)
	aurl := allowed.URL
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, append(refusedPEM, allowedPEM...), 0o600)

	d := startDaemonEnv(t, srv, []string{"SSL_CERT_FILE=" + caFile},
		"--artifact-allow-cidr", "127.0.0.3/32", "--artifact-max-bytes", "16MiB")
	out, err := exec.Command(buildAgent(t), "token", "create", "--data-dir", d.dataDir, "--tenant", "ops", "--admin", "--output", "json").Output()
	var tok tokenCreated
	if err != nil || json.Unmarshal(out, &tok) != nil {
		t.Fatalf("token create: %v %s", err, out)
	}
	call := func(method, path string, body any) (int, string) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, d.URL()+path, r)
		if r != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	submit := func(ref string) (int, string) {
		return call("POST", "/v1/runs", runBody(emu.Serial(), ref, sha, "ALWAYS_REINSTALL", "", nil))
	}
	// finish submits ref and waits for its run to end; it returns the
	// status and the run's events.
	finish := func(ref string) (string, string) {
		t.Helper()
		st, body := submit(ref)
		var resp struct {
			RunID string `json:"runId"`
		}
		if st != http.StatusAccepted || json.Unmarshal([]byte(body), &resp) != nil {
			t.Fatalf("submit %s: %d %s", ref, st, body)
		}
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			_, rb := call("GET", "/v1/runs/"+resp.RunID, nil)
			var v struct {
				Status string `json:"status"`
			}
			json.Unmarshal([]byte(rb), &v)
			if v.Status == "FINISHED" || v.Status == "FAILED" || v.Status == "CANCELED" {
				_, evs := call("GET", "/v1/runs/"+resp.RunID+"/events", nil)
				return v.Status, evs
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("run of %s did not end", ref)
		return "", ""
	}

	// Refused at submission: numeric host spellings (never looked up).
	for _, host := range []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1"} {
		st, body := submit("https://" + host + ":" + rport + "/app.apk")
		if st != http.StatusBadRequest || !strings.Contains(body, "invalid_request_error") {
			t.Errorf("%s: %d %s", host, st, body)
		}
	}

	// The allowed server works.
	if st, evs := finish(aurl + "/app.apk"); st != "FINISHED" {
		t.Fatalf("allowed download: %s\n%s", st, evs)
	}
	passwd, _ := os.ReadFile("/etc/passwd")
	passwdSum := sha256.Sum256(passwd)
	for _, c := range []struct{ ref, code string }{
		{"file:///etc/passwd", "ARTIFACT_FILE_OUTSIDE_ROOTS"},
		{"file://" + filepath.Join(filepath.Dir(apkPath), "..", "..", "go.mod"), "ARTIFACT_FILE_OUTSIDE_ROOTS"},
		{"file://" + filepath.Join(filepath.Dir(apkPath), "missing.apk"), "ARTIFACT_FILE_OUTSIDE_ROOTS"},
		{"https://127.0.0.1:" + rport + "/app.apk", "ARTIFACT_DESTINATION_REFUSED"},
		{"https://[::1]:" + rport + "/app.apk", "ARTIFACT_DESTINATION_REFUSED"},
		{"https://[::ffff:127.0.0.1]:" + rport + "/app.apk", "ARTIFACT_DESTINATION_REFUSED"},
		{"https://localhost:" + rport + "/app.apk", "ARTIFACT_DESTINATION_REFUSED"},
		{"https://169.254.169.254/latest/meta-data/", "ARTIFACT_DESTINATION_REFUSED"},
		{aurl + "/to-refused.apk", "ARTIFACT_DESTINATION_REFUSED"},
		{aurl + "/endless.apk", "ARTIFACT_TOO_LARGE"},
		{aurl + "/bomb.apk", "APK_ENTRY_TOO_LARGE"},
	} {
		st, evs := finish(c.ref)
		if st != "FAILED" || !strings.Contains(evs, c.code) {
			t.Errorf("%s: %s, want FAILED with %s\n%s", c.ref, st, c.code, evs)
		}
		if strings.Contains(evs, hex.EncodeToString(passwdSum[:])) || strings.Contains(evs, strconv.Itoa(len(passwd))+" bytes") {
			t.Errorf("%s: events tell the refused file's digest or size", c.ref)
		}
		if n := strings.Count(evs, `"agent.node.started"`); st == "FAILED" && n > 2 {
			t.Errorf("%s: %d node attempts; a refusal fails once", c.ref, n)
		}
	}
	if n := refusedAccepts.Load(); n != 0 {
		t.Errorf("the refused server accepted %d connections", n)
	}
	// Nothing in the cache but the allowed artifact and the (refused) bomb's bytes.
	cache := filepath.Join(d.dataDir, "artifacts")
	if ents, _ := os.ReadDir(filepath.Join(cache, "tmp")); len(ents) > 1 { // index.json's temp file is renamed away
		t.Errorf("artifact tmp/ holds %d entries", len(ents))
	}
	ents, _ := os.ReadDir(filepath.Join(cache, "sha256"))
	okSums := map[string]bool{hexSum(apkBytes): true, hexSum(bomb.Bytes()): true}
	for _, e := range ents {
		if !okSums[strings.TrimSuffix(e.Name(), ".apk")] {
			t.Errorf("cache holds %s, which no allowed download produced", e.Name())
		}
	}
	for _, p := range []string{d.dataDir, filepath.Join(d.dataDir, "agent.db")} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, %v; want owner only", p, st.Mode().Perm(), err)
		}
	}
	// The daemon is healthy after, and its peak RSS stayed bounded.
	if resp, err := http.Get(d.URL() + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz after: %v %v", resp, err)
	}
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(d.cmd.Process.Pid) + "/status")
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			t.Logf("serve peak RSS: %d MiB", kb>>10)
			if kb > 512<<10 {
				t.Errorf("serve peak RSS %d MiB", kb>>10)
			}
		}
	}
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
