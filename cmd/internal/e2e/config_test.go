package e2e

import (
	"os"
	"strings"
	"testing"
)

// clearScreengraphEnv unsets SCREENGRAPH_* for the test (restored after).
func clearScreengraphEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SCREENGRAPH_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}
