package service

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
)

// nodeFinishedFields reads what a full decode of the payload reads, and on a
// canonical payload stops before the node's output.
func TestNodeFinishedFields(t *testing.T) {
	id := agent.ErrDeviceOffline
	retry := true
	summary := "device offline"
	big := `{"deviceRuntimeContext":{"capabilitiesEcho":{"k":"` + strings.Repeat("x", 64<<10) + `"}}}`
	ev, err := agent.NewEvent(agent.Run{RunID: "01JRUN", TenantID: "t1"}, 3, agent.KindNodeFinished, agent.NodeFinishedPayload{
		PayloadBase: agent.PayloadBase{TenantID: "t1", RunID: "01JRUN"}, NodeName: "EnsureDevice", StepOrdinal: 1, Attempt: 2,
		NodeExecutionOutcomeStatus: "FAILURE", ErrorID: &id, Retryable: &retry, HumanReadableFailureSummary: &summary,
		DurationMillis: 1234, Output: json.RawMessage(big), NextNode: "ProvisionApp",
	}, agent.SystemClock{}, agent.NewULIDs(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	full := func(b []byte) (finishedFields, bool) {
		var p struct {
			NodeName       string `json:"nodeName"`
			Outcome        string `json:"nodeExecutionOutcomeStatus"`
			DurationMillis int64  `json:"durationMillis"`
		}
		err := json.Unmarshal(b, &p)
		return finishedFields{p.NodeName, p.Outcome, p.DurationMillis}, err == nil
	}
	reordered := `{"output":{"a":[1,2,{"b":"c"}]},"durationMillis":7,"nextNode":"x","nodeName":"WaitIdle","nodeExecutionOutcomeStatus":"SUCCESS"}`
	for _, c := range []struct {
		name    string
		payload string
	}{
		{"canonical, from NewEvent", string(ev.Payload)},
		{"another key order", reordered},
		{"fields missing", `{"nodeName":"LaunchOrAttach","output":null}`},
		{"empty object", `{}`},
	} {
		got, ok := nodeFinishedFields([]byte(c.payload))
		want, wok := full([]byte(c.payload))
		if !ok || !wok || got != want {
			t.Errorf("%s: %+v %v, full decode %+v %v", c.name, got, ok, want, wok)
		}
	}
	if got, _ := nodeFinishedFields(ev.Payload); got != (finishedFields{"EnsureDevice", "FAILURE", 1234}) {
		t.Errorf("canonical payload: %+v", got)
	}
	// The output is not read: cut off inside it, the fields are still there.
	cut := ev.Payload[:strings.Index(string(ev.Payload), `"output"`)+len(`"output":{"deviceRuntimeContext":{"capa`)]
	if got, ok := nodeFinishedFields(cut); !ok || got != (finishedFields{"EnsureDevice", "FAILURE", 1234}) {
		t.Errorf("payload cut inside its output: %+v %v", got, ok)
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{"nodeName":`, `{"durationMillis":"x"}`} {
		if _, ok := nodeFinishedFields([]byte(bad)); ok {
			t.Errorf("%q read as a payload", bad)
		}
	}
}
