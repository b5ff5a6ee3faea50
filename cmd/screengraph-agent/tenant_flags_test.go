package main

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/screengraph/screengraph-agent/cmd/internal/chaintest"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
)

// badTenants break the one tenant id rule ([A-Za-z0-9_-]{1,64}): '.', '*'
// and '>' are NATS subject syntax ("a.b", "*" and ">" once shared the
// subject "_"), the rest length and alphabet.
var badTenants = []string{"a.b", "*", ">", "a b", "acmé", strings.Repeat("t", 65)}

// errorBodyOf checks out is one agent error format object (httpapi.ErrorBody)
// with error_id invalid_request_error naming each of parts.
func errorBodyOf(t *testing.T, out string, parts ...string) {
	t.Helper()
	var rep struct {
		Success *bool  `json:"success"`
		Error   string `json:"error"`
		Errors  []struct {
			ErrorID string `json:"error_id"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rep); err != nil || rep.Success == nil || *rep.Success || len(rep.Errors) != 1 {
		t.Fatalf("output is not one agent error format object (%v):\n%s", err, out)
	}
	if rep.Errors[0].ErrorID != string(agent.ErrInvalidRequest) {
		t.Errorf("error_id %q:\n%s", rep.Errors[0].ErrorID, out)
	}
	for _, p := range parts {
		if !strings.Contains(rep.Errors[0].Message, p) {
			t.Errorf("message %q does not name %q", rep.Errors[0].Message, p)
		}
	}
}

// `run --tenant` is refused before anything is opened or written: the
// agent error format under --output json, exit code 2, no run row.
func TestRunRefusesInvalidTenant(t *testing.T) {
	for _, tenant := range append(badTenants, "") {
		dir := t.TempDir()
		c := failCmd(dir)
		c.Tenant = tenant
		res := runCLI(t, c)
		if cli.ExitCode(res.Err) != 2 {
			t.Fatalf("--tenant %q: %v, want exit code 2", tenant, res.Err)
		}
		chaintest.CheckRunRefused(t, res.Raw, agent.ErrInvalidRequest, "--tenant", "must be 1-64 of A-Z, a-z, 0-9, '_' and '-'")
		chaintest.NoRunStored(t, dir)
	}
}

// `run --input` goes through the daemon's strict decoder.
func TestRunInputStrict(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"ensureDevice":{},"ensureDevice":{}}`, `duplicate key "ensureDevice" at $`},
		{`{"EnsureDevice":{}}`, `key "EnsureDevice" at $ matches field "ensureDevice" only by case`},
		{`{"tenantId":"beta"}`, `unknown key "tenantId" at $`},
		{`{"waitIdle":{}} {}`, `data after the JSON value`},
	} {
		dir := t.TempDir()
		in := filepath.Join(t.TempDir(), "run.json")
		if err := os.WriteFile(in, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		c := failCmd(dir)
		c.Input = in
		res := runCLI(t, c)
		if cli.ExitCode(res.Err) != 2 {
			t.Fatalf("%s: %v, want exit code 2", tc.body, res.Err)
		}
		chaintest.CheckRunRefused(t, res.Raw, agent.ErrInvalidRequest, "--input "+in, tc.want)
		chaintest.NoRunStored(t, dir)
	}
}

// serve's default tenant follows the rule from every source: --tenant, the
// config file's tenant key, SCREENGRAPH_TENANT.
func TestServeRefusesInvalidTenant(t *testing.T) {
	clearScreengraphEnv(t)
	for _, tenant := range badTenants {
		if _, err := (&serveCmd{Tenant: tenant}).load(); agent.Classify(err).ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), "--tenant") {
			t.Errorf("--tenant %q: %v", tenant, err)
		}
		file := filepath.Join(t.TempDir(), "c.yaml")
		b, _ := json.Marshal(map[string]string{"tenant": tenant})
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := (&serveCmd{Config: file}).load(); agent.Classify(err).ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), "config key tenant") {
			t.Errorf("config tenant %q: %v", tenant, err)
		}
	}
	t.Setenv("SCREENGRAPH_TENANT", "a.b")
	if _, err := (&serveCmd{}).load(); agent.Classify(err).ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), "SCREENGRAPH_TENANT") {
		t.Errorf("SCREENGRAPH_TENANT=a.b: %v", err)
	}
	t.Setenv("SCREENGRAPH_TENANT", "")
	// The command: the agent error format under --output json, exit code 2.
	out, err := captureOutput(t, func() error {
		return (&serveCmd{Tenant: ">", DataDir: t.TempDir(), Output: "json"}).Run(context.Background(), &Globals{LogLevel: "warn"})
	})
	if cli.ExitCode(err) != 2 {
		t.Fatalf("serve --tenant '>': %v, want exit code 2", err)
	}
	errorBodyOf(t, out, "--tenant", `">"`)
	if _, err := (&serveCmd{Tenant: "acme_1-x"}).load(); err != nil {
		t.Errorf("a valid tenant refused: %v", err)
	}
}

func TestTokenCreateRefusesInvalidTenant(t *testing.T) {
	for _, tenant := range badTenants {
		dir := t.TempDir()
		c := &tokenCreateCmd{Tenant: tenant}
		c.DataDir = dir
		c.Output = "json"
		out, err := captureOutput(t, func() error { return c.Run(context.Background()) })
		if cli.ExitCode(err) != 2 {
			t.Fatalf("token create --tenant %q: %v, want exit code 2", tenant, err)
		}
		errorBodyOf(t, out, "--tenant", "must be 1-64 of A-Z, a-z, 0-9, '_' and '-'")
		if _, err := os.Stat(filepath.Join(dir, "agent.db")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("token create --tenant %q opened the store (%v)", tenant, err)
		}
	}
}
