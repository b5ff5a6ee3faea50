package android

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// shPrefix starts every message of Android's /system/bin/sh (mksh) about a
// command it cannot run: "/system/bin/sh: su: inaccessible or not found" (see
// fixtures/captures/SOURCES.md).
const shPrefix = "/system/bin/sh: "

// Shell runs one command line the way adbd's `sh -c` does and returns its exit
// status. The grammar is the part of mksh that clients send: words with '…',
// "…" and backslash quoting, `$?`, `;`, `&&`, `||`, `&`, pipes, `#` comments,
// redirections (`>f`, `>>f`, `<f`, `2>&1`, `N>f`, `>&N`), NAME=VALUE prefixes, and
// `*`/`?` globs in the last path component. Profile.Overrides are matched
// against the whole line first. An empty line reads commands from stdin, one a
// line, like an interactive shell, until EOF or `exit`.
//
// Unknown commands print "/system/bin/sh: NAME: inaccessible or not found" on
// stderr and exit 127; a syntax error prints "/system/bin/sh: syntax error: …"
// and exits 1 (mksh's status for a parse error under -c).
func (d *Device) Shell(ctx context.Context, cmdline string, stdin io.Reader, stdout, stderr io.Writer) int {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	d.advance() // faults due by now happen before the command sees the device
	if o, ok := d.override(cmdline); ok {
		io.WriteString(stdout, o.Stdout)
		io.WriteString(stderr, o.Stderr)
		return o.ExitCode
	}
	// adbd runs the line as `/system/bin/sh -c LINE`: its command line,
	// which pkill -f matches like any process's.
	sh := &shellState{d: d, dir: "/", cmdline: "/system/bin/sh -c " + cmdline}
	if strings.TrimSpace(cmdline) == "" {
		return sh.interactive(ctx, stdin, stdout, stderr)
	}
	return sh.run(ctx, cmdline, stdin, stdout, stderr)
}

// compileOverride anchors a profile pattern so it must match the whole line.
func compileOverride(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + pattern + `)$`)
}

func (d *Device) override(cmdline string) (Override, bool) {
	for _, o := range d.profile.Overrides {
		re, err := compileOverride(o.Pattern) // validated in New
		if err == nil && re.MatchString(cmdline) {
			return o, true
		}
	}
	return Override{}, false
}

// shellState is one shell process: its working directory and last status.
type shellState struct {
	d      *Device
	dir    string
	status int
	// cmdline is the sh process's command line ("" for a nested or
	// background shell, which this model does not list); killedBy is the
	// signal a pkill that matched it sent (the rest of its line never runs).
	cmdline  string
	killedBy int
}

func (sh *shellState) interactive(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for {
		// mksh's Android prompt: "<device>:<dir> $ ", prefixed by the last
		// status when it is not 0 ("127|OnePlus7Pro:/ $ ", fixtures/captures/mksh).
		if sh.status != 0 {
			fmt.Fprintf(stdout, "%d|", sh.status)
		}
		fmt.Fprintf(stdout, "%s:%s $ ", sh.d.profile.DeviceName, sh.dir)
		if !sc.Scan() {
			return sh.status
		}
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "exit" {
			return sh.status
		}
		sh.run(ctx, line, strings.NewReader(""), stdout, stderr)
		if ctx.Err() != nil {
			return sh.status
		}
	}
}

func (sh *shellState) run(ctx context.Context, cmdline string, stdin io.Reader, stdout, stderr io.Writer) int {
	list, err := parseShell(cmdline)
	if err != nil {
		fmt.Fprintf(stderr, "%s%v\n", shPrefix, err)
		sh.status = 1
		return 1
	}
	return sh.runList(ctx, list, stdin, stdout, stderr)
}

// --- parser ---------------------------------------------------------------

// word is one shell word after quote removal. globbed marks an unquoted * or ?
// (expanded against the filesystem); `$?` is kept as varStatus until run time.
type word struct {
	text    string
	globbed bool
}

const varStatus = "\x00?" // NUL cannot occur in an adb shell command line

type redir struct {
	fd     int    // 0, 1, 2
	op     string // "<", ">", ">>", ">&"
	target word   // file name, or the fd number for ">&"
}

type simpleCmd struct {
	words  []word
	redirs []redir
}

type pipeline struct{ cmds []*simpleCmd }

// listItem is one pipeline and the operator that precedes it ("" for the first,
// ";", "&&", "||"); background marks a trailing "&".
type listItem struct {
	op         string
	pl         pipeline
	background bool
}

type tokKind int

const (
	tWord tokKind = iota
	tOp
)

type token struct {
	kind tokKind
	val  string // operator text for tOp
	w    word
	fd   int // redirection fd for ops ">", ">>", "<", ">&" (-1 if default)
}

// errSyntax wraps a parse error; the message follows mksh ("syntax error: …").
type errSyntax struct{ msg string }

func (e errSyntax) Error() string { return "syntax error: " + e.msg }

func tokenize(s string) ([]token, error) {
	var toks []token
	i := 0
	n := len(s)
	for i < n {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
			continue
		case c == '\n':
			toks = append(toks, token{kind: tOp, val: ";"})
			i++
			continue
		case c == '#':
			for i < n && s[i] != '\n' {
				i++
			}
			continue
		case c == ';':
			toks = append(toks, token{kind: tOp, val: ";"})
			i++
			continue
		case c == '&':
			if i+1 < n && s[i+1] == '&' {
				toks = append(toks, token{kind: tOp, val: "&&"})
				i += 2
			} else {
				toks = append(toks, token{kind: tOp, val: "&"})
				i++
			}
			continue
		case c == '|':
			if i+1 < n && s[i+1] == '|' {
				toks = append(toks, token{kind: tOp, val: "||"})
				i += 2
			} else {
				toks = append(toks, token{kind: tOp, val: "|"})
				i++
			}
			continue
		case c == '(' || c == ')' || c == '`':
			return nil, errSyntax{fmt.Sprintf("'%c' unexpected", c)}
		case c == '<' || c == '>':
			op, w := redirOp(s[i:])
			toks = append(toks, token{kind: tOp, val: op, fd: -1})
			i += w
			continue
		case c >= '0' && c <= '9' && i+1 < n && (s[i+1] == '<' || s[i+1] == '>') && (i == 0 || isBlankOrOp(s[i-1])):
			op, w := redirOp(s[i+1:])
			toks = append(toks, token{kind: tOp, val: op, fd: int(c - '0')})
			i += 1 + w
			continue
		}
		w, adv, err := readWord(s[i:])
		if err != nil {
			return nil, err
		}
		toks = append(toks, token{kind: tWord, w: w})
		i += adv
	}
	return toks, nil
}

func isBlankOrOp(c byte) bool {
	return strings.IndexByte(" \t\n;&|", c) >= 0
}

func redirOp(s string) (string, int) {
	switch {
	case strings.HasPrefix(s, ">>"):
		return ">>", 2
	case strings.HasPrefix(s, ">&"):
		return ">&", 2
	case strings.HasPrefix(s, ">|"):
		return ">", 2
	case strings.HasPrefix(s, "<&"):
		return ">&", 2 // n<&m duplicates like n>&m for our purposes
	case strings.HasPrefix(s, ">"):
		return ">", 1
	}
	return "<", 1
}

// readWord reads one word starting at s[0], removing quotes.
func readWord(s string) (word, int, error) {
	var b strings.Builder
	globbed := false
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case strings.IndexByte(" \t\n;&|<>()`", c) >= 0:
			return word{b.String(), globbed}, i, nil
		case c == '\\':
			if i+1 < len(s) {
				if s[i+1] != '\n' {
					b.WriteByte(s[i+1])
				}
				i += 2
			} else {
				i++ // a trailing backslash is dropped
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return word{}, 0, errSyntax{"unterminated string"}
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 2
		case c == '"':
			i++
			closed := false
			for i < len(s) {
				if s[i] == '"' {
					closed = true
					i++
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					if s[i+1] != '\n' {
						b.WriteByte(s[i+1])
					}
					i += 2
					continue
				}
				if s[i] == '$' && i+1 < len(s) && s[i+1] == '?' {
					b.WriteString(varStatus)
					i += 2
					continue
				}
				b.WriteByte(s[i])
				i++
			}
			if !closed {
				return word{}, 0, errSyntax{"unterminated string"}
			}
		case c == '$' && i+1 < len(s) && s[i+1] == '?':
			b.WriteString(varStatus)
			i += 2
		case c == '*' || c == '?':
			globbed = true
			b.WriteByte(c)
			i++
		default:
			b.WriteByte(c)
			i++
		}
	}
	return word{b.String(), globbed}, i, nil
}

// parseShell turns a command line into a list of pipelines.
func parseShell(s string) ([]listItem, error) {
	toks, err := tokenize(s)
	if err != nil {
		return nil, err
	}
	var list []listItem
	cur := listItem{}
	cmd := &simpleCmd{}
	pendingOp := ""
	flushCmd := func(tokText string) error {
		if len(cmd.words) == 0 && len(cmd.redirs) == 0 {
			return errSyntax{fmt.Sprintf("'%s' unexpected", tokText)}
		}
		cur.pl.cmds = append(cur.pl.cmds, cmd)
		cmd = &simpleCmd{}
		return nil
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.kind == tWord {
			cmd.words = append(cmd.words, t.w)
			continue
		}
		switch t.val {
		case "<", ">", ">>", ">&":
			if i+1 >= len(toks) || toks[i+1].kind != tWord {
				return nil, errSyntax{"newline unexpected"}
			}
			fd := t.fd
			if fd < 0 {
				fd = 1
				if t.val == "<" {
					fd = 0
				}
			}
			if fd > 2 {
				return nil, errSyntax{fmt.Sprintf("fd %d not supported", fd)}
			}
			cmd.redirs = append(cmd.redirs, redir{fd: fd, op: t.val, target: toks[i+1].w})
			i++
		case "|":
			if err := flushCmd("|"); err != nil {
				return nil, err
			}
		case ";", "&", "&&", "||":
			if len(cmd.words) == 0 && len(cmd.redirs) == 0 && len(cur.pl.cmds) == 0 {
				if t.val == ";" && pendingOp != "&&" && pendingOp != "||" && pendingOp != "|" {
					continue // empty statement between newlines / after "&"
				}
				return nil, errSyntax{fmt.Sprintf("'%s' unexpected", t.val)}
			}
			if err := flushCmd(t.val); err != nil {
				return nil, err
			}
			cur.op = pendingOp
			cur.background = t.val == "&"
			list = append(list, cur)
			cur = listItem{}
			switch t.val {
			case "&&", "||":
				pendingOp = t.val
			default:
				pendingOp = ";"
			}
		}
	}
	if len(cmd.words) > 0 || len(cmd.redirs) > 0 {
		cur.pl.cmds = append(cur.pl.cmds, cmd)
	} else if len(cur.pl.cmds) > 0 || pendingOp == "&&" || pendingOp == "||" {
		return nil, errSyntax{"unexpected end of input"}
	}
	if len(cur.pl.cmds) > 0 {
		cur.op = pendingOp
		list = append(list, cur)
	}
	return list, nil
}

// --- execution ------------------------------------------------------------

func (sh *shellState) runList(ctx context.Context, list []listItem, stdin io.Reader, stdout, stderr io.Writer) int {
	for _, it := range list {
		if ctx.Err() != nil {
			break
		}
		if sh.killedBy != 0 {
			sh.status = 128 + sh.killedBy
			break
		}
		switch it.op {
		case "&&":
			if sh.status != 0 {
				continue
			}
		case "||":
			if sh.status == 0 {
				continue
			}
		}
		if it.background {
			// The job keeps running after the shell returns; its output goes
			// to the shell's streams until the shell exits, then nowhere.
			gate := &gatedWriter{w: stdout}
			gateErr := &gatedWriter{w: stderr}
			bgsh := &shellState{d: sh.d, dir: sh.dir, status: sh.status}
			go func(pl pipeline) {
				bgsh.runPipeline(context.WithoutCancel(ctx), pl, strings.NewReader(""), gate, gateErr)
			}(it.pl)
			defer gate.close()
			defer gateErr.close()
			sh.status = 0
			continue
		}
		sh.status = sh.runPipeline(ctx, it.pl, stdin, stdout, stderr)
	}
	if sh.killedBy != 0 {
		sh.status = 128 + sh.killedBy
	}
	return sh.status
}

// gatedWriter forwards writes until closed, then drops them.
type gatedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *gatedWriter) close() { g.mu.Lock(); g.closed = true; g.mu.Unlock() }

// lockedWriter serialises writes of concurrent pipeline stages to one stream.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (sh *shellState) runPipeline(ctx context.Context, pl pipeline, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(pl.cmds) == 1 {
		return sh.runSimple(ctx, pl.cmds[0], stdin, stdout, stderr)
	}
	var mu sync.Mutex
	errw := lockedWriter{&mu, stderr}
	n := len(pl.cmds)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	in := stdin
	for i, c := range pl.cmds {
		var out io.Writer = stdout
		var pw *io.PipeWriter
		var pr *io.PipeReader
		if i < n-1 {
			pr, pw = io.Pipe()
			out = pw
		}
		stageIn := in
		wg.Add(1)
		// Each stage has its own shell state, as each runs in a subshell.
		sub := &shellState{d: sh.d, dir: sh.dir, status: sh.status}
		go func(i int, c *simpleCmd, stageIn io.Reader, out io.Writer, pw *io.PipeWriter) {
			defer wg.Done()
			statuses[i] = sub.runSimple(ctx, c, stageIn, out, errw)
			if pw != nil {
				pw.Close()
			}
			// A stage that stops reading early unblocks its writer (SIGPIPE).
			if r, ok := stageIn.(*io.PipeReader); ok {
				r.CloseWithError(io.ErrClosedPipe)
			}
		}(i, c, stageIn, out, pw)
		if pr != nil {
			in = pr
		}
	}
	wg.Wait()
	return statuses[n-1]
}

// runSimple expands words, applies redirections and runs one command.
func (sh *shellState) runSimple(ctx context.Context, c *simpleCmd, stdin io.Reader, stdout, stderr io.Writer) int {
	args := sh.expand(c.words)
	// NAME=VALUE prefixes set the command's environment; nothing here reads it.
	for len(args) > 0 && isAssignment(args[0]) {
		args = args[1:]
	}
	fds := [3]any{stdin, stdout, stderr}
	var files []*redirFile
	for _, r := range c.redirs {
		target := sh.expandOne(r.target)
		switch r.op {
		case ">&":
			m, err := strconv.Atoi(target)
			if err != nil || m < 0 || m > 2 {
				fmt.Fprintf(stderr, "%s%s: bad file descriptor\n", shPrefix, target)
				return 1
			}
			fds[r.fd] = fds[m]
		case "<":
			if target == "/dev/null" {
				fds[r.fd] = strings.NewReader("")
				continue
			}
			data, err := sh.d.ReadFile(sh.abs(target))
			if err != nil {
				fmt.Fprintf(stderr, "%scan't open %s: %s\n", shPrefix, target, errnoText(err))
				return 1
			}
			fds[r.fd] = bytes.NewReader(data)
		case ">", ">>":
			if target == "/dev/null" {
				fds[r.fd] = io.Discard
				continue
			}
			f, err := sh.openRedir(sh.abs(target), r.op == ">>")
			if err != nil {
				fmt.Fprintf(stderr, "%scan't create %s: %s\n", shPrefix, target, errnoText(err))
				return 1
			}
			files = append(files, f)
			fds[r.fd] = f
		}
	}
	in, _ := fds[0].(io.Reader)
	if in == nil {
		in = strings.NewReader("")
	}
	out, _ := fds[1].(io.Writer)
	errw, _ := fds[2].(io.Writer)
	if out == nil {
		out = io.Discard
	}
	if errw == nil {
		errw = io.Discard
	}
	status := 0
	if len(args) > 0 {
		status = sh.exec(ctx, args, in, out, errw)
	}
	for _, f := range files {
		if err := f.flush(); err != nil {
			fmt.Fprintf(stderr, "%scan't create %s: %s\n", shPrefix, f.path, errnoText(err))
			status = 1
		}
	}
	return status
}

func isAssignment(s string) bool {
	eq := strings.IndexByte(s, '=')
	if eq <= 0 {
		return false
	}
	for i, r := range s[:eq] {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// redirFile collects a redirected stream and writes it to the filesystem when
// the command ends (commands here are short; logcat > file is the exception and
// is written when it stops).
type redirFile struct {
	d      *Device
	path   string
	append bool
	mu     sync.Mutex
	buf    bytes.Buffer
}

func (f *redirFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.Write(p)
}

func (f *redirFile) flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	data := f.buf.Bytes()
	if f.append {
		old, err := f.d.ReadFile(f.path)
		if err == nil {
			data = append(old, data...)
		}
	}
	return f.d.writeFileAs(f.path, data, 0o666, f.d.now(), ownerShell)
}

// openRedir creates (or truncates) the target at once, as the shell does, so
// a failing command still leaves an empty file and errors surface before it runs.
func (sh *shellState) openRedir(p string, appendTo bool) (*redirFile, error) {
	if fi, err := sh.d.lstat(p); err == nil && fi.Mode&sIFMT == sIFDIR {
		return nil, &fs.PathError{Op: "create", Path: p, Err: errIsDir}
	}
	if !appendTo {
		if err := sh.d.writeFileAs(p, nil, 0o666, sh.d.now(), ownerShell); err != nil {
			return nil, err
		}
	} else if _, err := sh.d.lstat(p); err != nil {
		if err := sh.d.writeFileAs(p, nil, 0o666, sh.d.now(), ownerShell); err != nil {
			return nil, err
		}
	}
	return &redirFile{d: sh.d, path: p, append: appendTo}, nil
}

func (sh *shellState) expandOne(w word) string {
	return strings.ReplaceAll(w.text, varStatus, strconv.Itoa(sh.status))
}

// expand substitutes $? and expands globs (sorted matches; no match keeps the
// word as is, as mksh does).
func (sh *shellState) expand(ws []word) []string {
	var out []string
	for _, w := range ws {
		s := sh.expandOne(w)
		if w.globbed {
			if m := sh.glob(s); len(m) > 0 {
				out = append(out, m...)
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

func (sh *shellState) glob(pattern string) []string {
	dir, base := path.Split(pattern)
	if strings.ContainsAny(dir, "*?") || base == "" {
		return nil
	}
	lookDir := dir
	if lookDir == "" {
		lookDir = "."
	}
	entries, err := sh.d.readDir(sh.abs(lookDir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name, ".") && !strings.HasPrefix(base, ".") {
			continue
		}
		if ok, _ := path.Match(base, e.Name); ok {
			out = append(out, dir+e.Name)
		}
	}
	sort.Strings(out)
	return out
}

func (sh *shellState) abs(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(sh.dir, p)
}

// binDirs are the directories whose commands the registry stands for when a
// command is named by path ("/system/bin/pm").
var binDirs = map[string]bool{"/system/bin": true, "/system/xbin": true, "/vendor/bin": true, "/bin": true, "/product/bin": true, "/apex/com.android.runtime/bin": true}

// exec runs argv: builtins (cd, exit, exec, sh) first, then the registry.
func (sh *shellState) exec(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	name := args[0]
	switch name {
	case "cd":
		target := "/"
		if len(args) > 1 {
			target = args[1]
		}
		p := sh.abs(target)
		fi, err := sh.d.lstat(p)
		if err != nil || fi.Mode&sIFMT != sIFDIR {
			fmt.Fprintf(stderr, "%scd: /%s: No such file or directory\n", shPrefix, strings.TrimPrefix(p, "/"))
			return 2
		}
		sh.dir = p
		return 0
	case "exit":
		st := sh.status
		if len(args) > 1 {
			st, _ = strconv.Atoi(args[1])
		}
		return st
	case "export", "unset", "readonly":
		// Variables are not modelled (nothing reads the environment); the
		// adb client's `logcat` sends `export ANDROID_LOG_TAGS="…"; exec logcat …`.
		return 0
	case "exec", "nohup", "command":
		if len(args) == 1 {
			return 0
		}
		return sh.exec(ctx, args[1:], stdin, stdout, stderr)
	case "sh", "/system/bin/sh":
		return sh.runSh(ctx, args, stdin, stdout, stderr)
	}
	if strings.Contains(name, "/") {
		dir, base := path.Split(name)
		if binDirs[path.Clean(dir)] {
			name = base
		} else {
			name = ""
		}
	}
	fn, ok := commands[name]
	if !ok || name == "" {
		fmt.Fprintf(stderr, "%s%s: inaccessible or not found\n", shPrefix, args[0])
		return 127
	}
	c := &Ctx{Context: ctx, Device: sh.d, Args: append([]string{name}, args[1:]...), Stdin: stdin, Stdout: stdout, Stderr: stderr, Dir: sh.dir, shell: sh}
	return fn(c)
}

// runSh is `sh -c 'LINE'` (a nested shell) or `sh` reading a script on stdin.
func (sh *shellState) runSh(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	sub := &shellState{d: sh.d, dir: sh.dir, status: sh.status}
	if len(args) >= 3 && args[1] == "-c" {
		return sub.run(ctx, args[2], stdin, stdout, stderr)
	}
	if len(args) == 2 && args[1] == "-c" {
		fmt.Fprintf(stderr, "%s-c: option requires an argument\n", shPrefix)
		return 1
	}
	if len(args) >= 2 {
		data, err := sh.d.ReadFile(sh.abs(args[1]))
		if err != nil {
			fmt.Fprintf(stderr, "%s%s: can't open: %s\n", shPrefix, args[1], errnoText(err))
			return 127
		}
		return sub.run(ctx, string(data), stdin, stdout, stderr)
	}
	data, _ := io.ReadAll(stdin)
	return sub.run(ctx, string(data), strings.NewReader(""), stdout, stderr)
}

// errnoText is the strerror text for an fs error, as shell tools print it.
func errnoText(err error) string {
	switch {
	case errors.Is(err, errReadOnly):
		return "Read-only file system"
	case errors.Is(err, fs.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, fs.ErrPermission):
		return "Permission denied"
	case errors.Is(err, errIsDir):
		return "Is a directory"
	case errors.Is(err, errNotDir):
		return "Not a directory"
	case errors.Is(err, errNotEmpty):
		return "Directory not empty"
	case errors.Is(err, fs.ErrExist):
		return "File exists"
	}
	return err.Error()
}

// path resolves a command's path argument against its working directory.
func (c *Ctx) path(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	dir := c.Dir
	if dir == "" {
		dir = "/"
	}
	return path.Join(dir, p)
}

// --- dumpsys, cmd, service --------------------------------------------------

// dumpsys SERVICE [ARGS]: dispatches to dumpsysServices; an unknown service
// prints "Can't find service: NAME" on stderr (frameworks/native dumpsys). With
// no service it dumps every registered one under the dumpsys section banner.
func cmdDumpsys(c *Ctx) int {
	args := c.Args[1:]
	if len(args) > 0 && args[0] == "-l" {
		fmt.Fprintln(c.Stdout, "Currently running services:")
		for _, s := range c.Device.serviceNames() {
			fmt.Fprintf(c.Stdout, "  %s\n", s)
		}
		return 0
	}
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-t", "--pri", "--priority":
			if len(args) > 1 {
				args = args[1:]
			}
		}
		args = args[1:]
	}
	if len(args) == 0 {
		names := make([]string, 0, len(dumpsysServices))
		for n := range dumpsysServices {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintln(c.Stdout, "-------------------------------------------------------------------------------")
			fmt.Fprintf(c.Stdout, "DUMP OF SERVICE %s:\n", n)
			sub := *c
			sub.Args = []string{n}
			dumpsysServices[n](&sub)
		}
		return 0
	}
	svc := args[0]
	fn, ok := dumpsysServices[svc]
	if !ok || !c.Device.serviceRegistered(svc) {
		fmt.Fprintf(c.Stderr, "Can't find service: %s\n", svc)
		return 0
	}
	sub := *c
	sub.Args = args
	return fn(&sub)
}

// cmd SERVICE [ARGS]: dispatches to cmdServices; an unknown (or not yet
// published) service prints "cmd: Can't find service: NAME" on stderr and
// exits 20 (frameworks/native/cmds/cmd).
func cmdCmd(c *Ctx) int {
	args := c.Args[1:]
	for len(args) > 0 && (args[0] == "-w" || args[0] == "--") {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(c.Stderr, "cmd: No service specified; use -l to list all running services. Use -w to start and wait for a service.")
		return 20
	}
	if args[0] == "-l" {
		fmt.Fprintln(c.Stdout, "Currently running services:")
		for _, s := range c.Device.serviceNames() {
			fmt.Fprintf(c.Stdout, "  %s\n", s)
		}
		return 0
	}
	fn, ok := cmdServices[args[0]]
	if !ok || !c.Device.serviceRegistered(args[0]) {
		fmt.Fprintf(c.Stderr, "cmd: Can't find service: %s\n", args[0])
		return 20
	}
	sub := *c
	sub.Args = args
	return fn(&sub)
}

func init() {
	registerCommand("dumpsys", cmdDumpsys)
	registerCommand("cmd", cmdCmd)
}
