package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
	"github.com/screengraph/screengraph-agent/nodes"
)

// RunFlags are `run`'s flags that fill its run request.
type RunFlags struct {
	// Input is the --input file: a run request JSON, decoded strictly.
	Input                                  string
	Serial, Package, APK, SHA256, Activity string
}

// RunRequest is `run`'s run request: --input's (strictly decoded: the
// daemon's rules for duplicate, case-variant and unknown keys) with each
// flag given set in its place, platformName android, and WaitIdle's
// heuristics an object (the policy's defaults). A local --apk path becomes
// its absolute file:// URL. Errors: invalid_request_error naming --input;
// the file's read error.
func RunRequest(f RunFlags) (nodes.SetupRequest, error) {
	var req nodes.SetupRequest
	if f.Input != "" {
		b, err := os.ReadFile(f.Input)
		if err != nil {
			return req, err
		}
		if err := strictjson.Decode(b, &req); err != nil {
			return req, agent.Errorf(agent.ErrInvalidRequest, "--input %s: %s", f.Input, agent.Classify(err).Msg)
		}
	}
	apk := f.APK
	if apk != "" && !strings.Contains(apk, "://") {
		abs, err := filepath.Abs(apk)
		if err != nil {
			return req, err
		}
		apk = "file://" + abs
	}
	steps := []struct {
		raw  *json.RawMessage
		path []string
		v    string
	}{
		{&req.EnsureDevice, []string{"deviceConfiguration", "platformName"}, "android"},
		{&req.EnsureDevice, []string{"deviceConfiguration", "deviceName"}, f.Serial},
		{&req.ProvisionApp, []string{"applicationUnderTestDescriptor", "androidPackageId"}, f.Package},
		{&req.ProvisionApp, []string{"applicationUnderTestDescriptor", "apkStorageObjectReference"}, apk},
		{&req.ProvisionApp, []string{"applicationUnderTestDescriptor", "expectedBuildSignatureSha256"}, strings.ToLower(f.SHA256)},
		{&req.LaunchOrAttach, []string{"applicationUnderTestDescriptor", "androidPackageId"}, f.Package},
		{&req.LaunchOrAttach, []string{"applicationUnderTestDescriptor", "androidLaunchActivityName"}, f.Activity},
		// WaitIdle's heuristics default to the policy's: an empty object.
		{&req.WaitIdle, []string{"idleHeuristicsConfiguration", "-"}, ""},
	}
	for _, s := range steps {
		if err := setInput(s.raw, s.path, s.v, f.Input); err != nil {
			return req, err
		}
	}
	return req, nil
}

// setInput sets path in the node input *raw to v, a flag's value ("" keeps
// what --input has there and makes the objects on the way).
func setInput(raw *json.RawMessage, path []string, v, input string) error {
	obj := map[string]any{}
	if len(*raw) > 0 {
		if err := json.Unmarshal(*raw, &obj); err != nil {
			return agent.Wrap(agent.ErrInvalidRequest, err, "--input %s", input)
		}
	}
	if v != "" { // a flag overrides --input
		nodes.SetPath(obj, v, path...)
	} else {
		nodes.SetPath(obj, nil, path...)
	}
	b, _ := json.Marshal(obj)
	*raw = b
	return nil
}

// MaxRunFile bounds `runs submit -f`: the daemon refuses bodies over
// httpapi.MaxRequestBytes.
const MaxRunFile = httpapi.MaxRequestBytes

// SubmitFlags are `runs submit`'s flags that fill its request.
type SubmitFlags struct {
	// File is -f: a run request JSON file, "-" standard input.
	File string
	nodes.RequestFields
	// APK is --apk: a URL, or a local path sent as its file:// URL.
	APK string
}

// SubmitRequest is the POST /v1/runs body of `runs submit`: the -f file's
// object (or an empty one) with each given flag set in its place, and the
// four node inputs present (nodes.EditRequest). Errors:
// invalid_request_error for an unreadable, oversized or non-object file, an
// APK path that cannot be read, or a request with no device or package.
func SubmitRequest(f SubmitFlags) ([]byte, error) {
	req := map[string]any{}
	if f.File != "" {
		b, err := readRunFile(f.File)
		if err != nil {
			return nil, err
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&req); err != nil || req == nil {
			return nil, agent.Errorf(agent.ErrInvalidRequest, "-f %s: not a JSON object: %v", f.File, err)
		}
	}
	if f.APK != "" {
		ref, err := APKReference(f.APK)
		if err != nil {
			return nil, err
		}
		f.APKReference = ref
	}
	return nodes.EditRequest(req, f.RequestFields)
}

// readRunFile reads -f (standard input for "-"), at most MaxRunFile bytes.
func readRunFile(name string) ([]byte, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, agent.Wrap(agent.ErrInvalidRequest, err, "-f %s", name)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxRunFile+1))
	if err != nil {
		return nil, agent.Wrap(agent.ErrInvalidRequest, err, "-f %s", name)
	}
	if len(b) > MaxRunFile {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "-f %s: over %d bytes (the daemon's request limit)", name, MaxRunFile)
	}
	return b, nil
}

// APKReference is the apkStorageObjectReference for --apk: a URL as given
// (it has a scheme), else the absolute file:// URL of a local path the
// CLI's user can read as a regular file. The daemon still decides: it reads
// file:// only under its --artifact-file-root (its refusal names the rule).
// Errors: invalid_request_error naming --apk.
func APKReference(apk string) (string, error) {
	if u, err := url.Parse(apk); err == nil && len(u.Scheme) > 1 && strings.Contains(apk, "://") {
		return apk, nil
	}
	p, err := filepath.Abs(apk)
	if err != nil {
		return "", agent.Wrap(agent.ErrInvalidRequest, err, "--apk %s", apk)
	}
	f, err := os.Open(p)
	if err != nil {
		return "", agent.Wrap(agent.ErrInvalidRequest, err, "--apk %s", apk)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", agent.Errorf(agent.ErrInvalidRequest, "--apk %s: not a regular file", apk)
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String(), nil
}
