package appium

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// A page source answer is decoded in one pass straight into the caller's
// string (the unquoting buffer and the string: about 2x the answer's
// bytes; the envelope's RawMessage copy and its second decode made it 3x),
// with the same results and errors as before.
func TestDecodeResponseOnePass(t *testing.T) {
	src := `<?xml version="1.0"?><hierarchy>` + strings.Repeat(`<node text="a \"quoted\" label" bounds="[0,0][1080,2400]"/>`, 1000) + `</hierarchy>`
	raw, _ := json.Marshal(map[string]any{"value": src, "sessionId": "s1"})
	var got string
	if err := decodeResponse(200, raw, &got, "source", false); err != nil || got != src {
		t.Fatalf("decoded %d bytes, %v", len(got), err)
	}
	const n = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		var s string
		if err := decodeResponse(200, raw, &s, "source", false); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	per := float64(after.TotalAlloc-before.TotalAlloc) / n
	t.Logf("%.0f bytes allocated per %d-byte answer", per, len(raw))
	if per > 2.4*float64(len(raw)) {
		t.Errorf("%.0f bytes allocated per %d-byte answer, want at most 2.4x", per, len(raw))
	}
	// What does not fit is the same error as before; null and a missing
	// value leave out as it was.
	var n2 int
	if err := decodeResponse(200, raw, &n2, "source", false); err == nil || !strings.Contains(err.Error(), "unexpected value") {
		t.Errorf("a string into an int: %v", err)
	}
	if err := decodeResponse(200, []byte("<html>bad gateway</html>"), &got, "source", false); err == nil || !strings.Contains(err.Error(), "not a WebDriver answer") {
		t.Errorf("not JSON: %v", err)
	}
	for _, body := range []string{`{"value":null}`, `{}`} {
		s := "kept"
		if err := decodeResponse(200, []byte(body), &s, "source", false); err != nil || s != "kept" {
			t.Errorf("%s: %q %v", body, s, err)
		}
	}
}
