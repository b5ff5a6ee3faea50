package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
)

// serve's flags and its config file share their names: a config key is a
// flag's long name (data-dir, lease-ttl, …), and --print-config prints what
// --config reads. The mapping is derived from the structs by reflection, so a
// flag added to serveCmd and daemonConfig is a config key without more code
// (config_test.go checks that every serve flag round-trips).

// serveMetaFlags are serve's flags that are not configuration.
var serveMetaFlags = map[string]bool{"config": true, "print-config": true, "output": true}

// kebab is kong's default flag name of a Go field name: NATSListen ->
// nats-listen, LeaseTTL -> lease-ttl.
func kebab(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) && (unicode.IsLower(r[i-1]) ||
			(i+1 < len(r) && unicode.IsLower(r[i+1]) && unicode.IsUpper(r[i-1]))) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// flagName is the long flag name kong gives a field.
func flagName(f reflect.StructField) string {
	if n := f.Tag.Get("name"); n != "" {
		return n
	}
	return kebab(f.Name)
}

// serveFlagValues returns serve's configuration flags that were given (not
// their zero value), keyed by flag name; durations as time.Duration's
// String ("30s").
func (c *serveCmd) serveFlagValues() map[string]any {
	out := map[string]any{}
	v := reflect.ValueOf(c).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() || f.Anonymous || serveMetaFlags[flagName(f)] || v.Field(i).IsZero() {
			continue
		}
		fv := v.Field(i)
		if d, ok := fv.Interface().(time.Duration); ok {
			out[flagName(f)] = d.String()
			continue
		}
		out[flagName(f)] = fv.Interface()
	}
	return out
}

// configKeys are the keys of daemonConfig (its koanf tags), in field order.
func configKeys() []string {
	t := reflect.TypeOf(daemonConfig{})
	keys := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		if k := t.Field(i).Tag.Get("koanf"); k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}

// checkConfigKeys refuses a config file's keys that are not serve's: the
// error names the key and the closest known one.
func checkConfigKeys(raw map[string]any, source string) error {
	known := configKeys()
	var unknown []string
	for k := range raw {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	msgs := make([]string, 0, len(unknown))
	for _, k := range unknown {
		m := fmt.Sprintf("unknown key %q", k)
		if c := closest(k, known); c != "" {
			m += fmt.Sprintf(" (did you mean %q?)", c)
		}
		msgs = append(msgs, m)
	}
	return agent.Errorf(agent.ErrInvalidRequest, "%s: %s; the keys are serve's flag names: %s",
		source, strings.Join(msgs, ", "), strings.Join(known, ", "))
}

// closest is the known name nearest to k (edit distance after lower-casing
// and dropping - and _), or "" when none is near (more than half of k).
func closest(k string, known []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s))
	}
	best, bestD := "", len(k)/2+1
	for _, c := range known {
		if d := editDistance(norm(k), norm(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// configMap is cfg keyed as --config reads it, durations as "30s", secrets
// redacted (agent.RedactJSON: a URL's userinfo becomes <REDACTED>, so a
// printed database-url with credentials is not read back as it was; give the
// password through PGPASSWORD or a service file instead).
func configMap(cfg daemonConfig) (map[string]any, error) {
	// The connection string by pgx's parser too (either of libpq's forms).
	cfg.DatabaseURL = postgres.RedactConnString(cfg.DatabaseURL)
	m := map[string]any{}
	v := reflect.ValueOf(cfg)
	for i := 0; i < v.NumField(); i++ {
		k := v.Type().Field(i).Tag.Get("koanf")
		if k == "" || k == "-" {
			continue
		}
		fv := v.Field(i).Interface()
		if v.Field(i).Kind() == reflect.Slice && v.Field(i).IsNil() {
			fv = []any{} // an empty list, not null
		}
		if d, ok := fv.(time.Duration); ok {
			fv = d.String()
		}
		m[k] = fv
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	d := json.NewDecoder(bytes.NewReader(agent.RedactJSON(b)))
	d.UseNumber() // 536870912 stays an integer, not 5.36870912e+08
	if err := d.Decode(&out); err != nil {
		return nil, err
	}
	for k, v := range out {
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				out[k] = i
			} else if f, err := n.Float64(); err == nil {
				out[k] = f
			}
		}
	}
	return out, nil
}

// printConfig renders cfg as --config reads it: YAML, or JSON when format is
// "json".
func printConfig(cfg daemonConfig, format string) ([]byte, error) {
	m, err := configMap(cfg)
	if err != nil {
		return nil, err
	}
	if format == "json" {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // <REDACTED> as written
		enc.SetIndent("", "  ")
		err := enc.Encode(m)
		return b.Bytes(), err
	}
	return yaml.Marshal(m)
}
