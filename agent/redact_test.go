package agent_test

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/screengraph/screengraph-agent/agent"
)

const presigned = "https://my-bucket.s3.us-east-1.amazonaws.com/builds/app-1.2.3.apk" +
	"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20250101%2Fus-east-1%2Fs3%2Faws4_request" +
	"&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-Security-Token=FwoGZXIvYXdzEXAMPLETOKEN" +
	"&X-Amz-SignedHeaders=host&X-Amz-Signature=0123456789abcdefSIGNATURE"

const presignedRedacted = "https://my-bucket.s3.us-east-1.amazonaws.com/builds/app-1.2.3.apk" +
	"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=<REDACTED>" +
	"&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-Security-Token=<REDACTED>" +
	"&X-Amz-SignedHeaders=host&X-Amz-Signature=<REDACTED>"

// Each kind of secret, alone and inside longer strings; the rest of the URL
// stays readable.
func TestRedactStringSecrets(t *testing.T) {
	for in, want := range map[string]string{
		// URL userinfo
		"https://builder:pa55w0rd@artifacts.example.com/app.apk": "https://<REDACTED>@artifacts.example.com/app.apk",
		"https://ci-token@artifacts.example.com/app.apk":         "https://<REDACTED>@artifacts.example.com/app.apk",
		"s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI@bucket/app.apk": "s3://<REDACTED>@bucket/app.apk",
		"https://u:p@ss@host/app.apk":                            "https://<REDACTED>@host/app.apk", // '@' in the password
		"s3://bucket/builds/app@2.apk":                           "s3://bucket/builds/app@2.apk",    // '@' in the path only
		"postgres://agent:s3cr3t@db:5432/sg?sslmode=disable":     "postgres://<REDACTED>@db:5432/sg?sslmode=disable",
		// presigned S3 (credential, security token, signature), others kept
		presigned: presignedRedacted,
		// token=, sig= (Azure SAS), Signature= (CloudFront), GCS
		"https://h/app.apk?token=abc123&v=2":                                                           "https://h/app.apk?token=<REDACTED>&v=2",
		"https://acct.blob.core.windows.net/c/app.apk?sv=2022-11-02&sp=r&sig=AbC%2Bd%3D":               "https://acct.blob.core.windows.net/c/app.apk?sv=2022-11-02&sp=r&sig=<REDACTED>",
		"https://d111.cloudfront.net/app.apk?Expires=1700000000&Signature=Xyz~abc&Key-Pair-Id=K2J":     "https://d111.cloudfront.net/app.apk?Expires=1700000000&Signature=<REDACTED>&Key-Pair-Id=<REDACTED>",
		"https://storage.googleapis.com/b/app.apk?X-Goog-Credential=sa%40p&X-Goog-Signature=beef#frag": "https://storage.googleapis.com/b/app.apk?X-Goog-Credential=<REDACTED>&X-Goog-Signature=<REDACTED>#frag",
		"GET /a?api_key=zzz&x=1": "GET /a?api_key=<REDACTED>&x=1",
		// path parameters
		"https://h/builds/x.apk;token=SECRET":        "https://h/builds/x.apk;token=<REDACTED>",
		"s3://b/x.apk;auth=abc;v=1":                  "s3://b/x.apk;auth=<REDACTED>;v=1",
		`Get "https://h/x.apk;sig=s1g?k=v": refused`: `Get "https://h/x.apk;sig=<REDACTED>": refused`,
		// embedded in longer strings (Go's url.Error quotes the URL)
		`artifact_unavailable: Get "https://u:pw@h:8443/app.apk?token=t0k&x=1": tls: failed to verify certificate`: `artifact_unavailable: Get "https://<REDACTED>@h:8443/app.apk?token=<REDACTED>&x=1": tls: failed to verify certificate`,
		"download s3://AKIA:sekret@bucket/app.apk?sig=s1g: 100%":                                                   "download s3://<REDACTED>@bucket/app.apk?sig=<REDACTED>: 100%",
		"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig":                                                       "Authorization: Bearer <REDACTED>",
		// the regexp folds case the Unicode way: a long s (U+017F) is an s
		"Authorization: Ba\u017fic dXNlcjpwYXNzd29yZA==": "Authorization: Ba\u017fic <REDACTED>",
		// quotes and other characters a password may hold (issue 22 §3)
		"https://bob:Hunt'er2@host/app.apk?token=ab'cd":                 "https://<REDACTED>@host/app.apk?token=<REDACTED>",
		`fetching "https://bob:Hunt'er2@host/app.apk?token=ab'cd": 404`: `fetching "https://<REDACTED>@host/app.apk?token=<REDACTED>": 404`,
		`Get "https://u:p\"w@h/x?sig=a\"b": refused`:                    `Get "https://<REDACTED>@h/x?sig=<REDACTED>": refused`,
		"postgres://u:pa'ss@db:5432/sg":                                 "postgres://<REDACTED>@db:5432/sg",
		"postgres://u:pa/ss@db:5432/sg":                                 "postgres://<REDACTED>@db:5432/sg", // libpq's first '@'
		"https://u:pa#ss@h/x":                                           "https://<REDACTED>@h/x",           // does not parse: last '@'
		"postgres://u:p@h1:5432,h2:5433/sg":                             "postgres://<REDACTED>@h1:5432,h2:5433/sg",
		"nats://a:p1@n1:4222,nats://b:p2@n2:4222":                       "nats://<REDACTED>@n1:4222,nats://<REDACTED>@n2:4222",
		"https://h/login?next=https://u:p@h2/x&%74oken=t":               "https://h/login?next=https://<REDACTED>@h2/x&%74oken=<REDACTED>",
		"https://h/app/index.jsp;jsessionid=0A1B2C?x=1":                 "https://h/app/index.jsp;jsessionid=<REDACTED>",
		"https://h/cb#access_token=abc&state=1":                         "https://h/cb#access_token=<REDACTED>&state=1",
		"https://bob:0#00@artifacts.example.com/app.apk?x=1":            "https://<REDACTED>@artifacts.example.com/app.apk?x=1",
		"https://bob:a@b/c?d#e@artifacts.example.com/app.apk":           "https://<REDACTED>@artifacts.example.com/app.apk",
		"postgres://agent:000/@db:5432/sg":                              "postgres://<REDACTED>@db:5432/sg",
		"https://h/app.apk?token=000\"\"\"\"&v=2":                       "https://h/app.apk?token=<REDACTED>&v=2",
		// libpq keyword/value connection strings
		"host=db user=agent password=s3cr3t dbname=sg":    "host=db user=agent password=<REDACTED> dbname=sg",
		"host=db password='pa ss\\' x' sslpassword = k3y": "host=db password=<REDACTED> sslpassword = <REDACTED>",
		"PGPASSWORD=s3cr3t psql":                          "PGPASSWORD=<REDACTED> psql",
		// nothing secret
		"https://registry.example.com/@scope/pkg.apk":              "https://registry.example.com/@scope/pkg.apk",
		"http://127.0.0.1:4723/wd/hub":                             "http://127.0.0.1:4723/wd/hub",
		"s3://bucket/app.apk":                                      "s3://bucket/app.apk",
		"mCurrentFocus=Window{1 u0 com.example.app/.HomeActivity}": "mCurrentFocus=Window{1 u0 com.example.app/.HomeActivity}",
		"user@example.com wrote":                                   "user@example.com wrote",
	} {
		got := agent.RedactString(in)
		if got != want {
			t.Errorf("%q\n -> %q\nwant %q", in, got, want)
		}
		if again := agent.RedactString(got); again != got {
			t.Errorf("not idempotent: %q -> %q", got, again)
		}
	}
}

type refHolder struct {
	Ref   string `json:"apkStorageObjectReference"`
	Token string `json:"apiToken"`
	N     int    `json:"n"`
}

// Redact walks any JSON-shaped value: maps and slices of any, json.RawMessage,
// maps of json.RawMessage (a run's outputs), structs; secret-named keys are
// hidden whole, strings lose their URL credentials.
func TestRedactWalksValues(t *testing.T) {
	ref := "https://u:pw@h/app.apk?X-Amz-Signature=s1g"
	refR := "https://<REDACTED>@h/app.apk?X-Amz-Signature=<REDACTED>"

	got := agent.Redact(map[string]any{
		"ref": ref, "password": "hunter2", "resumeToken": "01ULID", "n": 3, "ok": true, "none": nil,
		"list": []any{ref, 1.5, map[string]any{"accessKey": "AKIA"}},
	})
	want := map[string]any{
		"ref": refR, "password": agent.Redacted, "resumeToken": "01ULID", "n": 3, "ok": true, "none": nil,
		"list": []any{refR, 1.5, map[string]any{"accessKey": agent.Redacted}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("map: %#v", got)
	}

	// A run's success outputs: map[string]json.RawMessage.
	outputs := map[string]json.RawMessage{
		"ProvisionApp": json.RawMessage(`{"applicationUnderTestDescriptor":{"apkStorageObjectReference":"` + ref + `"},"cookie":"c=1","retryable":null}`),
		"WaitIdle":     json.RawMessage(`{"quiet":620}`),
	}
	ro, ok := agent.Redact(outputs).(map[string]json.RawMessage)
	if !ok {
		t.Fatalf("outputs came back as %T", agent.Redact(outputs))
	}
	if s := string(ro["ProvisionApp"]); strings.Contains(s, "pw") || strings.Contains(s, "s1g") || strings.Contains(s, "c=1") ||
		!strings.Contains(s, refR) || !strings.Contains(s, `"retryable":null`) {
		t.Errorf("ProvisionApp output %s", s)
	}
	if string(ro["WaitIdle"]) != `{"quiet":620}` {
		t.Errorf("untouched output changed: %s", ro["WaitIdle"])
	}

	// json.RawMessage keeps its type.
	raw, ok := agent.Redact(json.RawMessage(`["` + ref + `"]`)).(json.RawMessage)
	if !ok || string(raw) != `["`+refR+`"]` {
		t.Errorf("raw %T %s", agent.Redact(json.RawMessage(`["`+ref+`"]`)), raw)
	}

	// A struct goes through its JSON encoding; without secrets it is returned as is.
	if r, ok := agent.Redact(refHolder{Ref: ref, Token: "t", N: 1}).(json.RawMessage); !ok ||
		string(r) != `{"apiToken":"<REDACTED>","apkStorageObjectReference":"`+refR+`","n":1}` {
		t.Errorf("struct: %s", r)
	}
	clean := refHolder{Ref: "s3://bucket/app.apk", N: 2}
	if r := agent.Redact(clean); r != clean {
		t.Errorf("clean struct came back as %#v", r)
	}
	if r := agent.Redact(agent.ErrorID("x")); r != agent.ErrorID("x") {
		t.Errorf("named string: %#v", r)
	}
}

func TestRedactJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"input":{"provisionApp":{"applicationUnderTestDescriptor":{"apkStorageObjectReference":"s3://AK:sk@b/k.apk?X-Amz-Security-Token=tt"}}}}`: `{"input":{"provisionApp":{"applicationUnderTestDescriptor":{"apkStorageObjectReference":"s3://<REDACTED>@b/k.apk?X-Amz-Security-Token=<REDACTED>"}}}}`,
		`{"text":"download https://h/a.apk?a=1&token=x: 100%","kind":"log"}`:                                                                       `{"kind":"log","text":"download https://h/a.apk?a=1&token=<REDACTED>: 100%"}`,
		`{"client_secret":{"nested":1},"big":9007199254740991}`:                                                                                    `{"big":9007199254740991,"client_secret":"<REDACTED>"}`,
		`"https://u:p@h/x"`: `"https://<REDACTED>@h/x"`,
		// unchanged documents come back byte for byte
		"{\n  \"b\": 1,\n  \"a\": \"s3://bucket/app.apk\"\n}": "{\n  \"b\": 1,\n  \"a\": \"s3://bucket/app.apk\"\n}",
		``: ``,
		// not JSON: redacted as text
		`fetch https://u:p@h/x failed`: `fetch https://<REDACTED>@h/x failed`,
	} {
		if got := string(agent.RedactJSON([]byte(in))); got != want {
			t.Errorf("%s\n -> %s\nwant %s", in, got, want)
		}
	}
}

// Events built by NewEvent (the engine's token_delta lines, node outputs,
// failure summaries) carry no secret, and their checksum is over the stored,
// redacted payload.
func TestNewEventRedactsPayload(t *testing.T) {
	run := agent.Run{RunID: "01JBD0QJ8K9M2N3P4Q5R6S7T8V", TenantID: "t"}
	ids := agent.NewULIDs(agent.SystemClock{}, rand.New(rand.NewSource(1)))
	ev, err := agent.NewEvent(run, 1, agent.KindNodeTokenDelta, agent.TokenDeltaPayload{
		NodeName: "ProvisionApp", TokenDelta: agent.Log("artifact %s downloaded", presigned),
	}, agent.SystemClock{}, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"AKIAIOSFODNN7EXAMPLE", "FwoGZXIvYXdzEXAMPLETOKEN", "0123456789abcdefSIGNATURE"} {
		if strings.Contains(string(ev.Payload), s) {
			t.Errorf("payload holds %s: %s", s, ev.Payload)
		}
	}
	if !strings.Contains(string(ev.Payload), "X-Amz-Date=20250101T000000Z") {
		t.Errorf("payload lost the readable part: %s", ev.Payload)
	}
	if err := agent.VerifyChecksum(ev); err != nil {
		t.Error(err)
	}
}

// FuzzRedactURLCredentials: a password of any printable characters but
// blanks in a URL's userinfo (that its parser, net/url or pgx's, reads as
// the password, or that does not parse), and a value of a secret query or ;path
// parameter, leave no piece (4 bytes and longer) in RedactString's output,
// whether the URL stands alone, follows prose or sits in Go's %q; and
// RedactString is idempotent on what it returns.
func FuzzRedactURLCredentials(f *testing.F) {
	for _, s := range []string{"Hunt'er2", `pa"ss`, "a@b/c?d#e", "x:y;z=1&w", "%zz%41", `\"q`, "<REDACTED>", "sgat_"} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(5))
	}
	f.Fuzz(func(t *testing.T, secret string, shape uint8) {
		var b strings.Builder
		for _, r := range secret {
			if r > ' ' && r < 0x7f {
				b.WriteRune(r)
			}
		}
		p := b.String()
		if len(p) < 4 || len(p) > 64 || strings.ContainsAny(p, "<>") {
			return // "<REDACTED>" itself is what the output holds
		}
		// mk builds the shape's URL around a password; the neutral URL
		// (the same shape around a filler) tells the text's own pieces from
		// leaked ones: a piece of p may stand in the output by the URL's
		// structure alone (p `x=1"` in `?x=1": EOF`, found by the fuzzer).
		var mk func(pw string) string
		switch shape % 3 {
		case 0:
			mk = func(pw string) string { return "https://bob:" + pw + "@artifacts.example.com/app.apk?x=1" }
			// A credential is what the URL's parser reads as one.
			if pu, err := url.Parse(mk(p)); err == nil {
				if pw, _ := pu.User.Password(); pw != p && pu.User.String() != "bob:"+p {
					return
				}
			}
		case 1:
			mk = func(pw string) string { return "postgres://agent:" + pw + "@db:5432/sg" }
			if cfg, err := pgconn.ParseConfig(mk(p)); err == nil && cfg.Password != p {
				return
			}
		default:
			// A value stops at '&', ';' or '#' by definition.
			v := strings.NewReplacer("&", "", ";", "", "#", "").Replace(p)
			if len(v) < 4 {
				return
			}
			p = v
			mk = func(pw string) string { return "https://h/app.apk?X-Amz-Date=1&token=" + pw + "&v=2" }
		}
		u, un := mk(p), mk("QQQQ")
		texts := func(u string) []string {
			return []string{u, "fetch " + u + ": refused", fmt.Sprintf("Get %q: EOF", u)}
		}
		neutral := texts(un)
		for k, text := range texts(u) {
			got, base := agent.RedactString(text), agent.RedactString(neutral[k])
			if shape%3 != 2 && !strings.Contains(got, agent.Redacted) {
				t.Fatalf("%q -> %q: nothing redacted", text, got)
			}
			for i := 0; i+4 <= len(p); i++ {
				piece := p[i : i+4]
				if strings.Count(got, piece) > strings.Count(base, piece) && !strings.Contains(agent.Redacted, piece) {
					t.Fatalf("%q -> %q keeps %q of %q", text, got, piece, p)
				}
			}
			if again := agent.RedactString(got); again != got {
				t.Fatalf("not idempotent: %q -> %q -> %q", text, got, again)
			}
		}
	})
}
