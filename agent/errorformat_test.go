package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
)

func TestErrorReportOfFailedResumedRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		b := &agenttest.Node{NodeName: "ProvisionApp", BlockUntilDone: true}
		b.OnRun = func(context.Context, agent.NodeInput) { stop() }
		c := &agenttest.Node{NodeName: "LaunchOrAttach", FailTimes: -1, FailWith: agent.ErrInstallFailed, FailCode: "INSTALL_FAILED_INSUFFICIENT_STORAGE",
			FailMsg: "pm install https://ci:hunter2@artifacts.example/app.apk?X-Amz-Signature=sigsecret&v=3 failed",
			Detail: map[string]any{"apiKey": "keysecret", "nested": map[string]any{"Authorization": "Bearer tok_abcdefgh1234"},
				"url": "https://x.example/y?access_token=qsecret&page=2", "plain": "keep me", "list": []any{map[string]any{"password": "pw"}}}}
		d := &agenttest.Node{NodeName: "WaitIdle"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 3, 0, agent.ErrNetwork)), a, b, c, d)
		if _, err := f.eng.Run(ctx, testRunID, f.graph); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		b.BlockUntilDone, b.OnRun = false, nil
		status, err := f.run(t)
		if err != nil || status != agent.RunFailed {
			t.Fatalf("%s %v", status, err)
		}
		rep, err := agent.LoadErrorReport(context.Background(), f.store, f.graph, testRunID)
		if err != nil {
			t.Fatal(err)
		}
		js, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"hunter2", "sigsecret", "keysecret", "tok_abcdefgh1234", "qsecret", `"pw"`} {
			if strings.Contains(string(js), secret) {
				t.Errorf("secret %q leaked: %s", secret, js)
			}
		}
		var got struct {
			Success   bool   `json:"success"`
			Error     string `json:"error"`
			Errors    []map[string]any
			Execution struct {
				Steps []agent.ExecutionStep `json:"steps"`
			} `json:"execution"`
			Checkpoint struct {
				CompletedNodes []string `json:"completed_nodes"`
				FailedNode     string   `json:"failed_node"`
			} `json:"checkpoint"`
		}
		if err := json.Unmarshal(js, &got); err != nil {
			t.Fatal(err)
		}
		if got.Success || !strings.HasPrefix(got.Error, "LaunchOrAttach failed: pm install https://<REDACTED>@artifacts.example/app.apk?X-Amz-Signature=<REDACTED>&v=3") {
			t.Fatalf("error %q", got.Error)
		}
		e := got.Errors[0]
		if len(got.Errors) != 1 || e["category"] != "execution_failure" || e["node_id"] != "LaunchOrAttach" || e["fixable"] != false ||
			e["error_id"] != "install_failed" || e["error_code"] != "INSTALL_FAILED_INSUFFICIENT_STORAGE" || e["attempts"] != float64(1) {
			t.Fatalf("errors %v", got.Errors)
		}
		detail := e["output"].(map[string]any)["detail"].(map[string]any)
		if detail["plain"] != "keep me" || detail["apiKey"] != "<REDACTED>" || detail["url"] != "https://x.example/y?access_token=<REDACTED>&page=2" ||
			detail["nested"].(map[string]any)["Authorization"] != "<REDACTED>" {
			t.Fatalf("detail %v", detail)
		}
		if tok, _ := e["output"].(map[string]any)["resumeToken"].(string); len(tok) != 26 {
			t.Fatalf("resumeToken redacted or missing: %v", e["output"])
		}
		want := []agent.ExecutionStep{
			{NodeID: "EnsureDevice", Status: "completed", Cached: true},
			{NodeID: "ProvisionApp", Status: "completed", Cached: false},
			{NodeID: "LaunchOrAttach", Status: "failed"},
			{NodeID: "WaitIdle", Status: "not_executed"},
		}
		for i, s := range want {
			if got.Execution.Steps[i] != s {
				t.Fatalf("steps %+v", got.Execution.Steps)
			}
		}
		if strings.Join(got.Checkpoint.CompletedNodes, ",") != "EnsureDevice,ProvisionApp" || got.Checkpoint.FailedNode != "LaunchOrAttach" {
			t.Fatalf("checkpoint %+v", got.Checkpoint)
		}
	})
}

func TestErrorReportCategories(t *testing.T) {
	g, _ := agent.NewGraph("setup", "A", &agenttest.Node{NodeName: "A"})
	for id, want := range map[agent.ErrorID][2]any{
		agent.ErrSignatureMismatch: {"api_validation", true},
		agent.ErrNetwork:           {"execution_failure", true}, // retryable
		agent.ErrBootTimeout:       {"execution_failure", false},
	} {
		rep, err := agent.NewErrorReport(g, agent.RunState{Failure: &agent.NodeFailure{Node: "A", ErrorID: id, Retryable: id == agent.ErrNetwork, Attempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if e := rep.Errors[0]; e.Category != want[0] || e.Fixable != want[1] {
			t.Errorf("%s: %s fixable=%v", id, e.Category, e.Fixable)
		}
	}
	if _, err := agent.NewErrorReport(g, agent.RunState{}); !errors.Is(err, agent.ErrNoFailure) {
		t.Errorf("no failure: %v", err)
	}
}

func TestRedactString(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:4723/wd/hub":                             "http://127.0.0.1:4723/wd/hub",
		"postgres://agent:s3cr3t@db:5432/sg?sslmode=disable":       "postgres://<REDACTED>@db:5432/sg?sslmode=disable",
		"s3://bucket/app.apk":                                      "s3://bucket/app.apk",
		"GET /a?api_key=zzz&x=1":                                   "GET /a?api_key=<REDACTED>&x=1",
		"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig":       "Authorization: Bearer <REDACTED>",
		"mCurrentFocus=Window{1 u0 com.example.app/.HomeActivity}": "mCurrentFocus=Window{1 u0 com.example.app/.HomeActivity}",
		"user@example.com wrote":                                   "user@example.com wrote",
	} {
		if got := agent.RedactString(in); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}
