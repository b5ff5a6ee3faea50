package pgtest

import (
	"net"
	"testing"
)

// TestStartPicksAnotherPortWhenTaken: the port probed free is taken by the
// time the server binds (another package's cluster, an ephemeral port), so
// Start must try another instead of failing the test that asked for a
// cluster (seen as "Address already in use" when packages ran in parallel).
func TestStartPicksAnotherPortWhenTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	orig := freePort
	defer func() { freePort = orig }()
	asked := 0
	freePort = func() (int, error) {
		asked++
		if asked == 1 {
			return takenPort, nil
		}
		return orig()
	}
	s, err := Start("")
	if err != nil {
		t.Fatalf("Start with its first port taken: %v", err)
	}
	defer s.Close()
	if s.Port == takenPort || asked != 2 {
		t.Fatalf("port %d after %d asks; the taken one was %d", s.Port, asked, takenPort)
	}
}
