package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// TestArtifactsAPI: the list and the bytes of a run's artifacts, with their
// content type and the headers that keep device bytes from being rendered
// as a page; another tenant's run or artifact is a 404 like an unknown run.
func TestArtifactsAPI(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	dir, err := blobs.NewDir(filepath.Join(t.TempDir(), "evidence"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: st, Leases: st, Prepare: servicetest.Prepare(prepare), NewID: func() string { return ulid.Make().String() },
		Holder: "serve:test", Artifacts: st, Blobs: dir})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Service: svc, Gatherer: prometheus.NewRegistry(), Tokens: st}))
	t.Cleanup(srv.Close)
	tokens := map[string]string{}
	for _, tenant := range []string{"acme", "beta"} {
		tok, rec := storetest.NewAPIToken(tenant, false)
		if err := st.CreateToken(ctx, rec); err != nil {
			t.Fatal(err)
		}
		tokens[tenant] = tok
	}

	r := storetest.NewRun("acme", "emulator-5554")
	if err := st.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	png := []byte("\x89PNG\r\n\x1a\nnot really")
	xml := []byte(`<?xml version="1.0"?><hierarchy><script xmlns="http://www.w3.org/1999/xhtml">alert(1)</script></hierarchy>`)
	step := storetest.NodeStep(r, 1, 0, "WaitIdle")
	shot := storetest.NewArtifact("WaitIdle", 0, agent.ArtifactScreenshot, "image/png", png)
	hier := storetest.NewArtifact("WaitIdle", 0, agent.ArtifactUIHierarchy, "application/xml", xml)
	step.Artifacts = []agent.Artifact{shot, hier}
	for _, b := range [][]byte{png, xml} {
		if err := dir.Put(ctx, blobs.Sum(b), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CommitStep(ctx, step); err != nil {
		t.Fatal(err)
	}

	get := func(who, path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tokens[who])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, body := get("acme", "/v1/runs/"+r.RunID+"/artifacts")
	if resp.StatusCode != 200 {
		t.Fatalf("list: %d %s", resp.StatusCode, body)
	}
	var list httpapi.ArtifactsResponse
	if err := json.Unmarshal(body, &list); err != nil || len(list.Artifacts) != 2 {
		t.Fatalf("list = %s (%v)", body, err)
	}
	if a := list.Artifacts[0]; a.ArtifactID != shot.ArtifactID || a.Kind != "screenshot" || a.Node != "WaitIdle" || a.StepOrdinal != 0 ||
		a.ContentType != "image/png" || a.Bytes != int64(len(png)) || a.SHA256 != blobs.Sum(png) || a.CreatedAt == "" {
		t.Errorf("list[0] = %+v", a)
	}

	resp, body = get("acme", "/v1/runs/"+r.RunID+"/artifacts/"+shot.ArtifactID)
	if resp.StatusCode != 200 || string(body) != string(png) || resp.Header.Get("Content-Type") != "image/png" ||
		resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "inline") {
		t.Errorf("screenshot: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	resp, body = get("acme", "/v1/runs/"+r.RunID+"/artifacts/"+hier.ArtifactID)
	if resp.StatusCode != 200 || string(body) != string(xml) || resp.Header.Get("Content-Type") != "application/xml" ||
		resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment;") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("hierarchy: %d %v %q", resp.StatusCode, resp.Header, body)
	}

	// Byte ranges (a <video> seeking, issue 27): 206 with Content-Range,
	// the headers kept; another tenant's Range is the same 404.
	rng := func(who, path, spec string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tokens[who])
		req.Header.Set("Range", spec)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	shotPath := "/v1/runs/" + r.RunID + "/artifacts/" + shot.ArtifactID
	resp, body = rng("acme", shotPath, "bytes=2-5")
	if resp.StatusCode != 206 || string(body) != string(png[2:6]) || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes 2-5/%d", len(png)) ||
		resp.Header.Get("Accept-Ranges") != "bytes" || resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Content-Type") != "image/png" {
		t.Errorf("range: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if resp, _ = rng("acme", shotPath, fmt.Sprintf("bytes=%d-", len(png)+10)); resp.StatusCode != 416 {
		t.Errorf("unsatisfiable range: %d", resp.StatusCode)
	}
	if resp, body = rng("beta", shotPath, "bytes=0-3"); resp.StatusCode != 404 || strings.Contains(string(body), "PNG") {
		t.Errorf("beta's range: %d %q", resp.StatusCode, body)
	}
	if resp, _ = get("acme", shotPath); resp.Header.Get("Accept-Ranges") != "bytes" {
		t.Errorf("a whole artifact does not say Accept-Ranges: %v", resp.Header)
	}

	// Another tenant: the same 404 as for a run that does not exist.
	unknownID := ulid.Make().String()
	_, unknown := get("beta", "/v1/runs/"+unknownID+"/artifacts")
	want := strings.ReplaceAll(agentError(t, string(unknown), agent.ErrInvalidRequest), unknownID, "ID")
	for _, p := range []string{"/v1/runs/" + r.RunID + "/artifacts", "/v1/runs/" + r.RunID + "/artifacts/" + shot.ArtifactID} {
		resp, body := get("beta", p)
		if resp.StatusCode != 404 || strings.Contains(string(body), "screenshot") || strings.Contains(string(body), "PNG") {
			t.Errorf("beta GET %s: %d %s", p, resp.StatusCode, body)
		}
		if msg := strings.ReplaceAll(agentError(t, string(body), agent.ErrInvalidRequest), r.RunID, "ID"); msg != want {
			t.Errorf("beta's 404 %q differs from an unknown run's %q", msg, want)
		}
	}
	// An unknown artifact of one's own run, and a malformed id.
	if resp, _ := get("acme", "/v1/runs/"+r.RunID+"/artifacts/"+ulid.Make().String()); resp.StatusCode != 404 {
		t.Errorf("unknown artifact: %d", resp.StatusCode)
	}
	if resp, _ := get("acme", "/v1/runs/"+r.RunID+"/artifacts/..%2f..%2fetc"); resp.StatusCode != 400 && resp.StatusCode != 404 {
		t.Errorf("malformed artifact id: %d", resp.StatusCode)
	}
}
