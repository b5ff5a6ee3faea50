package apk

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/fixtures"
)

func bomb(t *testing.T, name string, inflated, declared int64) string {
	t.Helper()
	var b bytes.Buffer
	if err := fixtures.ZipBomb(&b, name, inflated, declared); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "bomb.apk")
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A 1 MB zip inflating to 1 GiB is refused before parsing, with or without
// honest headers, and never reaches memory.
func TestInspectRefusesZipBombs(t *testing.T) {
	for _, c := range []struct {
		name               string
		entry              string
		inflated, declared int64
	}{
		{"manifest declared", "AndroidManifest.xml", 1 << 30, 1 << 30},
		{"manifest lying", "AndroidManifest.xml", 1 << 30, 1000},
		{"resources declared", "resources.arsc", 1 << 30, 1 << 30},
		{"resources lying", "resources.arsc", 1 << 30, 4096},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := bomb(t, c.entry, c.inflated, c.declared)
			if st, _ := os.Stat(p); st.Size() > 2<<20 {
				t.Fatalf("bomb is %d bytes", st.Size())
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Inspect(p, 34)
			runtime.ReadMemStats(&after)
			var e *agent.Error
			if !errors.As(err, &e) || e.ID != agent.ErrArtifactUnavailable || e.Code != CodeEntryTooLarge || e.Retryable {
				t.Fatalf("err = %v, want artifact_unavailable (%s)", err, CodeEntryTooLarge)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
				t.Errorf("inspecting allocated %d MiB", grew>>20)
			}
		})
	}
}
