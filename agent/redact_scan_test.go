package agent

import (
	"bytes"
	"encoding/json"
	"testing"
)

// fullRedact is redactJSON's slow path, without mayNeedRedaction: decode,
// walk, report whether anything was hidden.
func fullRedact(t testing.TB, b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("valid JSON did not decode: %v", err)
	}
	_, changed := redact(v)
	return changed
}

var redactScanSeeds = []string{
	`{"a":1,"b":[true,false,null,"x"],"c":{"d":"e"}}`,
	`{"token":"t"}`,
	`{"\u0074oken":"t"}`,
	`{"Authorization" : "x"}`,
	`{"resumeToken":"r","fencingToken":7}`,
	`{"client_secret":{"nested":1}}`,
	`{"apiKey":null}`,
	`{"password":""}`,
	`"https://u:p@h/x"`,
	`"download https://h/a.apk?a=1&token=x"`,
	`["Bearer abcdefgh12345678"]`,
	`{"k":"BASIC dXNlcjpwYXNzd29yZA=="}`,
	`{"k":"sgat_abcdefgh12345678"}`,
	`{"url\u0040":"no secret in a key"}`,
	`{"s":"quote \" and \\ and \u0040 inside"}`,
	`{"s":"tab\there"}`,
	`{"s":"bear\u0065r abcdefgh12345678"}`,
	`{"s":"\u212Aelvin"}`,
	`{"text":"UI not idle within 5s: quiet for 120ms"}`,
	"{\n  \"b\": 1,\n  \"a\": \"s3://bucket/app.apk\"\n}",
	`12`, `null`, `"plain"`, `[]`, `{}`,
}

// mayNeedRedaction is false only where the full walk hides nothing.
func TestMayNeedRedactionSeeds(t *testing.T) {
	for _, s := range redactScanSeeds {
		b := []byte(s)
		if !json.Valid(b) {
			t.Fatalf("seed %s is not valid JSON", s)
		}
		if changed := fullRedact(t, b); changed && !mayNeedRedaction(b) {
			t.Errorf("%s: the scan says no secret, the walk hid one", s)
		}
	}
	// What the scan is for: ordinary payloads are passed through.
	for _, s := range []string{
		`{"nodeName":"WaitIdle","uiStabilityAssessment":{"quietWindowObservedMillis":412,"networkInFlightStatus":"NONE"}}`,
		`{"kind":"log","text":"idle after 31ms (2 samples), quiet for 402ms"}`,
		`{"\u006eode":"EnsureDevice","resumeToken":"abc"}`,
	} {
		if mayNeedRedaction([]byte(s)) {
			t.Errorf("%s: a payload without secrets took the slow path", s)
		}
	}
}

// The property the fast path rests on, for any valid JSON: when the scan
// says no secret, the full walk hides nothing.
func FuzzMayNeedRedaction(f *testing.F) {
	for _, s := range redactScanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<16 || !json.Valid(b) {
			return
		}
		if !mayNeedRedaction(b) && fullRedact(t, b) {
			t.Fatalf("%q: the scan says no secret, the walk hid one", b)
		}
	})
}

// BenchmarkRedactJSON: a node.finished payload without secrets, through the
// scan (RedactJSON) and through the decode-and-walk it replaces.
func BenchmarkRedactJSON(b *testing.B) {
	payload := []byte(`{"nodeName":"WaitIdle","attempt":1,"output":{"runId":"01JBD0QJ8K9M2N3P4Q5R6S7T8V","nodeName":"WaitIdle","uiStabilityAssessment":{"quietWindowObservedMillis":412,"networkInFlightStatus":"NONE"},"dismissedSystemDialogs":[]},"durationMs":31,"artifacts":[{"artifactId":"01JBD0QJ8K9M2N3P4Q5R6S7T8W","kind":"screenshot","contentType":"image/png","bytes":48213,"sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}]}`)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if out := RedactJSON(payload); len(out) != len(payload) {
				b.Fatal("changed")
			}
		}
	})
	b.Run("decode-walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if fullRedact(b, payload) {
				b.Fatal("changed")
			}
		}
	})
}

// BenchmarkRedactString: what the engine's and the nodes' log lines cost,
// without a secret (the fast path) and with a presigned URL.
func BenchmarkRedactString(b *testing.B) {
	for name, s := range map[string]string{
		"plain":     "idle after 31ms (2 samples), quiet for 402ms",
		"url":       "downloaded https://artifacts.example.com/builds/app.apk (12.1 MB) in 340ms",
		"presigned": "downloading https://u:p@b.s3.amazonaws.com/app.apk?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F1&X-Amz-Date=20250101T000000Z&X-Amz-Signature=abc: 42%",
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				RedactString(s)
			}
		})
	}
}
