package nodes

import (
	"encoding/json"
	"strings"

	"github.com/screengraph/screengraph-agent/agent"
)

// RequestFields are the run request's fields `runs submit` sets from its
// flags (each "" or 0 when not given): the device name, the package id (of
// provisionApp and launchOrAttach), the APK's apkStorageObjectReference,
// the expected signer digest, the launch activity, launchAttachMode and the
// policy version.
type RequestFields struct {
	Device        string
	Package       string
	APKReference  string
	SHA256        string
	Activity      string
	Mode          string
	PolicyVersion int
}

// EditRequest sets f's given fields in req (a decoded POST /v1/runs body,
// numbers as json.Number; objects on the way are created), adds an empty
// waitIdle when req has none, and returns the body. Errors:
// invalid_request_error when ensureDevice, provisionApp or launchOrAttach
// is still missing (naming the flag that gives it).
func EditRequest(req map[string]any, f RequestFields) ([]byte, error) {
	set := func(v any, path ...string) { SetPath(req, v, path...) }
	if f.Device != "" {
		set("android", "ensureDevice", "deviceConfiguration", "platformName")
		set(f.Device, "ensureDevice", "deviceConfiguration", "deviceName")
	}
	if f.Package != "" {
		set(f.Package, "provisionApp", "applicationUnderTestDescriptor", "androidPackageId")
		set(f.Package, "launchOrAttach", "applicationUnderTestDescriptor", "androidPackageId")
	}
	if f.APKReference != "" {
		set(f.APKReference, "provisionApp", "applicationUnderTestDescriptor", "apkStorageObjectReference")
	}
	if f.SHA256 != "" {
		set(strings.ToLower(f.SHA256), "provisionApp", "applicationUnderTestDescriptor", "expectedBuildSignatureSha256")
	}
	if f.Activity != "" {
		set(f.Activity, "launchOrAttach", "applicationUnderTestDescriptor", "androidLaunchActivityName")
	}
	if f.Mode != "" {
		set(f.Mode, "launchOrAttach", "launchAttachMode")
	}
	if f.PolicyVersion != 0 {
		set(f.PolicyVersion, "policyVersion")
	}
	if _, ok := req["waitIdle"]; !ok {
		set(map[string]any{}, "waitIdle", "idleHeuristicsConfiguration")
	}
	for _, need := range []struct{ node, flag string }{{"ensureDevice", "--device"}, {"provisionApp", "--package"}, {"launchOrAttach", "--package"}} {
		if _, ok := req[need.node]; !ok {
			return nil, agent.Errorf(agent.ErrInvalidRequest, "the request has no %s: give %s (or -f run.json)", need.node, need.flag)
		}
	}
	return json.Marshal(req)
}

// SetPath sets obj's value at path (object keys from the top) to v,
// creating (or replacing with) an object each step on the way needs; a nil
// v creates the objects on the way only.
func SetPath(obj map[string]any, v any, path ...string) {
	m := obj
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	if v != nil {
		m[path[len(path)-1]] = v
	}
}
