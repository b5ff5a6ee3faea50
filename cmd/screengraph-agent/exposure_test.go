package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// --allowed-host comes from flags, the config file and
// SCREENGRAPH_ALLOWED_HOSTS; a malformed one is refused naming the flag.
func TestServeAllowedHostConfig(t *testing.T) {
	clearScreengraphEnv(t)
	t.Setenv("SCREENGRAPH_ALLOWED_HOSTS", "agent.lan,proxy.lan:8443")
	cfg, err := (&serveCmd{DataDir: t.TempDir()}).load()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.AllowedHosts, []string{"agent.lan", "proxy.lan:8443"}) {
		t.Errorf("allowed hosts from the environment: %v", cfg.AllowedHosts)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("allowed-host: [ci.lan]\ninsecure-no-auth: true\n"), 0o600)
	clearScreengraphEnv(t)
	cfg, err = (&serveCmd{DataDir: t.TempDir(), Config: file}).load()
	if err != nil || !slices.Equal(cfg.AllowedHosts, []string{"ci.lan"}) || !cfg.InsecureNoAuth {
		t.Errorf("from the config file: %+v %v", cfg, err)
	}
	_, err = (&serveCmd{DataDir: t.TempDir(), AllowedHost: []string{"http://evil"}}).load()
	if !isInvalid(err) || !strings.Contains(err.Error(), "--allowed-host") {
		t.Errorf("a malformed --allowed-host: %v", err)
	}
}
