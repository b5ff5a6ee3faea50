package parse

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Parsers of `dumpsys dropbox --print`, of the error-dialog windows of
// `dumpsys window` and of screencap's raw header (sources:
// fixtures/captures/SOURCES.md, "Crash and ANR evidence").

// DropboxEntry is one entry of `dumpsys dropbox --print [TAG]`
// (DropBoxManagerService.dump).
type DropboxEntry struct {
	// Time is "yyyy-MM-dd HH:mm:ss" as printed (device local time).
	Time string
	// Tag is e.g. data_app_crash, data_app_anr, system_app_anr.
	Tag string
	// Size is the byte count printed in "(text, N bytes)"; -1 when not printed.
	Size int
	// Compressed marks "(compressed text, …)".
	Compressed bool
	// Headers are the "Key: value" lines at the top of the text (Process,
	// PID, UID, Package, Subject …), in order; the first wins on duplicates.
	Headers map[string]string
	// Body is the text after the headers (the stack trace, the ANR traces).
	Body string
	// File is the entry's file, printed by `--file` on the line after the
	// entry's (DropBoxManagerService.dump: unindented with --print,
	// indented by four spaces without), e.g.
	// /data/system/dropbox/data_app_anr@1764316800123.txt.gz; Millis is the
	// epoch milliseconds its name carries (the entry's time, to the
	// millisecond and without the device's time zone). "" and 0 without
	// --file.
	File   string
	Millis int64
}

// Process is the Process: header; PID the PID: header (0 when missing).
func (e DropboxEntry) Process() string { return e.Headers["Process"] }

// PID is the PID: header, 0 when missing or not a number.
func (e DropboxEntry) PID() int {
	n, _ := strconv.Atoi(e.Headers["PID"])
	return n
}

// Exception is the first line of the body (e.g. "java.lang.RuntimeException: boom").
func (e DropboxEntry) Exception() string {
	for _, l := range lines(e.Body) {
		if strings.TrimSpace(l) != "" {
			return l
		}
	}
	return ""
}

const (
	dropboxSeparator  = "========================================"
	maxDropboxEntries = 1024
	maxDropboxHeaders = 64
)

var (
	dropboxEntryRe  = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) (\S+) \(([^)]*)\)\s*$`)
	dropboxSizeRe   = regexp.MustCompile(`(\d+) bytes`)
	dropboxHeaderRe = regexp.MustCompile(`^([A-Z][A-Za-z0-9-]*): ?(.*)$`)
	dropboxFileRe   = regexp.MustCompile(`^ {0,4}(/\S*/[A-Za-z0-9_.-]+@(\d{1,15})\.(?:txt|dat)(?:\.gz)?)\s*$`)
)

// ParseDropbox parses `dumpsys dropbox --print [--file] [TAG]` output: each
// entry is a separator line of '=', a "DATE TAG (text, N bytes)" line, with
// --file the entry's file path (DropboxEntry.File), its "Key:
// value" headers up to the first blank line or the first line that is not
// a header, then its text up to the next separator. "(No entries found.)"
// and the preamble give no entries. At most maxDropboxEntries entries from
// the first maxEvidenceInput bytes.
func ParseDropbox(out string) []DropboxEntry {
	if len(out) > maxEvidenceInput {
		out = out[:maxEvidenceInput]
	}
	var r dropboxReader
	for _, l := range lines(out) {
		if !r.line(l) {
			break
		}
	}
	r.flush()
	return r.entries
}

// dropboxReader is ParseDropbox's state between lines.
type dropboxReader struct {
	entries []DropboxEntry
	// cur is the entry being read (nil before the first entry line and
	// after a separator) and body its text lines so far.
	cur  *DropboxEntry
	body []string
	// afterSep: the previous line was a separator, so this one names the
	// entry; fileNext: the previous line named it, so this one may be its
	// --file path; inHeaders: cur's "Key: value" lines are still running.
	afterSep, fileNext, inHeaders bool
}

// line reads one line of the dump; false when maxDropboxEntries entries are
// read and another begins.
func (r *dropboxReader) line(l string) bool {
	switch {
	case strings.HasPrefix(l, dropboxSeparator) && strings.Trim(l, "=") == "":
		r.flush()
		r.afterSep = true
	case r.afterSep:
		r.afterSep = false
		return r.entryLine(l)
	case r.fileNext && r.fileLine(l):
	case r.cur == nil:
	case r.inHeaders && r.headerLine(l):
	default:
		r.body = append(r.body, l)
	}
	return true
}

// entryLine starts an entry at a "DATE TAG (text, N bytes)" line (a line
// that is not one starts nothing); false when maxDropboxEntries are read.
func (r *dropboxReader) entryLine(l string) bool {
	m := dropboxEntryRe.FindStringSubmatch(l)
	if m == nil {
		return true
	}
	if len(r.entries) >= maxDropboxEntries {
		return false
	}
	e := DropboxEntry{Time: m[1], Tag: m[2], Size: -1, Headers: map[string]string{}}
	e.Compressed = strings.HasPrefix(m[3], "compressed")
	if sm := dropboxSizeRe.FindStringSubmatch(m[3]); sm != nil {
		if n, err := strconv.Atoi(sm[1]); err == nil {
			e.Size = n
		}
	}
	r.cur, r.inHeaders, r.fileNext = &e, true, true
	return true
}

// fileLine takes the line after the entry's as its --file path when it is
// one; false when it is not (it is then a header or text).
func (r *dropboxReader) fileLine(l string) bool {
	r.fileNext = false
	m := dropboxFileRe.FindStringSubmatch(l)
	if m == nil {
		return false
	}
	r.cur.File = m[1]
	r.cur.Millis, _ = strconv.ParseInt(m[2], 10, 64)
	return true
}

// headerLine reads l as one of cur's "Key: value" headers (the first of a
// key wins; at most maxDropboxHeaders). The headers end at the first line
// that is not one: false when l is text, true when it is a header or the
// blank line that ends them.
func (r *dropboxReader) headerLine(l string) bool {
	if m := dropboxHeaderRe.FindStringSubmatch(l); m != nil && len(r.cur.Headers) < maxDropboxHeaders {
		if _, dup := r.cur.Headers[m[1]]; !dup {
			r.cur.Headers[m[1]] = strings.TrimSpace(m[2])
		}
		return true
	}
	r.inHeaders = false
	return strings.TrimSpace(l) == ""
}

// flush ends the entry being read, if any. A separator ends it before its
// --file line can come: a path after it belongs to no entry.
func (r *dropboxReader) flush() {
	if r.cur != nil {
		r.cur.Body = strings.TrimRight(strings.Join(r.body, "\n"), "\n")
		r.entries = append(r.entries, *r.cur)
	}
	r.cur, r.body, r.fileNext = nil, nil, false
}

// ErrorDialog is an error dialog window found in `dumpsys window` output.
type ErrorDialog struct {
	// Title is the window title ("Application Not Responding: com.x").
	Title string
	// Process is the process the dialog is about.
	Process string
	// ANR is true for "Application Not Responding", false for a crash
	// dialog ("Application Error").
	ANR bool
	// System marks a dialog about a system process (System UI, the system
	// server, the phone process, android.process.*), which a test cannot
	// blame on the app under test.
	System bool
	// Focused marks the dialog holding input focus (mCurrentFocus /
	// mFocusedWindow).
	Focused bool
}

var dialogWindowRe = regexp.MustCompile(`Window\{[0-9a-f]+ (?:u\d+ )?(Application Not Responding|Application Error): ([^\s{}]+)\}`)

// systemProcesses are processes whose dialogs are the system's, not an app's.
var systemProcesses = map[string]bool{
	"com.android.systemui": true, "system": true, "system_server": true, "android": true,
	"com.android.phone": true, "com.android.bluetooth": true,
}

// IsSystemProcess reports whether a dialog about proc belongs to the system
// (System UI, the system server, the phone/bluetooth processes,
// android.process.acore/media).
func IsSystemProcess(proc string) bool {
	return systemProcesses[proc] || strings.HasPrefix(proc, "android.process.")
}

// ParseErrorDialogs finds the crash ("Application Error: PROC") and ANR
// ("Application Not Responding: PROC") windows in any `dumpsys window`
// output (windows, displays, or the whole dump), one per title, in order of
// first appearance. Titles are AppErrorDialog's / AppNotRespondingDialog's
// attrs.setTitle.
func ParseErrorDialogs(out string) []ErrorDialog {
	if len(out) > maxEvidenceInput {
		out = out[:maxEvidenceInput]
	}
	var ds []ErrorDialog
	idx := map[string]int{}
	for _, l := range lines(out) {
		ms := dialogWindowRe.FindAllStringSubmatch(l, 4)
		if ms == nil {
			continue
		}
		t := strings.TrimSpace(l)
		focused := strings.HasPrefix(t, "mCurrentFocus=") || strings.HasPrefix(t, "mFocusedWindow=")
		for _, m := range ms {
			title := m[1] + ": " + m[2]
			i, ok := idx[title]
			if !ok {
				if len(ds) >= 64 {
					continue
				}
				ds = append(ds, ErrorDialog{Title: title, Process: m[2], ANR: m[1] == "Application Not Responding", System: IsSystemProcess(m[2])})
				i = len(ds) - 1
				idx[title] = i
			}
			if focused {
				ds[i].Focused = true
			}
		}
	}
	return ds
}

// ScreencapHeader is the header of `screencap` raw output (no -p):
// width, height and pixel format as 32-bit little-endian words, plus the
// colour space word from API 28 (frameworks/base cmds/screencap/screencap.cpp).
type ScreencapHeader struct {
	Width, Height int
	// Format is the android PixelFormat (1 RGBA_8888, 2 RGBX_8888, 3 RGB_888,
	// 4 RGB_565, 5 BGRA_8888, 0x16 RGBA_FP16, 0x2b RGBA_1010102).
	Format int
	// ColorSpace is 0 unknown, 1 sRGB, 2 Display P3 (API 28+; -1 before).
	ColorSpace int
	// Size is the header's size in bytes (12, or 16 with the colour space).
	Size int
	// BytesPerPixel follows from Format.
	BytesPerPixel int
}

// maxScreenSide bounds width and height (no display is larger).
const maxScreenSide = 16384

func bytesPerPixel(format int) int {
	switch format {
	case 1, 2, 5, 0x2b:
		return 4
	case 3:
		return 3
	case 4:
		return 2
	case 0x16:
		return 8
	}
	return 0
}

// ParseScreencapRaw reads the header of raw screencap output b (all of it,
// so the pixel count can be checked). apiLevel decides the header size (16
// bytes from API 28, else 12); apiLevel <= 0 infers it from b's length.
// Errors (process_error): too short, unknown pixel format, width or height
// 0 or above 16384, or a length that is not header + width×height×bpp.
func ParseScreencapRaw(b []byte, apiLevel int) (ScreencapHeader, error) {
	bad := func(format string, a ...any) (ScreencapHeader, error) {
		return ScreencapHeader{}, &Error{ID: IDProcessError, Msg: "screencap raw: " + fmt.Sprintf(format, a...)}
	}
	if len(b) < 12 {
		return bad("%d bytes, shorter than the 12-byte header", len(b))
	}
	h := ScreencapHeader{
		Width:      int(binary.LittleEndian.Uint32(b[0:])),
		Height:     int(binary.LittleEndian.Uint32(b[4:])),
		Format:     int(binary.LittleEndian.Uint32(b[8:])),
		ColorSpace: -1,
	}
	if h.Width <= 0 || h.Height <= 0 || h.Width > maxScreenSide || h.Height > maxScreenSide {
		return bad("size %dx%d outside 1..%d", h.Width, h.Height, maxScreenSide)
	}
	h.BytesPerPixel = bytesPerPixel(h.Format)
	if h.BytesPerPixel == 0 {
		return bad("unknown pixel format %d", h.Format)
	}
	pixels := h.Width * h.Height * h.BytesPerPixel
	switch {
	case apiLevel >= 28:
		h.Size = 16
	case apiLevel > 0:
		h.Size = 12
	case len(b) == 16+pixels:
		h.Size = 16
	default:
		h.Size = 12
	}
	if h.Size == 16 {
		if len(b) < 16 {
			return bad("%d bytes, shorter than the 16-byte header", len(b))
		}
		h.ColorSpace = int(binary.LittleEndian.Uint32(b[12:]))
	}
	if len(b) != h.Size+pixels {
		return bad("%d bytes, want %d (header %d + %dx%dx%d)", len(b), h.Size+pixels, h.Size, h.Width, h.Height, h.BytesPerPixel)
	}
	return h, nil
}
