package main

import (
	"reflect"
	"strings"
	"time"
	"unicode"
)

// serve's flags and its config file share their names: a config key is a
// flag's long name (data-dir, lease-ttl, …), and --print-config prints what
// --config reads. The mapping is derived from the structs by reflection, so a
// flag added to serveCmd and agentd.Config is a config key without more code
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
