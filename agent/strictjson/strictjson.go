// Package strictjson is the one decoder of every request body the daemon
// accepts (HTTP run submit and control bodies, NATS control messages,
// `run --input`). encoding/json alone matches keys to fields ignoring case,
// lets the last of duplicate keys win and accepts data after the value, so
// one body can mean different things to different readers ({"tenantId":"A",
// "TenantID":"B"} is tenant A to a map lookup and tenant B to a struct). A
// token pass over the body refuses, before anything is decoded:
//
//   - a key seen twice in one object, at any depth;
//   - two keys of one object equal under Unicode simple case folding (what
//     encoding/json would match to the same field), at any depth;
//   - a key that matches a field of the target struct only by case;
//   - a key no field of the target struct has, unless Options.AllowUnknown
//     (struct types define the whole shape; maps, interfaces,
//     json.RawMessage and other json.Unmarshaler types are free-form);
//   - nesting deeper than MaxDepth, and any data after the value.
//
// Every refusal is an *agent.Error invalid_request_error (its Msg says it
// all, no wrapped cause) naming the JSON path of the key, e.g. `duplicate key "tenantId" at $` or `key "TenantID"
// at $.ensureDevice matches field "tenantId" only by case`.
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/screengraph/screengraph-agent/agent"
)

// MaxDepth is the deepest nesting of objects and arrays a body may have (no
// request of the daemon needs more than 8).
const MaxDepth = 64

// Options tune Check and DecodeAt.
type Options struct {
	// AllowUnknown lets keys that no field of a struct has through (the
	// JSON Schema of a node input decides about them: refused in strict and
	// coerce mode, dropped in lenient). Case-only matches are refused still.
	AllowUnknown bool
}

// Decode decodes the single JSON value data into v (a non-nil pointer)
// after Check (path "$", unknown keys refused). Errors: an *agent.Error
// invalid_request_error naming the JSON path.
func Decode(data []byte, v any) error { return DecodeAt("$", data, v, Options{}) }

// DecodeAt is Decode with the JSON path of data's value (e.g.
// "$.ensureDevice") for messages, and options.
func DecodeAt(path string, data []byte, v any, o Options) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return agent.Errorf(agent.ErrInternal, "strictjson: decoding into %T, not a non-nil pointer", v)
	}
	if err := Check(path, data, rv.Type().Elem(), o); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if !o.AllowUnknown {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			at := path
			if te.Field != "" {
				at = path + "." + te.Field
			}
			return agent.Errorf(agent.ErrInvalidRequest, "%s: expected %s, received JSON %s", at, te.Type, te.Value)
		}
		return agent.Errorf(agent.ErrInvalidRequest, "%s: %v", path, err)
	}
	return nil
}

// Check runs the token pass over data against the shape of type t (nil:
// free-form, only the generic rules) without decoding. Errors as Decode's.
func Check(path string, data []byte, t reflect.Type, o Options) error {
	if !utf8.Valid(data) {
		// encoding/json would turn invalid bytes into U+FFFD, so two
		// different keys could decode to one.
		return agent.Errorf(agent.ErrInvalidRequest, "%s: the body is not valid UTF-8", path)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	w := walker{dec: dec, o: o, root: path}
	if err := w.value(path, t, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return agent.Errorf(agent.ErrInvalidRequest, "%s: data after the JSON value (offset %d)", path, dec.InputOffset())
	}
	return nil
}

type walker struct {
	dec  *json.Decoder
	o    Options
	root string
}

// syntax is a syntax error, said at the root path with the byte offset (a
// broken body has no path of its own).
func (w *walker) syntax(_ string, err error) error {
	path := w.root
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return agent.Errorf(agent.ErrInvalidRequest, "%s: the JSON value ends early (offset %d)", path, w.dec.InputOffset())
	}
	return agent.Errorf(agent.ErrInvalidRequest, "%s: not valid JSON (offset %d): %v", path, w.dec.InputOffset(), err)
}

// value reads one value at path whose Go type is t (nil: free-form).
func (w *walker) value(path string, t reflect.Type, depth int) error {
	tok, err := w.dec.Token()
	if err != nil {
		return w.syntax(path, err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth >= MaxDepth {
		return agent.Errorf(agent.ErrInvalidRequest, "%s: nested deeper than %d", path, MaxDepth)
	}
	t = shapeOf(t)
	switch d {
	case '{':
		return w.object(path, t, depth+1)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; w.dec.More(); i++ {
			if err := w.value(fmt.Sprintf("%s[%d]", path, i), elem, depth+1); err != nil {
				return err
			}
		}
		if _, err := w.dec.Token(); err != nil {
			return w.syntax(path, err)
		}
	}
	return nil
}

func (w *walker) object(path string, t reflect.Type, depth int) error {
	var fields *structFields
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	seen := map[string]bool{}
	folded := map[string]string{} // folded key -> the key as sent
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return w.syntax(path, err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return agent.Errorf(agent.ErrInvalidRequest, "duplicate key %s at %s", quote(key), path)
		}
		seen[key] = true
		fk := fold(key)
		if other, ok := folded[fk]; ok {
			return agent.Errorf(agent.ErrInvalidRequest, "keys %s and %s at %s differ only by case", quote(other), quote(key), path)
		}
		folded[fk] = key
		child := elem
		if fields != nil {
			f, ok := fields.exact[key]
			switch {
			case ok:
				child = f
			case fields.folded[fk] != "":
				return agent.Errorf(agent.ErrInvalidRequest, "key %s at %s matches field %s only by case", quote(key), path, quote(fields.folded[fk]))
			case !w.o.AllowUnknown:
				return agent.Errorf(agent.ErrInvalidRequest, "unknown key %s at %s (known: %s)", quote(key), path, strings.Join(fields.names, ", "))
			}
		}
		if err := w.value(join(path, key), child, depth); err != nil {
			return err
		}
	}
	if _, err := w.dec.Token(); err != nil {
		return w.syntax(path, err)
	}
	return nil
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shapeOf is the type whose shape the value must have: t without pointers,
// nil for free-form types (interfaces and types that decode themselves,
// json.RawMessage among them).
func shapeOf(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
			t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
			return nil
		}
		switch t.Kind() {
		case reflect.Pointer:
			t = t.Elem()
		case reflect.Interface:
			return nil
		default:
			return t
		}
	}
	return nil
}

// structFields are the JSON names of a struct's fields as encoding/json
// sees them (tags, embedded structs flattened, shallower fields first).
type structFields struct {
	exact  map[string]reflect.Type
	folded map[string]string // fold(name) -> name
	names  []string
}

var fieldCache sync.Map // reflect.Type -> *structFields

func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	sf := &structFields{exact: map[string]reflect.Type{}, folded: map[string]string{}}
	var add func(t reflect.Type, depth int)
	add = func(t reflect.Type, depth int) {
		var embedded []reflect.Type
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
				embedded = append(embedded, ft)
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, dup := sf.exact[name]; dup {
				continue // a shallower field wins
			}
			sf.exact[name] = f.Type
			sf.folded[fold(name)] = name
			sf.names = append(sf.names, name)
		}
		if depth < 8 {
			for _, e := range embedded {
				add(e, depth+1)
			}
		}
	}
	add(t, 0)
	f, _ := fieldCache.LoadOrStore(t, sf)
	return f.(*structFields)
}

// fold maps s to the smallest rune of each rune's simple case-folding orbit,
// so fold(a) == fold(b) exactly when strings.EqualFold(a, b) (the matching
// encoding/json does between keys and field names).
func fold(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// join is the JSON path of key under path: $.a.b, or $.a["x y"].
func join(path, key string) string {
	if ident.MatchString(key) && len(key) <= 64 {
		return path + "." + key
	}
	return path + "[" + quote(key) + "]"
}

// quote quotes a key for a message, cut to 64 bytes.
func quote(k string) string {
	if len(k) > 64 {
		cut := 64
		for cut > 0 && !utf8.RuneStart(k[cut]) {
			cut--
		}
		k = k[:cut] + "…"
	}
	return fmt.Sprintf("%q", k)
}
