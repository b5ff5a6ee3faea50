package main

import (
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/screengraph/screengraph-agent/agent"
	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
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

// serveFlagNames are the long names kong gives serve's own flags.
func serveFlagNames(t *testing.T) []string {
	t.Helper()
	app, err := kong.New(&commands{}, kong.Vars{"default_listen": DefaultListen})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range app.Model.Children {
		if n.Name != "serve" {
			continue
		}
		var names []string
		for _, f := range n.Flags {
			names = append(names, f.Name)
		}
		return names
	}
	t.Fatal("no serve command")
	return nil
}

// Every serve flag but --config, --print-config and --output is a config key,
// with kong's own name for it (what serveFlagValues keys the flags by).
func TestServeFlagsAreConfigKeys(t *testing.T) {
	keys := agentd.ConfigKeys()
	var flags []string
	for _, name := range serveFlagNames(t) {
		if !serveMetaFlags[name] {
			flags = append(flags, name)
		}
	}
	typ := reflect.TypeOf(serveCmd{})
	var fieldNames []string
	for i := 0; i < typ.NumField(); i++ {
		if n := cli.FlagName(typ.Field(i)); !serveMetaFlags[n] {
			fieldNames = append(fieldNames, n)
		}
	}
	slices.Sort(keys)
	slices.Sort(flags)
	slices.Sort(fieldNames)
	if !slices.Equal(keys, flags) || !slices.Equal(flags, fieldNames) {
		t.Fatalf("config keys %v\nserve flags %v\nflag names by reflection %v\n(add a daemonConfig field with koanf:\"<flag name>\" for each serve flag)",
			keys, flags, fieldNames)
	}
}

// roundTripValue is a valid non-default value for a config key of kind k.
func roundTripValue(t *testing.T, key string, typ reflect.Type) reflect.Value {
	special := map[string]any{
		"data-dir":         t.TempDir(),
		"database-url":     "postgres://db.example:5432/agent?sslmode=disable", // userinfo is redacted on print
		"nats-url":         "nats://a.example:4222,nats://b.example:4222",
		"appium":           "http://127.0.0.1:4799",
		"tenant":           "acme",
		"retention":        48 * time.Hour,  // at least 1h
		"stream-max-bytes": int64(64 << 20), // at least 1 MiB
	}
	if v, ok := special[key]; ok {
		return reflect.ValueOf(v).Convert(typ)
	}
	switch {
	case typ == reflect.TypeOf(time.Duration(0)):
		return reflect.ValueOf(45 * time.Second)
	case typ.Kind() == reflect.String:
		return reflect.ValueOf("127.0.0.1:1" + key[:1]).Convert(typ) // any text; addresses parse later
	case typ.Kind() == reflect.Int:
		return reflect.ValueOf(3).Convert(typ)
	case typ.Kind() == reflect.Bool:
		return reflect.ValueOf(true)
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.String:
		return reflect.ValueOf([]string{key + "-a.yaml", key + "-b.yaml"})
	}
	t.Fatalf("config key %s: no round-trip value for %v (add one in roundTripValue)", key, typ)
	return reflect.Value{}
}

// --print-config's output, YAML and JSON, fed back through --config gives
// the same configuration, for every serve flag set to a non-default value.
func TestPrintConfigRoundTrip(t *testing.T) {
	clearScreengraphEnv(t)
	var c serveCmd
	cv := reflect.ValueOf(&c).Elem()
	for i := 0; i < cv.NumField(); i++ {
		f := cv.Type().Field(i)
		if name := cli.FlagName(f); f.IsExported() && !serveMetaFlags[name] {
			cv.Field(i).Set(roundTripValue(t, name, f.Type))
		}
	}
	want, err := c.load()
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"text", "json"} {
		out, err := want.Marshal(format)
		if err != nil {
			t.Fatal(err)
		}
		if format == "text" {
			// YAML with the flags' names and durations as written on the command line.
			for _, line := range []string{"lease-ttl: 45s\n", "data-dir: ", "nats-replicas: 3\n"} {
				if !strings.Contains(string(out), line) {
					t.Errorf("YAML lacks %q:\n%s", line, out)
				}
			}
		} else if !strings.Contains(string(out), `"lease-ttl": "45s"`) {
			t.Errorf("JSON: %s", out)
		}
		file := filepath.Join(t.TempDir(), "config."+format)
		if err := os.WriteFile(file, out, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := (&serveCmd{Config: file}).load()
		if err != nil {
			t.Fatalf("%s: %v\n%s", format, err, out)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s round trip:\n got %+v\nwant %+v\n%s", format, got, want, out)
		}
	}
}

// --print-config with nothing set shows the values the daemon uses (a
// download's idle timeout of 60 s, not 0s) and byte sizes as integers (not
// 5.36870912e+08), in both formats.
func TestPrintConfigDefaults(t *testing.T) {
	clearScreengraphEnv(t)
	cfg, err := (&serveCmd{}).load()
	if err != nil {
		t.Fatal(err)
	}
	for format, lines := range map[string][]string{
		"text": {"artifact-idle-timeout: 1m0s\n", "stream-max-bytes: 536870912\n", `artifact-max-bytes: "2147483648"` + "\n"},
		"json": {`"artifact-idle-timeout": "1m0s"`, `"stream-max-bytes": 536870912,`, `"artifact-max-bytes": "2147483648"`},
	} {
		out, err := cfg.Marshal(format)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if !strings.Contains(string(out), l) {
				t.Errorf("%s lacks %q:\n%s", format, l, out)
			}
		}
		if strings.Contains(string(out), "e+") {
			t.Errorf("%s prints a number in exponent form:\n%s", format, out)
		}
	}
}

// A secret in a URL is printed redacted.
func TestPrintConfigRedacts(t *testing.T) {
	clearScreengraphEnv(t)
	cfg, err := (&serveCmd{DataDir: t.TempDir(), DatabaseURL: "postgres://agent:s3cret-pw@db.example/agent"}).load()
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"text", "json"} {
		out, _ := cfg.Marshal(format)
		if strings.Contains(string(out), "s3cret-pw") || !strings.Contains(string(out), "db.example") {
			t.Errorf("%s: %s", format, out)
		}
	}
}

// Keys that are not serve's flag names are refused with the closest name.
func TestConfigUnknownKeys(t *testing.T) {
	clearScreengraphEnv(t)
	for _, tc := range []struct{ file, want string }{
		{"lisen: 127.0.0.1:9999\n", `unknown key "lisen" (did you mean "listen"?)`},
		// The camelCase keys of the old --print-config.
		{`{"dataDir": "/tmp/x", "leaseTtl": 15000000000}`, `unknown key "dataDir" (did you mean "data-dir"?), unknown key "leaseTtl" (did you mean "lease-ttl"?)`},
		{"completely-unrelated: 1\n", `unknown key "completely-unrelated";`},
	} {
		file := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(file, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := (&serveCmd{Config: file}).load()
		if e := agent.Classify(err); e == nil || e.ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v", tc.file, err)
		}
	}
}
