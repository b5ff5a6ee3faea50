package parse

import (
	"strings"
	"testing"
)

func FuzzParseThreadtimeLine(f *testing.F) {
	seedCaptures(f, "logcat")
	f.Add("01-05 14:03:07.123  4321  4321 E AndroidRuntime: FATAL EXCEPTION: main")
	f.Fuzz(func(t *testing.T, s string) {
		for _, line := range lines(s) {
			l, ok := ParseThreadtimeLine(line)
			if ok && (!strings.Contains(line, l.Tag) || !strings.Contains(line, l.Message) || l.PID < 0 || l.TID < 0) {
				t.Fatalf("%q -> %+v", line, l)
			}
		}
	})
}

func FuzzParseFatalExceptions(f *testing.F) {
	seedCaptures(f, "logcat")
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range ParseFatalExceptions(s, "com.example") {
			if c.TopFrame != "" && !strings.HasPrefix(c.TopFrame, "com.example.") {
				t.Fatalf("top frame %q outside the package", c.TopFrame)
			}
			if len(c.Frames) > maxCrashFrames || !strings.Contains(s, "FATAL EXCEPTION") {
				t.Fatalf("%+v", c)
			}
		}
		_ = ParseANRs(s)
	})
}

func FuzzParseDropbox(f *testing.F) {
	seedCaptures(f, "dumpsys-dropbox")
	// An empty entry, then a path after a line that starts none (it panicked).
	sep := dropboxSeparator + "\n"
	f.Add(sep + "2026-11-28 09:00:00 a (text, 0 bytes)\n" + sep + "x\n/d/a@1.txt\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, e := range ParseDropbox(s) {
			if !strings.Contains(s, e.Tag) || len(e.Headers) > maxDropboxHeaders {
				t.Fatalf("%+v", e)
			}
			_ = e.PID()
			_ = e.Exception()
		}
	})
}

func FuzzParseErrorDialogs(f *testing.F) {
	seedCaptures(f, "dumpsys-window-dialogs", "dumpsys-window-windows")
	f.Fuzz(func(t *testing.T, s string) {
		for _, d := range ParseErrorDialogs(s) {
			if !strings.Contains(s, d.Title) || d.Process == "" {
				t.Fatalf("%+v", d)
			}
		}
	})
}

func FuzzParseScreencapRaw(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00abcd"), 34)
	f.Fuzz(func(t *testing.T, b []byte, api int) {
		h, err := ParseScreencapRaw(b, api)
		if err == nil && len(b) != h.Size+h.Width*h.Height*h.BytesPerPixel {
			t.Fatalf("%+v for %d bytes", h, len(b))
		}
	})
}
