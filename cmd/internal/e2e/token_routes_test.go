package e2e

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// TestServeTokenCommandsThroughAPI (issue 24 part 4): `token
// create|list|revoke --server` go through the real serve's admin token
// routes. The first admin token is made while the API is open; then a
// tenant token is refused (403, permission_error, exit 2) on each command
// and no token at all is 401; the admin's create prints the token once,
// the list (text and json) never shows a token or its hash, and a revoke
// through the daemon ends the token's access. The daemon's log holds none
// of the tokens.
func TestServeTokenCommandsThroughAPI(t *testing.T) {
	clearScreengraphEnv(t)
	srv := simtest.StartADBServer(t)
	d := startDaemon(t, srv)
	bin := buildAgent(t)
	cli := func(token string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--server", d.URL())...)
		cmd.Env = append(os.Environ(), "SCREENGRAPH_TOKEN="+token)
		out, err := cmd.CombinedOutput()
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	create := func(token string, args ...string) tokenCreated {
		t.Helper()
		out, code := cli(token, append([]string{"token", "create", "--output", "json"}, args...)...)
		var ct tokenCreated
		if code != 0 || json.Unmarshal([]byte(out), &ct) != nil || !agent.LooksLikeToken(ct.Token) || ct.ID == "" {
			t.Fatalf("token create %v: exit %d\n%s", args, code, out)
		}
		return ct
	}
	admin := create("", "--tenant", "ops", "--admin")
	acme := create(admin.Token, "--tenant", "acme")
	if !admin.Admin || acme.Admin || acme.TenantID != "acme" {
		t.Fatalf("made %+v and %+v", admin, acme)
	}

	for _, who := range []struct {
		name, token string
		status      string
	}{{"acme's tenant token", acme.Token, "403"}, {"no token", "", "401"}} {
		for _, args := range [][]string{{"token", "list"}, {"token", "create", "--tenant", "acme", "--admin"}, {"token", "revoke", admin.ID}} {
			out, code := cli(who.token, append(args, "--output", "json")...)
			if code != 2 || !strings.Contains(out, `"error_id": "permission_error"`) || !strings.Contains(out, "answered "+who.status) {
				t.Errorf("%v with %s: exit %d, want 2 and a %s permission_error\n%s", args, who.name, code, who.status, out)
			}
		}
	}

	for _, format := range []string{"text", "json"} {
		out, code := cli(admin.Token, "token", "list", "--output", format)
		if code != 0 || !strings.Contains(out, admin.ID) || !strings.Contains(out, acme.ID) {
			t.Fatalf("token list --output %s as admin: exit %d\n%s", format, code, out)
		}
		for _, tok := range []string{admin.Token, acme.Token} {
			if strings.Contains(out, tok) || strings.Contains(out, agent.HashToken(tok)) || strings.Contains(out, "sgat_") {
				t.Errorf("token list --output %s shows a token or its hash:\n%s", format, out)
			}
		}
	}

	call := func(token string) int {
		req, _ := http.NewRequest("GET", d.URL()+"/v1/runs", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := call(acme.Token); st != 200 {
		t.Fatalf("acme's token before the revoke: %d", st)
	}
	out, code := cli(admin.Token, "token", "revoke", acme.ID, "--output", "json")
	var rev agent.APIToken
	if code != 0 || json.Unmarshal([]byte(out), &rev) != nil || rev.ID != acme.ID || rev.RevokedAt == nil {
		t.Fatalf("token revoke as admin: exit %d\n%s", code, out)
	}
	if st := call(acme.Token); st != http.StatusUnauthorized {
		t.Errorf("acme's token after the revoke: %d, want 401", st)
	}
	if out, code := cli(admin.Token, "token", "revoke", "01J0000000000000000000NONE"); code != 2 || !strings.Contains(out, "no token 01J0000000000000000000NONE") {
		t.Errorf("token revoke of an unknown id: exit %d\n%s", code, out)
	}
	log := d.log()
	for _, tok := range []string{admin.Token, acme.Token} {
		if strings.Contains(log, tok) {
			t.Errorf("the daemon's log holds a token")
		}
	}
}
