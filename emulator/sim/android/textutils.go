package android

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
)

// The toybox text tools clients pipe dumpsys output into (head, tail, wc) and
// the digests they check pushed files with. Option forms are toybox's.

func init() {
	registerCommand("head", cmdHead)
	registerCommand("tail", cmdTail)
	registerCommand("wc", cmdWc)
	registerCommand("md5sum", digestCommand("md5sum", md5.New))
	registerCommand("sha1sum", digestCommand("sha1sum", sha1.New))
	registerCommand("sha256sum", digestCommand("sha256sum", sha256.New))
	registerCommand("uname", cmdUname)
	registerCommand("date", cmdDate)
}

// lineCount reads "-n N", "-nN" or "-N" (default 10) and returns the files.
func lineCount(tool string, c *Ctx) (int, []string, bool) {
	n := 10
	var files []string
	args := c.Args[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		var v string
		switch {
		case a == "-n" && i+1 < len(args):
			i++
			v = args[i]
		case strings.HasPrefix(a, "-n"):
			v = a[2:]
		case len(a) > 1 && a[0] == '-' && a[1] >= '0' && a[1] <= '9':
			v = a[1:]
		default:
			files = append(files, a)
			continue
		}
		k, err := strconv.Atoi(strings.TrimPrefix(v, "+"))
		if err != nil {
			fmt.Fprintf(c.Stderr, "%s: not integer: %s\n", tool, v)
			return 0, nil, false
		}
		n = k
	}
	return n, files, true
}

// inputs yields the named files' contents, or stdin when none.
func inputs(tool string, c *Ctx, files []string, fn func(name string, r io.Reader)) int {
	if len(files) == 0 {
		fn("-", c.Stdin)
		return 0
	}
	st := 0
	for _, f := range files {
		if f == "-" {
			fn(f, c.Stdin)
			continue
		}
		b, err := c.Device.ReadFile(c.path(f))
		if err != nil {
			toyErr(c, tool, f, err)
			st = 1
			continue
		}
		fn(f, bytes.NewReader(b))
	}
	return st
}

func cmdHead(c *Ctx) int {
	n, files, ok := lineCount("head", c)
	if !ok {
		return 1
	}
	return inputs("head", c, files, func(_ string, r io.Reader) {
		br := bufio.NewReader(r)
		for i := 0; i < n; i++ {
			line, err := br.ReadString('\n')
			io.WriteString(c.Stdout, line)
			if err != nil {
				break
			}
		}
		// Drain so a writer piping into head is not blocked forever.
		io.Copy(io.Discard, br)
	})
}

func cmdTail(c *Ctx) int {
	n, files, ok := lineCount("tail", c)
	if !ok {
		return 1
	}
	return inputs("tail", c, files, func(_ string, r io.Reader) {
		b, _ := io.ReadAll(r)
		lines := strings.SplitAfter(string(b), "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if n < len(lines) {
			lines = lines[len(lines)-n:]
		}
		io.WriteString(c.Stdout, strings.Join(lines, ""))
	})
}

// wc [-lwc] [FILE...]: toybox prints the counts space-separated, then the name.
func cmdWc(c *Ctx) int {
	var l, w, ch bool
	var files []string
	for _, a := range c.Args[1:] {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			l = l || strings.Contains(a, "l")
			w = w || strings.Contains(a, "w")
			ch = ch || strings.Contains(a, "c")
			continue
		}
		files = append(files, a)
	}
	if !l && !w && !ch {
		l, w, ch = true, true, true
	}
	return inputs("wc", c, files, func(name string, r io.Reader) {
		b, _ := io.ReadAll(r)
		var parts []string
		if l {
			parts = append(parts, strconv.Itoa(bytes.Count(b, []byte("\n"))))
		}
		if w {
			parts = append(parts, strconv.Itoa(len(strings.Fields(string(b)))))
		}
		if ch {
			parts = append(parts, strconv.Itoa(len(b)))
		}
		if name != "-" {
			parts = append(parts, name)
		}
		fmt.Fprintln(c.Stdout, strings.Join(parts, " "))
	})
}

// digestCommand prints "<hex>  <name>" per file, as coreutils and toybox do.
func digestCommand(tool string, h func() hash.Hash) Command {
	return func(c *Ctx) int {
		var files []string
		for _, a := range c.Args[1:] {
			if !strings.HasPrefix(a, "-") || a == "-" {
				files = append(files, a)
			}
		}
		return inputs(tool, c, files, func(name string, r io.Reader) {
			d := h()
			io.Copy(d, r)
			fmt.Fprintf(c.Stdout, "%s  %s\n", hex.EncodeToString(d.Sum(nil)), name)
		})
	}
}

// uname: the fields of the API 33 emulator capture (fixtures/captures/uname).
func cmdUname(c *Ctx) int {
	const (
		kernel  = "Linux"
		node    = "localhost"
		release = "5.15.119-android13-8-00034-gd34029c8258b-ab10871489"
		version = "#1 SMP PREEMPT Wed Sep 27 18:42:24 UTC 2023"
		machine = "x86_64"
	)
	args := strings.Join(c.Args[1:], "")
	switch {
	case strings.Contains(args, "a"):
		fmt.Fprintf(c.Stdout, "%s %s %s %s %s Toybox\n", kernel, node, release, version, machine)
	case strings.Contains(args, "r"):
		fmt.Fprintln(c.Stdout, release)
	case strings.Contains(args, "m"):
		fmt.Fprintln(c.Stdout, machine)
	default:
		fmt.Fprintln(c.Stdout, kernel)
	}
	return 0
}

// cmdDate is toybox `date [+FORMAT]` for reading the clock (setting it needs
// root and is refused as on a user build): without an argument the default
// "Thu Nov 26 04:41:20 GMT 2026" form; +FORMAT takes strftime's %s (epoch
// seconds), %N (nanoseconds), %Y %m %d %H %M %S %Z %% (the device runs in
// GMT, persist.sys.timezone=GMT). An unknown conversion is copied as is.
func cmdDate(c *Ctx) int {
	now := c.Device.now().UTC()
	args := c.Args[1:]
	if len(args) == 0 {
		fmt.Fprintln(c.Stdout, now.Format("Mon Jan _2 15:04:05 GMT 2006"))
		return 0
	}
	if len(args) > 1 || !strings.HasPrefix(args[0], "+") {
		fmt.Fprintln(c.Stderr, "date: Not root")
		return 1
	}
	f := args[0][1:]
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 's':
			fmt.Fprintf(&b, "%d", now.Unix())
		case 'N':
			fmt.Fprintf(&b, "%09d", now.Nanosecond())
		case 'Y':
			fmt.Fprintf(&b, "%04d", now.Year())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(now.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", now.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", now.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", now.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", now.Second())
		case 'Z':
			b.WriteString("GMT")
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	fmt.Fprintln(c.Stdout, b.String())
	return 0
}
