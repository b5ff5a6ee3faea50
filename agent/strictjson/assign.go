package strictjson

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// Assign stores tree, a value DecodeTree returned (numbers as json.Number),
// into dst, a non-nil pointer, as encoding/json would decode tree's text
// into *dst (struct fields by their exact JSON names; unknown keys ignored;
// numbers into integer or float kinds, an overflow refused; any and
// map[string]any get float64 numbers), without encoding it again. Errors
// name the path of the value that does not fit.
func Assign(dst any, tree any) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("assign: %T is not a non-nil pointer", dst)
	}
	return assignTree(rv.Elem(), tree)
}

// assignTree stores a decoded JSON value into dst as encoding/json would
// decode its text into dst's type (struct fields by their exact JSON names:
// the schema pass has made the keys exact; unknown keys ignored; numbers into
// integer or float kinds; any/map[string]any get float64 numbers), without
// encoding it again.
func assignTree(dst reflect.Value, v any) error {
	if v == nil {
		switch dst.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
			dst.SetZero()
		}
		return nil
	}
	switch dst.Kind() {
	case reflect.Pointer:
		if dst.IsNil() {
			dst.Set(reflect.New(dst.Type().Elem()))
		}
		return assignTree(dst.Elem(), v)
	case reflect.Interface:
		if dst.NumMethod() != 0 {
			return fmt.Errorf("cannot decode into %s", dst.Type())
		}
		dst.Set(reflect.ValueOf(plainJSON(v)))
		return nil
	case reflect.Struct:
		return assignStruct(dst, v)
	case reflect.Map:
		return assignMap(dst, v)
	case reflect.Slice:
		return assignSlice(dst, v)
	}
	return assignScalar(dst, v)
}

func assignStruct(dst reflect.Value, v any) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("expected an object for %s, received %s", dst.Type(), received(v))
	}
	t := dst.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fv, ok := obj[name]
		if !ok {
			continue
		}
		if err := assignTree(dst.Field(i), fv); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func assignMap(dst reflect.Value, v any) error {
	obj, ok := v.(map[string]any)
	if !ok || dst.Type().Key().Kind() != reflect.String {
		return fmt.Errorf("expected an object for %s, received %s", dst.Type(), received(v))
	}
	m := reflect.MakeMapWithSize(dst.Type(), len(obj))
	for k, e := range obj {
		ev := reflect.New(dst.Type().Elem()).Elem()
		if err := assignTree(ev, e); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		m.SetMapIndex(reflect.ValueOf(k).Convert(dst.Type().Key()), ev)
	}
	dst.Set(m)
	return nil
}

func assignSlice(dst reflect.Value, v any) error {
	arr, ok := v.([]any)
	if !ok {
		return fmt.Errorf("expected an array for %s, received %s", dst.Type(), received(v))
	}
	s := reflect.MakeSlice(dst.Type(), len(arr), len(arr))
	for i, e := range arr {
		if err := assignTree(s.Index(i), e); err != nil {
			return fmt.Errorf("[%d]: %w", i, err)
		}
	}
	dst.Set(s)
	return nil
}

// assignScalar stores a string, boolean or json.Number of a decoded value.
func assignScalar(dst reflect.Value, v any) error {
	bad := fmt.Errorf("expected %s, received %s", dst.Type(), received(v))
	switch dst.Kind() {
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			return bad
		}
		dst.SetString(s)
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			return bad
		}
		dst.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, _ := v.(json.Number)
		i, err := n.Int64()
		if err != nil || dst.OverflowInt(i) {
			return bad
		}
		dst.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, _ := v.(json.Number)
		i, err := n.Int64()
		if err != nil || i < 0 || dst.OverflowUint(uint64(i)) {
			return bad
		}
		dst.SetUint(uint64(i))
	case reflect.Float32, reflect.Float64:
		n, _ := v.(json.Number)
		f, err := n.Float64()
		if err != nil {
			return bad
		}
		dst.SetFloat(f)
	default:
		return fmt.Errorf("cannot decode into %s", dst.Type())
	}
	return nil
}

// plainJSON converts json.Number to float64 throughout v, as encoding/json
// decodes numbers into interface values.
func plainJSON(v any) any {
	switch t := v.(type) {
	case json.Number:
		f, _ := t.Float64()
		return f
	case map[string]any:
		for k, e := range t {
			t[k] = plainJSON(e)
		}
	case []any:
		for i, e := range t {
			t[i] = plainJSON(e)
		}
	}
	return v
}

// received names v's JSON type for an error message.
func received(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number, float64:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}
