package nodes

import (
	"os/exec"
	"strings"
	"testing"
)

// Nodes are DB-blind and network-blind (DESIGN.md, style.md habit 10): the
// package may reach the device and Appium only through its ports.
func TestNodesImportNoIO(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list gave %d packages: %q", len(deps), out)
	}
	// Exact packages, and module trees (prefix + "/").
	exact := []string{"database/sql", "os/exec", "net/http"}
	trees := []string{"database/sql", "net/http", "github.com/jackc/pgx", "github.com/nats-io", "modernc.org/sqlite"}
	for _, d := range deps {
		for _, b := range exact {
			if d == b {
				t.Errorf("nodes depends on %s", d)
			}
		}
		for _, b := range trees {
			if strings.HasPrefix(d, b+"/") {
				t.Errorf("nodes depends on %s", d)
			}
		}
	}
}
