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
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

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
	NotePass("decode", path)
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
	NotePass("check", path)
	_, err := pass(path, data, t, o, false)
	return err
}

// DecodeTree is Check and the decode in one pass over data: it refuses what
// Check refuses and returns the value as encoding/json would decode it into
// an `any` with UseNumber: map[string]any, []any, string, json.Number, bool
// or nil. It is the decode of a run request: what follows (coercion, schema
// validation, the typed node inputs) works on this value, never on the text
// again. Errors as Decode's.
func DecodeTree(path string, data []byte, t reflect.Type, o Options) (any, error) {
	NotePass("decode-tree", path)
	return pass(path, data, t, o, true)
}

// passHook is the test hook of OnPass.
var passHook atomic.Pointer[func(kind, path string)]

// OnPass calls f for every pass over JSON text the decoders of a run
// request make from now on (kind "check", "decode", "decode-tree", or what
// NotePass is told elsewhere, e.g. "schema-parse", "stored-plan"), until
// stop is called. Tests count passes with it: a run request is read twice
// from submit to the adb install (the service's strict check, the decode).
// One hook at a time; f must be safe for concurrent use.
func OnPass(f func(kind, path string)) (stop func()) {
	passHook.Store(&f)
	return func() { passHook.Store(nil) }
}

// NotePass reports one pass over JSON text of a request to the OnPass hook
// (nothing when none is set). The other decoders of a run request (the
// schema parse, the stored plan's decode) call it too.
func NotePass(kind, path string) {
	if f := passHook.Load(); f != nil {
		(*f)(kind, path)
	}
}

func pass(path string, data []byte, t reflect.Type, o Options, build bool) (any, error) {
	if !utf8.Valid(data) {
		// encoding/json would turn invalid bytes into U+FFFD, so two
		// different keys could decode to one.
		return nil, agent.Errorf(agent.ErrInvalidRequest, "%s: the body is not valid UTF-8", path)
	}
	// Duplicates are checked here (with the path in the message), not by
	// jsontext.
	w := walker{dec: jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true)), o: o, root: path, build: build}
	v, err := w.value(t, 0)
	if err != nil {
		return nil, err
	}
	if _, err := w.dec.ReadToken(); err != io.EOF {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "%s: data after the JSON value (offset %d)", path, w.dec.InputOffset())
	}
	return v, nil
}

type walker struct {
	dec  *jsontext.Decoder
	o    Options
	root string
	// at is the path below root to the value being read; a string is an
	// object key, an int an array index. Joined only for a message.
	at []any
	// build: return the values read (DecodeTree); otherwise nil.
	build bool
}

// path is the JSON path of the value being read: $.a.b[2], $.a["x y"].
func (w *walker) path() string {
	var b strings.Builder
	b.WriteString(w.root)
	for _, s := range w.at {
		switch s := s.(type) {
		case string:
			if ident.MatchString(s) && len(s) <= 64 {
				b.WriteString("." + s)
			} else {
				b.WriteString("[" + quote(s) + "]")
			}
		case int:
			fmt.Fprintf(&b, "[%d]", s)
		}
	}
	return b.String()
}

// syntax is a syntax error, said at the root path with the byte offset (a
// broken body has no path of its own).
func (w *walker) syntax(err error) error {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return agent.Errorf(agent.ErrInvalidRequest, "%s: the JSON value ends early (offset %d)", w.root, w.dec.InputOffset())
	}
	return agent.Errorf(agent.ErrInvalidRequest, "%s: not valid JSON (offset %d): %v", w.root, w.dec.InputOffset(), err)
}

// value reads one value whose Go type is t (nil: free-form), and returns it
// when building (see DecodeTree).
func (w *walker) value(t reflect.Type, depth int) (any, error) {
	tok, err := w.dec.ReadToken()
	if err != nil {
		return nil, w.syntax(err)
	}
	k := tok.Kind()
	if k != '{' && k != '[' {
		return w.scalar(tok), nil
	}
	if depth >= MaxDepth {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "%s: nested deeper than %d", w.path(), MaxDepth)
	}
	t = shapeOf(t)
	if k == '{' {
		return w.object(t, depth+1)
	}
	return w.array(t, depth+1)
}

// scalar is a string, number, true, false or null token's value when
// building (a string, json.Number, bool or nil); nil otherwise.
func (w *walker) scalar(tok jsontext.Token) any {
	if !w.build {
		return nil
	}
	switch tok.Kind() {
	case '"':
		return tok.String()
	case '0':
		return json.Number(tok.String())
	case 't':
		return true
	case 'f':
		return false
	}
	return nil
}

// array reads an array's members up to its ']' (its '[' read), each of t's
// element type when t is a slice or array (free-form otherwise), and returns
// them as []any when building.
func (w *walker) array(t reflect.Type, depth int) (any, error) {
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	var arr []any
	if w.build {
		arr = []any{}
	}
	for i := 0; w.dec.PeekKind() != ']'; i++ {
		if w.dec.PeekKind() == 0 { // an error: ReadToken says which
			break
		}
		v, err := w.member(i, elem, depth)
		if err != nil {
			return nil, err
		}
		if w.build {
			arr = append(arr, v)
		}
	}
	if err := w.end(); err != nil {
		return nil, err
	}
	if w.build {
		return arr, nil
	}
	return nil, nil
}

// member reads the value at seg (an object key or an array index) below the
// path being read.
func (w *walker) member(seg any, t reflect.Type, depth int) (any, error) {
	w.at = append(w.at, seg)
	v, err := w.value(t, depth)
	w.at = w.at[:len(w.at)-1]
	return v, err
}

// end reads the '}' or ']' closing the value being read.
func (w *walker) end() error {
	if _, err := w.dec.ReadToken(); err != nil {
		return w.syntax(err)
	}
	return nil
}

// object reads an object's members up to its '}' (its '{' read), each of
// its field's type when t is a struct, of the element type when a map
// (free-form otherwise), and returns them as map[string]any when building.
// It refuses a key seen twice, two keys equal but for case, and for a
// struct a key matching a field only by case or, unless AllowUnknown, no
// field at all.
func (w *walker) object(t reflect.Type, depth int) (any, error) {
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
	var obj map[string]any
	if w.build {
		obj = map[string]any{}
	}
	var keys keySet
	for w.dec.PeekKind() == '"' {
		tok, err := w.dec.ReadToken()
		if err != nil {
			return nil, w.syntax(err)
		}
		key := tok.String()
		if other, seen := keys.add(key); seen {
			if other == key {
				return nil, agent.Errorf(agent.ErrInvalidRequest, "duplicate key %s at %s", quote(key), w.path())
			}
			return nil, agent.Errorf(agent.ErrInvalidRequest, "keys %s and %s at %s differ only by case", quote(other), quote(key), w.path())
		}
		child := elem
		if fields != nil {
			if child, err = w.field(fields, key); err != nil {
				return nil, err
			}
		}
		v, err := w.member(key, child, depth)
		if err != nil {
			return nil, err
		}
		if w.build {
			obj[key] = v
		}
	}
	if err := w.end(); err != nil {
		return nil, err
	}
	if w.build {
		return obj, nil
	}
	return nil, nil
}

// field is the type of the struct field key names exactly (nil for an
// unknown key when AllowUnknown); an invalid_request_error for a key that
// matches a field only by case, or no field.
func (w *walker) field(fields *structFields, key string) (reflect.Type, error) {
	if f, ok := fields.exact[key]; ok {
		return f, nil
	}
	if name := fields.folded[fold(key)]; name != "" {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "key %s at %s matches field %s only by case", quote(key), w.path(), quote(name))
	}
	if !w.o.AllowUnknown {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "unknown key %s at %s (known: %s)", quote(key), w.path(), strings.Join(fields.names, ", "))
	}
	return nil, nil
}

// keySet is the keys of one object read so far: a list while short
// (EqualFold, no allocation), a map by folded key beyond 16.
type keySet struct {
	keys   []string
	folded map[string]string // folded key -> the key as sent
}

// add records key; other is the earlier key equal to it under simple case
// folding (key itself for a duplicate) and seen whether there is one.
func (s *keySet) add(key string) (other string, seen bool) {
	if s.folded != nil {
		fk := fold(key)
		other, seen = s.folded[fk]
		s.folded[fk] = key
		return other, seen
	}
	for _, k := range s.keys {
		if strings.EqualFold(k, key) {
			other, seen = k, true
			break
		}
	}
	s.keys = append(s.keys, key)
	if len(s.keys) > 16 {
		s.folded = make(map[string]string, 2*len(s.keys))
		for _, k := range s.keys {
			s.folded[fold(k)] = k
		}
	}
	return other, seen
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
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		// The smallest of an ASCII letter's orbit is its upper case (the
		// orbits of k and s hold U+212A and U+017F, both larger).
		return strings.ToUpper(s)
	}
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
