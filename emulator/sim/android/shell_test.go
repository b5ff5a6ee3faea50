package android

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestShellGrammar(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	tests := []struct {
		cmd, out, err string
		status        int
	}{
		{`echo 'a  b' "c  d" e\ f`, "a  b c  d e f\n", "", 0},
		{`echo "x'y" 'x"y' \'`, "x'y x\"y '\n", "", 0},
		{`echo "a\"b\\c\$d"`, "a\"b\\c$d\n", "", 0},
		{`echo a; echo b`, "a\nb\n", "", 0},
		{`true && echo yes`, "yes\n", "", 0},
		{`false && echo yes`, "", "", 1},
		{`false || echo no`, "no\n", "", 0},
		{`false && echo a || echo b`, "b\n", "", 0},
		{`true || echo a && echo b`, "b\n", "", 0},
		{`false; echo $?`, "1\n", "", 0},
		{`nosuch; echo "st=$?"`, "st=127\n", "/system/bin/sh: nosuch: inaccessible or not found\n", 0},
		{`echo hi | grep -c h`, "1\n", "", 0},
		{`echo one two | grep -o two | grep t`, "two\n", "", 0},
		{`echo hi | grep zzz`, "", "", 1},
		{`nosuch 2>&1`, "/system/bin/sh: nosuch: inaccessible or not found\n", "", 127},
		{`nosuch 2>/dev/null`, "", "", 127},
		{`echo gone >/dev/null`, "", "", 0},
		{`echo a > /data/local/tmp/f; echo b >> /data/local/tmp/f; cat /data/local/tmp/f`, "a\nb\n", "", 0},
		{`cat < /data/local/tmp/f`, "a\nb\n", "", 0},
		{`echo err >&2`, "", "err\n", 0},
		{`sh -c 'echo "in sub"; exit 3'`, "in sub\n", "", 3},
		{`sh -c "false || echo ok"`, "ok\n", "", 0},
		{`/system/bin/echo path`, "path\n", "", 0},
		{`/data/local/tmp/tool`, "", "/system/bin/sh: /data/local/tmp/tool: inaccessible or not found\n", 127},
		{`FOO=1 echo env`, "env\n", "", 0},
		{`echo a # comment`, "a\n", "", 0},
		{"echo x\necho y", "x\ny\n", "", 0},
		{`echo 'unterminated`, "", "/system/bin/sh: syntax error: unterminated string\n", 1},
		{`| echo`, "", "/system/bin/sh: syntax error: '|' unexpected\n", 1},
		{`echo a &&`, "", "/system/bin/sh: syntax error: unexpected end of input\n", 1},
		{`cd /data/local/tmp && cat f`, "a\nb\n", "", 0},
		{`ls /data/local/tmp/*`, "/data/local/tmp/f\n", "", 0},
		{`echo x > /system/x`, "", "/system/bin/sh: can't create /system/x: Read-only file system\n", 1},
		{`dumpsys nosuchservice`, "", "Can't find service: nosuchservice\n", 0},
		{`cmd nosuchservice`, "", "cmd: Can't find service: nosuchservice\n", 20},
	}
	for _, tc := range tests {
		out, errOut, st := sh(t, d, tc.cmd)
		if out != tc.out || errOut != tc.err || st != tc.status {
			t.Errorf("%s\n got (%q, %q, %d)\nwant (%q, %q, %d)", tc.cmd, out, errOut, st, tc.out, tc.err, tc.status)
		}
	}
}

func TestShellPipeStagesRunConcurrently(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	// logcat streams until its context ends; grep -q would wait forever if the
	// stages ran one after another, so a deadline proves they overlap and that
	// cancellation reaches every stage.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- d.Shell(ctx, "logcat -v threadtime | grep -c x", nil, new(bytes.Buffer), new(bytes.Buffer))
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("pipeline did not end after its context was cancelled")
	}
	if _, _, st := sh(t, d, "logcat -c"); st != 0 {
		t.Errorf("logcat -c: %d", st)
	}
}

func TestShellOverride(t *testing.T) {
	d, _ := newTestDevice(t, Profile{Overrides: []Override{{Pattern: `dumpsys window( displays)?`, Stdout: "OEM\n", Stderr: "warn\n", ExitCode: 4}}})
	if out, e, st := sh(t, d, "dumpsys window displays"); out != "OEM\n" || e != "warn\n" || st != 4 {
		t.Errorf("override: %q %q %d", out, e, st)
	}
	if out, _, _ := sh(t, d, "echo dumpsys window"); out != "dumpsys window\n" {
		t.Errorf("an override must match the whole line, got %q", out)
	}
}

func TestShellInteractive(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	var o, e bytes.Buffer
	st := d.Shell(context.Background(), "", strings.NewReader("echo hi\nfalse\nexit\n"), &o, &e)
	if st != 1 || o.String() != "emu64xa:/ $ hi\nemu64xa:/ $ 1|emu64xa:/ $ " {
		t.Errorf("interactive: %d %q", st, o.String())
	}
}

func FuzzShellParse(f *testing.F) {
	for _, s := range []string{`echo 'a' "b" c\ d`, `a && b || c; d | e > f 2>&1 < g`, `x 2>>y >&2 &`, `"unterminated`, `a | | b`, `$? "$?" '$?'`, `ls *.apk`, "a\n\nb\\\n"} {
		f.Add(s)
	}
	d, _ := newTestDevice(f, Profile{})
	f.Fuzz(func(t *testing.T, s string) {
		list, err := parseShell(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "syntax error: ") {
				t.Fatalf("error not in mksh's form: %v", err)
			}
			return
		}
		for _, it := range list {
			if len(it.pl.cmds) == 0 {
				t.Fatalf("empty pipeline from %q", s)
			}
		}
		// Running only harmless builtins keeps the fuzzer off the fs.
		if !strings.ContainsAny(s, "&|;<>\n") && strings.HasPrefix(s, "echo ") {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			d.Shell(ctx, s, nil, new(bytes.Buffer), new(bytes.Buffer))
		}
	})
}
