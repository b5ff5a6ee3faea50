package nodes

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
)

// submitBody is a valid run request with the given fields replaced
// (dotted keys into the request object).
func submitBody(t *testing.T, set map[string]any) []byte {
	t.Helper()
	req := map[string]any{
		"ensureDevice": map[string]any{"deviceConfiguration": map[string]any{"deviceName": "emulator-5554"}},
		"provisionApp": map[string]any{"applicationUnderTestDescriptor": map[string]any{"androidPackageId": "com.example.app"}},
		"launchOrAttach": map[string]any{"applicationUnderTestDescriptor": map[string]any{
			"androidPackageId": "com.example.app", "androidLaunchActivityName": ".MainActivity"}},
	}
	for k, v := range set {
		parts := strings.Split(k, ".")
		m := req
		for _, p := range parts[:len(parts)-1] {
			if _, ok := m[p]; !ok {
				m[p] = map[string]any{}
			}
			m = m[p].(map[string]any)
		}
		m[parts[len(parts)-1]] = v
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewSetupRunBounds(t *testing.T) {
	const lad = "launchOrAttach.applicationUnderTestDescriptor."
	const pad = "provisionApp.applicationUnderTestDescriptor."
	ok := []map[string]any{
		nil,
		{"projectId": strings.Repeat("p", MaxIDLength), "tenantId": strings.Repeat("t", MaxIDLength)},
		{lad + "androidLaunchActivityName": "com.example.app.MainActivity"},
		{lad + "androidLaunchActivityName": "com.example.app/.MainActivity"},
		{lad + "androidLaunchActivityName": "com.example.app/com.example.ui.Main_2"},
		{lad + "androidLaunchActivityName": "MainActivity"},
		{pad + "androidPackageId": "a" + strings.Repeat(".b", (MaxNameLength-1)/2)},
	}
	for _, set := range ok {
		if _, err := NewSetupRun("01J0000000000000000000000", submitBody(t, set), "t1", 1); err != nil {
			t.Errorf("%v: refused: %v", set, err)
		}
	}
	bad := []struct {
		set  map[string]any
		path string
	}{
		{map[string]any{"projectId": strings.Repeat("<", 200<<10)}, "$"}, // over the 64 KiB request cap
		{map[string]any{"projectId": strings.Repeat("p", MaxIDLength+1)}, "$.projectId"},
		{map[string]any{"ensureDevice.deviceConfiguration.deviceName": strings.Repeat("e", MaxIDLength+1)}, "$.ensureDevice.deviceConfiguration.deviceName"},
		{map[string]any{"ensureDevice.deviceConfiguration.deviceName": "emulator-5554\n"}, "$.ensureDevice.deviceConfiguration.deviceName"},
		{map[string]any{pad + "androidPackageId": "a" + strings.Repeat(".b", MaxNameLength/2+1)}, "$." + pad + "androidPackageId"},
		{map[string]any{lad + "androidLaunchActivityName": ".Main Activity"}, "$." + lad + "androidLaunchActivityName"},
		{map[string]any{lad + "androidLaunchActivityName": ".Main;reboot"}, "$." + lad + "androidLaunchActivityName"},
		{map[string]any{lad + "androidLaunchActivityName": ".Main$(reboot)"}, "$." + lad + "androidLaunchActivityName"},
		{map[string]any{lad + "androidLaunchActivityName": ".Main'x'"}, "$." + lad + "androidLaunchActivityName"},
		{map[string]any{lad + "androidLaunchActivityName": "com.example.app.Main\nreboot"}, "$." + lad + "androidLaunchActivityName"},
		{map[string]any{lad + "androidLaunchActivityName": "com.example.app/.Main/x"}, "$." + lad + "androidLaunchActivityName"},
		{map[string]any{lad + "androidLaunchActivityName": ".1Main"}, "$." + lad + "androidLaunchActivityName"},
		{map[string]any{lad + "androidLaunchActivityName": "." + strings.Repeat("M", MaxNameLength)}, "$." + lad + "androidLaunchActivityName"},
		{map[string]any{lad + "androidPackageId": "com.example.app;reboot"}, "$." + lad + "androidPackageId"},
		{map[string]any{"waitIdle.applicationUnderTestDescriptor": map[string]any{"androidPackageId": "com.x", "androidLaunchActivityName": "$(id)"}}, "$.waitIdle.applicationUnderTestDescriptor.androidLaunchActivityName"},
	}
	for _, c := range bad {
		_, err := NewSetupRun("01J0000000000000000000000", submitBody(t, c.set), "t1", 1)
		var ae *agent.Error
		if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest {
			t.Errorf("%.80v: want invalid_request_error, got %v", c.set, err)
			continue
		}
		if !namesPath(err.Error(), c.path) {
			t.Errorf("%.80v: error does not name %s: %.300v", c.set, c.path, err)
		}
	}
}

// namesPath reports whether msg names the JSON path p, as "$.a.b.c:" or as
// the schema validator writes it, "$.a: … /b/c:".
func namesPath(msg, p string) bool {
	if strings.Contains(msg, p+":") {
		return true
	}
	parts := strings.Split(strings.TrimPrefix(p, "$."), ".")
	return len(parts) > 1 && strings.Contains(msg, "$."+parts[0]+":") && strings.Contains(msg, "/"+strings.Join(parts[1:], "/")+":")
}
