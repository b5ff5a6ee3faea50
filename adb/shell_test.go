package adb

import (
	"bytes"
	"strings"
	"testing"
)

func TestDecodeShellV2Framing(t *testing.T) {
	var b []byte
	b = append(b, shellPacket(shellStdout, []byte("out1 "))...)
	b = append(b, shellPacket(shellStderr, []byte("err"))...)
	b = append(b, shellPacket(shellStdout, []byte("out2"))...)
	b = append(b, shellPacket(shellExit, []byte{42})...)
	r, err := DecodeShellV2(strings.NewReader(string(b)))
	if err != nil || string(r.Stdout) != "out1 out2" || string(r.Stderr) != "err" || r.ExitCode != 42 {
		t.Fatalf("%+v %v", r, err)
	}
	// A stream cut before the exit packet is an error, never a 0 exit code.
	if _, err := DecodeShellV2(strings.NewReader(string(b[:len(b)-6]))); err == nil {
		t.Fatal("truncated stream accepted")
	}
	out, code, ok := splitExitMarker([]byte("hello\n" + exitMarker + "3\r\n"))
	if !ok || code != 3 || string(out) != "hello\n" {
		t.Fatalf("%q %d %v", out, code, ok)
	}
}

func FuzzDecodeShellV2(f *testing.F) {
	f.Add(append(append(shellPacket(shellStdout, []byte("hi")), shellPacket(shellStderr, []byte("e"))...),
		shellPacket(shellExit, []byte{3})...))
	f.Add([]byte{1, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeShellV2(bytes.NewReader(b))
		if err == nil && (len(r.Stdout)+len(r.Stderr) > len(b) || r.ExitCode < 0 || r.ExitCode > 255) {
			t.Fatalf("%+v from %d bytes", r, len(b))
		}
		if out, code, ok := splitExitMarker(b); ok && (len(out) > len(b) || code < 0 && !bytes.Contains(b, []byte("-"))) {
			t.Fatalf("marker split %q %d", out, code)
		}
	})
}
