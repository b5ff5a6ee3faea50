package android

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// DropBoxManagerService as `dumpsys dropbox` prints it (DropBoxManagerService.dump;
// fixtures/captures/SOURCES.md, dropbox): crash and ANR entries of the fault
// injection, tagged data_app_crash / data_app_anr / system_app_anr.

type dropboxEntry struct {
	t    time.Time
	tag  string
	text string
}

// maxDropboxEntries is DropBoxManagerService's DEFAULT_MAX_FILES (1000); the
// oldest entries are dropped beyond it.
const maxDropboxEntries = 1000

func (d *Device) addDropboxLocked(t time.Time, tag, text string) {
	fs := d.faults
	fs.dropbox = append(fs.dropbox, dropboxEntry{t: t, tag: tag, text: text})
	if len(fs.dropbox) > maxDropboxEntries {
		fs.dropbox = fs.dropbox[len(fs.dropbox)-maxDropboxEntries:]
	}
}

// dropboxHeaderLocked is the header AMS.appendDropBoxProcessHeaders and
// addErrorToDropBox write ("Key: value" lines; the Android 11+ set).
func (d *Device) dropboxHeaderLocked(p *amProcess, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Process: %s\n", p.pkg)
	fmt.Fprintf(&b, "PID: %d\n", p.pid)
	fmt.Fprintf(&b, "UID: %d\n", p.uid)
	b.WriteString("Frozen: false\n")
	flags := 0x38c8be46
	if pk, ok := d.pm.pkgs[p.pkg]; ok {
		if pk.System {
			flags = 0x30c8be45
		}
		fmt.Fprintf(&b, "Flags: 0x%x\n", flags)
		name := pk.VersionName
		fmt.Fprintf(&b, "Package: %s v%d (%s)\n", p.pkg, pk.VersionCode, name)
	} else {
		fmt.Fprintf(&b, "Flags: 0x%x\n", flags)
	}
	fg := "Yes"
	if top := d.am.topLocked(); top.pkg != p.pkg {
		fg = "No"
	}
	fmt.Fprintf(&b, "Foreground: %s\n", fg)
	fmt.Fprintf(&b, "Process-Runtime: %d\n", now.Sub(p.started).Milliseconds())
	fmt.Fprintf(&b, "Build: %s\n", d.propLocked("ro.build.fingerprint"))
	fmt.Fprintf(&b, "Loading-Progress: 1.0\n")
	fmt.Fprintf(&b, "Dropped-Count: 0\n")
	return b.String()
}

func init() { registerDumpsys("dropbox", dumpsysDropbox) }

// dumpsysDropbox: `dumpsys dropbox [--print|-p] [--file|-f] [TAG|DATE]...`.
// Without --print it lists one line per entry with the first line of its
// text; an entry matches when every filter argument equals its tag or is
// contained in its date ("yyyy-MM-dd HH:mm:ss", device local time = GMT).
func dumpsysDropbox(c *Ctx) int {
	d := c.Device
	d.advance()
	print, file := false, false
	var filters []string
	for _, a := range c.Args[1:] {
		switch a {
		case "-p", "--print":
			print = true
		case "-f", "--file":
			file = true
		case "-h", "--help":
			fmt.Fprintln(c.Stdout, "Dropbox (dropbox) dump options:")
			fmt.Fprintln(c.Stdout, "  [-h|--help] [-p|--print] [-f|--file] [timestamp]")
			return 0
		default:
			if strings.HasPrefix(a, "-") {
				fmt.Fprintf(c.Stdout, "Unknown argument: %s\n", a)
				continue
			}
			if len(filters) < 16 {
				filters = append(filters, a)
			}
		}
	}
	d.mu.Lock()
	entries := append([]dropboxEntry(nil), d.faults.dropbox...)
	d.mu.Unlock()
	w := c.Stdout
	fmt.Fprintf(w, "Drop box contents: %d entries\n", len(entries))
	fmt.Fprintln(w, "Max entries: 1000")
	fmt.Fprintln(w, "Low priority rate limit period: 2000 ms")
	fmt.Fprintln(w, "Low priority tags: {data_app_wtf, system_server_strictmode, system_app_strictmode, data_app_strictmode, system_server_wtf, system_app_wtf, keymaster}")
	if len(filters) > 0 {
		fmt.Fprintf(w, "Searching for: %s\n", strings.Join(filters, " "))
	}
	fmt.Fprintln(w)
	n := 0
	for _, e := range entries {
		date := e.t.UTC().Format("2006-01-02 15:04:05")
		ok := true
		for _, f := range filters {
			if f != e.tag && !strings.Contains(date, f) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		n++
		if print {
			fmt.Fprintln(w, "========================================")
		}
		fmt.Fprintf(w, "%s %s (text, %d bytes)\n", date, e.tag, len(e.text))
		if file {
			// Indented only without --print (DropBoxManagerService.dump).
			indent := "    "
			if print {
				indent = ""
			}
			fmt.Fprintf(w, "%s/data/system/dropbox/%s@%d.txt\n", indent, e.tag, e.t.UnixMilli())
		}
		if print {
			io.WriteString(w, e.text)
			if !strings.HasSuffix(e.text, "\n") {
				fmt.Fprintln(w)
			}
			fmt.Fprintln(w)
		} else if !file {
			first, _, _ := strings.Cut(e.text, "\n")
			if len(first) > 70 {
				first = first[:70]
			}
			fmt.Fprintf(w, "    %s\n", first)
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "(No entries found.)")
	}
	return 0
}
