package agent

import (
	"bytes"
	"encoding/json"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"sync"
)

// Redacted replaces secrets.
const Redacted = "<REDACTED>"

var (
	// Keys whose values are secrets, matched case-insensitively anywhere in the key.
	secretKey = regexp.MustCompile(`(?i)(token|passw(or)?d|secret|api[_-]?key|access[_-]?key|private[_-]?key|authorization|credential|cookie)`)
	// Keys that match secretKey but carry no secret.
	notSecretKey = map[string]bool{"resumeToken": true, "fencingToken": true}
	// Names of URL query, fragment and ;path parameters whose values are
	// secrets, matched case-insensitively anywhere in the (percent-decoded)
	// name: presigned S3 X-Amz-Signature / X-Amz-Credential /
	// X-Amz-Security-Token, GCS X-Goog-Signature, Azure SAS sig, CloudFront
	// Signature, token=, api_key=, password=, servlet and PHP session ids
	// (jsessionid, PHPSESSID), ….
	secretParam = regexp.MustCompile(`(?i)(token|passw(or)?d|pwd|secret|key|signature|credential|auth|sig|sess)`)
	// Query parameter names secretParam matches that carry no secret.
	notSecretQuery = map[string]bool{"x-amz-signedheaders": true, "x-goog-signedheaders": true}
	// libpq keyword/value connection strings and KEY=value text:
	// password=…, sslpassword='…', PGPASSWORD=…. The value is single-quoted
	// (backslash escapes, as libpq reads it) or runs to the next blank.
	keywordPassword = regexp.MustCompile(`(?i)(^|[\s(,"'\x60])(\w*passw(?:or)?d\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)
	bearer          = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}`)
	// API tokens (token.go) wherever they appear, e.g. pasted into a run input.
	apiToken = regexp.MustCompile(TokenPrefix + `[A-Za-z0-9_-]{8,}`)
)

// secretKeys caches isSecretKey by key (payload keys repeat in every event;
// the regexp was 3% of the daemon's CPU at 32 devices). At most
// secretKeysMax keys are kept, so arbitrary keys cannot grow it without bound.
// A plain map under a RWMutex, not a sync.Map: it is read with a key still in
// bytes (isSecretKeyBytes) without copying it into a string.
var (
	secretKeysMu sync.RWMutex
	secretKeys   = map[string]bool{}
)

const secretKeysMax = 4096

func isSecretKey(k string) bool {
	secretKeysMu.RLock()
	v, ok := secretKeys[k]
	secretKeysMu.RUnlock()
	if ok {
		return v
	}
	return learnSecretKey(k)
}

// isSecretKeyBytes is isSecretKey(string(k)), without the copy when cached.
func isSecretKeyBytes(k []byte) bool {
	secretKeysMu.RLock()
	v, ok := secretKeys[string(k)]
	secretKeysMu.RUnlock()
	if ok {
		return v
	}
	return learnSecretKey(string(k))
}

func learnSecretKey(k string) bool {
	secret := secretKey.MatchString(k) && !notSecretKey[k]
	secretKeysMu.Lock()
	if len(secretKeys) < secretKeysMax {
		secretKeys[k] = secret
	}
	secretKeysMu.Unlock()
	return secret
}

// RedactString hides credentials inside a string, wherever a URL, a
// connection string or a header sits in it: URL userinfo
// ("https://u:p@host/x" -> "https://<REDACTED>@host/x"), the values of
// secret-looking query, fragment and ;path parameters
// ("…/app.apk?X-Amz-Credential=<REDACTED>&X-Amz-Date=20250101T000000Z&X-Amz-Signature=<REDACTED>",
// "…/x;jsessionid=<REDACTED>"), libpq keyword passwords
// ("host=db password=<REDACTED>"), API tokens and Bearer/Basic
// authorization values. The rest stays readable. Applying it twice gives
// the same string.
//
// URLs are found by their scheme ("xyz://") and cut the way their parsers
// cut them (net/url: the userinfo runs to the authority's last '@'; libpq,
// whose reading counts for every scheme: to the first '@' before a '/'), so a
// quote or any other character a password may hold does not end it early.
// A URL runs to the next blank (or, when a '"' opens it, to the next '"'
// not escaped by a backslash, Go's %q). One that url.Parse refuses, or
// whose userinfo is followed by another '@', loses everything up to its
// last '@'. Values run to the next '&', ';',
// '#' or the URL's end.
func RedactString(s string) string {
	if strings.Contains(s, TokenPrefix) {
		s = apiToken.ReplaceAllString(s, Redacted)
	}
	if !mayHideURLOrHeader(s) {
		return s
	}
	s = redactText(s)
	if contains(s, "passw", true) {
		s = keywordPassword.ReplaceAllStringFunc(s, func(m string) string {
			sub := keywordPassword.FindStringSubmatch(m)
			if sub[3] == "" {
				return m
			}
			return sub[1] + sub[2] + Redacted
		})
	}
	s = bearer.ReplaceAllString(s, "${1} "+Redacted)
	return s
}

// redactText hides URL userinfo and secret parameters in s (RedactString
// without tokens, keywords and headers).
func redactText(s string) string {
	var b strings.Builder
	done := 0
	for i := 0; i < len(s); {
		p, a := nextScheme(s, i)
		if p < 0 {
			break
		}
		quoted := p > 0 && s[p-1] == '"'
		end := urlEnd(s, a, quoted)
		b.WriteString(redactParams(s[done:p]))
		b.WriteString(redactURL(s[p:end], a-p))
		done, i = end, end
	}
	if done == 0 {
		return redactParams(s)
	}
	b.WriteString(redactParams(s[done:]))
	return b.String()
}

// nextScheme finds the next "scheme://" at or after i: p its first byte,
// a the byte after "//"; p < 0 when there is none.
func nextScheme(s string, i int) (p, a int) {
	for {
		k := strings.Index(s[i:], "://")
		if k < 0 {
			return -1, -1
		}
		k += i
		p = k
		for p > 0 && isSchemeByte(s[p-1]) {
			p--
		}
		// A scheme starts with a letter (RFC 3986).
		for p < k && !isLetter(s[p]) {
			p++
		}
		if p < k {
			return p, k + 3
		}
		i = k + 3
	}
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isSchemeByte(c byte) bool {
	return isLetter(c) || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// urlEnd is where the URL whose authority starts at a ends: the next
// blank, the next unescaped '"' when quoted, or a ',' that starts another
// URL (NATS server lists).
func urlEnd(s string, a int, quoted bool) int {
	for k := a; k < len(s); k++ {
		switch c := s[k]; {
		case isBlank(c):
			return k
		case quoted && c == '"' && s[k-1] != '\\':
			return k
		case c == ',':
			if p, _ := nextScheme(s, k+1); p == k+1 {
				return k
			}
		}
	}
	return len(s)
}

// redactURL hides the userinfo and secret parameters of u, one URL whose
// authority starts at u[a:].
func redactURL(u string, a int) string {
	if rest, ok := strings.CutPrefix(u[a:], Redacted+"@"); ok {
		return u[:a] + Redacted + "@" + redactText(rest)
	}
	at := userinfoEnd(u, a)
	if at < 0 {
		return u[:a] + redactText(u[a:])
	}
	return u[:a] + Redacted + "@" + redactText(u[at+1:])
}

// userinfoEnd is the index in u of the '@' that ends u's userinfo, -1 when
// u has none. It takes the longest of the readings of u's parsers:
// net/url's (the last '@' before the first '/', '?' or '#'), libpq's
// (the first '@' before a '/'; pgx for postgres://), and, when url.Parse refuses
// u or a userinfo is followed by another '@' (a '/' or '#' in a password
// strands its '@' in the path), the last '@' of all.
func userinfoEnd(u string, a int) int {
	auth := u[a:]
	if i := strings.IndexAny(auth, "/?#"); i >= 0 {
		auth = auth[:i]
	}
	at := -1
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		at = a + i
	}
	// libpq's reading, for every scheme: a '?' or '#' in a password would
	// otherwise end net/url's authority before its '@'
	// (https://u:p#w@host parses as host "u", port "p").
	if i := strings.IndexAny(u[a:], "@/"); i >= 0 && u[a+i] == '@' {
		at = max(at, a+i)
	}
	_, err := url.Parse(strings.TrimRight(u, ".,:;)]'\""))
	scheme := strings.ToLower(u[:a])
	pg := scheme == "postgres://" || scheme == "postgresql://" // nothing after a DSN's authority holds an '@'
	if err != nil || at >= 0 || pg {
		// Refused by url.Parse, or a userinfo followed by another '@': a
		// '/', '?' or '#' in the password may have ended the authority
		// early (https://u:p/w#x@host), so everything up to the last '@'
		// goes; at worst a host and path are hidden too.
		if i := strings.LastIndexByte(u[a:], '@'); i >= 0 {
			at = max(at, a+i)
		}
	}
	return at
}

// redactParams hides the values of secret-looking name=value parameters
// that follow a '?', '&', ';' or '#' in s. A value runs to the next '&',
// ';', '#', blank or the end of s; prose punctuation and a quote at its end
// ("…?sig=x: 100%", "\"…?sig=x\"", at most two such characters) are not
// the value's.
func redactParams(s string) string {
	if strings.IndexAny(s, "?&;#") < 0 {
		return s
	}
	var b strings.Builder
	done := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '?' && c != '&' && c != ';' && c != '#' {
			continue
		}
		n, secret := secretParamAt(s, i)
		if n < 0 {
			continue
		}
		if !secret {
			i = n
			continue
		}
		v := n + 1
		value, e := paramValue(s, v)
		if value != "" {
			b.WriteString(s[done:v])
			b.WriteString(Redacted)
			done = v + len(value)
		}
		i = e - 1
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// secretParamAt reads the parameter name after the separator at s[i]: n is
// the index of its '=' (-1 when no name=value starts there), secret whether
// the name (percent-decoded) is secret-looking.
func secretParamAt(s string, i int) (n int, secret bool) {
	n = i + 1
	for n < len(s) && !isBlank(s[n]) && strings.IndexByte("=?&;#\"'<>", s[n]) < 0 {
		n++
	}
	if n == i+1 || n >= len(s) || s[n] != '=' {
		return -1, false
	}
	name := s[i+1 : n]
	if dec, err := url.QueryUnescape(name); err == nil {
		name = dec
	}
	return n, secretParam.MatchString(name) && !notSecretQuery[strings.ToLower(name)]
}

// paramValue is the value that starts at s[v] (without the prose
// punctuation that ends it) and e, the index where its run ends.
func paramValue(s string, v int) (value string, e int) {
	e = v
	for e < len(s) && !isBlank(s[e]) && strings.IndexByte("&;#", s[e]) < 0 {
		e++
	}
	value = s[v:e]
	// At most two: a value that ends in more is not ended by prose.
	if t := strings.TrimRight(value, ":,.)]\"'"); t != "" && len(value)-len(t) <= 2 {
		value = t
	}
	return value, e
}

// mayHideURLOrHeader: s may hold URL userinfo, a query or path parameter,
// or a Bearer/Basic value; RedactString leaves s alone (beyond API tokens)
// when it does not. s is a string or its bytes (the scan of a JSON document
// reads them in place).
//
// Not ASCII counts as "may": the bearer regexp folds case the Unicode way
// ("Baſic" with a long s, U+017F, matches (?i)basic), which ASCII folding
// would miss.
func mayHideURLOrHeader[T string | []byte](s T) bool {
	// One pass: a marker byte, or a 'b'/'p' (any case) starting one of
	// the words (a log line is read once, not once per word).
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '@', '?', '&', ';', '#':
			return true
		case 'b', 'B':
			if hasFold(s[i:], "bearer") || hasFold(s[i:], "basic") {
				return true
			}
		case 'p', 'P':
			if hasFold(s[i:], "passw") {
				return true
			}
		default:
			if c >= 0x80 {
				return true
			}
		}
	}
	return false
}

// hasFold: s starts with word (ASCII lower case) in any ASCII case.
func hasFold[T string | []byte](s T, word string) bool {
	if len(s) < len(word) {
		return false
	}
	for j := 0; j < len(word); j++ {
		c := s[j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != word[j] {
			return false
		}
	}
	return true
}

// mayHoldSecret is false only when RedactString(s) == s for certain.
func mayHoldSecret[T string | []byte](s T) bool {
	return contains(s, TokenPrefix, false) || mayHideURLOrHeader(s)
}

// Redact returns v with its secrets hidden. v is any JSON-shaped value:
// map[string]any, []any, strings, numbers, bools, json.RawMessage,
// map[string]json.RawMessage, or any other value that encodes as JSON
// (structs, typed maps), which is walked through its JSON encoding. Values
// under secret-looking keys (token, password, secret, apikey, access key,
// private key, authorization, credential, cookie; resumeToken excepted)
// become "<REDACTED>" (null and "" stay) and every string goes through RedactString.
//
// The result has v's type when nothing was redacted, and for the types listed
// above. Another type with something redacted comes back as a
// json.RawMessage of its redacted encoding; one that does not encode as JSON
// comes back as it is.
func Redact(v any) any {
	out, _ := redact(v)
	return out
}

// RedactJSON is Redact for one raw JSON document: the document re-encoded
// (keys sorted, no HTML escaping) with its secrets hidden, or b itself when
// it holds none. Bytes that are not one JSON value are redacted as text
// (RedactString).
func RedactJSON(b []byte) []byte {
	out, _ := redactJSON(b)
	return out
}

func redactJSON(b []byte) ([]byte, bool) {
	if len(bytes.TrimSpace(b)) == 0 {
		return b, false
	}
	if !json.Valid(b) {
		s := RedactString(string(b))
		if s == string(b) {
			return b, false
		}
		return []byte(s), true
	}
	return redactValidJSON(b)
}

// redactValidJSON is redactJSON for bytes known to be one valid JSON value
// (json.Marshal's output), skipping the validity check.
func redactValidJSON(b []byte) ([]byte, bool) {
	if !mayNeedRedaction(b) {
		// Most payloads hold no secret: decoding them into maps to find
		// that out was 7% of the daemon's CPU at 32 devices.
		return b, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return b, false
	}
	r, changed := redact(v)
	if !changed {
		return b, false
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return []byte(`"` + Redacted + `"`), true
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), true
}

// redact is Redact, also reporting whether anything was hidden.
func redact(v any) (any, bool) {
	switch x := v.(type) {
	case nil:
		return nil, false
	case string:
		r := RedactString(x)
		return r, r != x
	case json.Number, bool, float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return v, false
	case map[string]any:
		return redactMap(x)
	case []any:
		out := make([]any, len(x))
		changed := false
		for i, val := range x {
			r, c := redact(val)
			out[i] = r
			changed = changed || c
		}
		return out, changed
	case json.RawMessage:
		r, c := redactJSON(x)
		return json.RawMessage(r), c
	case map[string]json.RawMessage:
		return redactRawMap(x)
	}
	return redactOther(v)
}

// redactMap is redact of a decoded JSON object.
func redactMap(x map[string]any) (map[string]any, bool) {
	out := make(map[string]any, len(x))
	changed := false
	for k, val := range x {
		if isSecretKey(k) && val != nil && val != "" {
			out[k] = Redacted
			changed = changed || val != Redacted
			continue
		}
		r, c := redact(val)
		out[k] = r
		changed = changed || c
	}
	return out, changed
}

// redactRawMap is redact of an object of raw JSON values.
func redactRawMap(x map[string]json.RawMessage) (map[string]json.RawMessage, bool) {
	out := make(map[string]json.RawMessage, len(x))
	changed := false
	for k, val := range x {
		if isSecretKey(k) && len(val) > 0 && string(val) != "null" && string(val) != `""` {
			out[k] = json.RawMessage(`"` + Redacted + `"`)
			changed = changed || string(val) != `"`+Redacted+`"`
			continue
		}
		r, c := redactJSON(val)
		out[k] = r
		changed = changed || c
	}
	return out, changed
}

// redactOther is redact of a value of no type redact names: named strings
// and numbers by kind, anything else through its JSON encoding.
func redactOther(v any) (any, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String: // named string types (ErrorID, …)
		r := RedactString(rv.String())
		if r == rv.String() {
			return v, false
		}
		return r, true
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return v, false
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return v, false
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v, false
	}
	r, c := redactJSON(b)
	if !c {
		return v, false
	}
	return json.RawMessage(r), true
}

// mayNeedRedaction reads one valid JSON document (json.Valid) without
// decoding it and is false only when redact of its decoding would hide
// nothing: no object key is secret-looking (isSecretKey, on the key as
// decoded, escapes included) and no string value may hold a secret
// (mayHoldSecret). Keys are never rewritten, so a key that looks like a URL
// does not count. Numbers, true, false and null hold none.
func mayNeedRedaction(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		j, escaped := stringEnd(b, i)
		if j >= len(b) {
			return true // not valid JSON after all: let the decoder say
		}
		raw := b[i : j+1]
		i = j
		k := j + 1
		for k < len(b) && (b[k] == ' ' || b[k] == '\t' || b[k] == '\n' || b[k] == '\r') {
			k++
		}
		if stringMayNeedRedaction(raw, escaped, k < len(b) && b[k] == ':') {
			return true
		}
	}
	return false
}

// stringEnd is the index of the quote that closes the JSON string opening
// at b[i] (len(b) when none does), and whether the string holds an escape.
// In valid JSON a backslash escapes one byte after it, and \uXXXX holds no
// quote.
func stringEnd(b []byte, i int) (j int, escaped bool) {
	for j = i + 1; j < len(b) && b[j] != '"'; j++ {
		if b[j] == '\\' {
			escaped = true
			j++
		}
	}
	return j, escaped
}

// stringMayNeedRedaction is mayNeedRedaction's test of one JSON string raw
// (quotes included): a key when isKey, else a value.
func stringMayNeedRedaction(raw []byte, escaped, isKey bool) bool {
	if !escaped {
		body := raw[1 : len(raw)-1]
		if isKey {
			return isSecretKeyBytes(body)
		}
		return mayHoldSecret(body)
	}
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return true
	}
	if isKey {
		return isSecretKey(str)
	}
	return mayHoldSecret(str)
}

// contains: b holds sub; with fold, sub (ASCII lower case) in any ASCII case.
func contains[T string | []byte](b T, sub string, fold bool) bool {
	for i := 0; i+len(sub) <= len(b); i++ {
		j := 0
		for ; j < len(sub); j++ {
			c := b[i+j]
			if fold && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != sub[j] {
				break
			}
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}
