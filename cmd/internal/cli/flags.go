package cli

import (
	"reflect"
	"strings"
	"time"
	"unicode"
)

// Kebab is kong's default flag name of a Go field name: NATSListen ->
// nats-listen, LeaseTTL -> lease-ttl.
func Kebab(s string) string {
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

// FlagName is the long flag name kong gives a field: its name tag, else
// Kebab of its name.
func FlagName(f reflect.StructField) string {
	if n := f.Tag.Get("name"); n != "" {
		return n
	}
	return Kebab(f.Name)
}

// FlagValues returns the flags of the struct *ptr that were given (not
// their zero value), keyed by flag name, but those named in skip;
// durations as time.Duration's String ("30s"). serve's config keys are its
// flags' names, so these are the keys a config file would set.
func FlagValues(ptr any, skip map[string]bool) map[string]any {
	out := map[string]any{}
	v := reflect.ValueOf(ptr).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() || f.Anonymous || skip[FlagName(f)] || v.Field(i).IsZero() {
			continue
		}
		fv := v.Field(i)
		if d, ok := fv.Interface().(time.Duration); ok {
			out[FlagName(f)] = d.String()
			continue
		}
		out[FlagName(f)] = fv.Interface()
	}
	return out
}
