package apk

import (
	"archive/zip"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"hash/adler32"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/shogo82148/androidbinary"
	abapk "github.com/shogo82148/androidbinary/apk"
)

// The demo APKs are real apps (fixtures/apks/build.sh): each carries a
// classes.dex whose header is what ART checks before loading it, and which
// defines every activity of the manifest, the launcher first of all, as a
// subclass of android.app.Activity.
func TestDemoAPKsCarryValidDexWithTheirActivities(t *testing.T) {
	for _, name := range []string{"demo-v1.apk", "demo-v2.apk", "demo-v2-keyb.apk", "demo-testonly.apk"} {
		t.Run(name, func(t *testing.T) {
			info, err := Inspect(fixture(name), 34)
			if err != nil {
				t.Fatal(err)
			}
			if info.LauncherActivity == "" {
				t.Fatal("no MAIN/LAUNCHER activity in the manifest")
			}
			dex := readZipEntry(t, fixture(name), "classes.dex")
			classes, err := parseDex(dex)
			if err != nil {
				t.Fatal(err)
			}
			a, err := abapk.OpenFile(fixture(name))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			// android:hasCode="false" would keep the package manager from loading the dex.
			xf, err := androidbinary.NewXMLFile(bytes.NewReader(readZipEntry(t, fixture(name), "AndroidManifest.xml")))
			if err != nil {
				t.Fatal(err)
			}
			if text, _ := io.ReadAll(xf.Reader()); !bytes.Contains(text, []byte("<application")) || bytes.Contains(text, []byte(`hasCode="false"`)) {
				t.Errorf("manifest has no <application> or says hasCode=\"false\":\n%s", text)
			}
			acts := []string{info.LauncherActivity}
			for _, act := range a.Manifest().App.Activities {
				acts = append(acts, qualify(info.Package, act.Name.MustString()))
			}
			if len(acts) < 4 {
				t.Errorf("activities %v, want the launcher and HomeActivity, DetailsActivity, SpinnerActivity", acts)
			}
			for _, act := range acts {
				desc := "L" + strings.ReplaceAll(act, ".", "/") + ";"
				super, ok := classes[desc]
				if !ok {
					t.Errorf("classes.dex does not define %s (defines %v)", desc, classes)
				} else if super != "Landroid/app/Activity;" {
					t.Errorf("%s extends %s, want Landroid/app/Activity;", desc, super)
				}
			}
		})
	}
}

func TestParseDexRejectsDamagedFiles(t *testing.T) {
	dex := readZipEntry(t, fixture("demo-v1.apk"), "classes.dex")
	damage := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), dex...)) }
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"magic", damage(func(b []byte) []byte { b[4] = '9'; return b }), "magic"},
		{"body byte", damage(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "checksum"},
		{"signature", damage(func(b []byte) []byte { // checksum fixed up: only SHA-1 tells
			b[40] ^= 1
			binary.LittleEndian.PutUint32(b[8:], adler32.Checksum(b[12:]))
			return b
		}), "signature"},
		{"truncated", dex[:len(dex)-4], "file_size"},
		{"short", dex[:50], "short"},
	} {
		if _, err := parseDex(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one about %s", c.name, err, c.want)
		}
	}
}

func readZipEntry(t *testing.T, path, name string) []byte {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	f, err := zr.Open(name)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var dexMagic = regexp.MustCompile(`^dex\n03[5-9]\x00$`)

// parseDex checks a dex file's header the way the dex format defines it
// (source.android.com/docs/core/runtime/dex-format: magic "dex\n03x\0",
// checksum = adler32 of everything after the field, signature = SHA-1 of
// everything after it, file_size, header_size 0x70, endian_tag 0x12345678) and
// returns the class_defs as class descriptor -> superclass descriptor.
func parseDex(b []byte) (map[string]string, error) {
	if len(b) < 0x70 {
		return nil, fmt.Errorf("dex: %d bytes, too short for a header", len(b))
	}
	le := binary.LittleEndian
	u32 := func(off int) uint32 { return le.Uint32(b[off:]) }
	if !dexMagic.Match(b[:8]) {
		return nil, fmt.Errorf("dex: bad magic %q", b[:8])
	}
	if size := u32(32); int(size) != len(b) {
		return nil, fmt.Errorf("dex: file_size %d, file has %d bytes", size, len(b))
	}
	if sum := adler32.Checksum(b[12:]); u32(8) != sum {
		return nil, fmt.Errorf("dex: checksum %08x, adler32 is %08x", u32(8), sum)
	}
	if sum := sha1.Sum(b[32:]); !bytes.Equal(b[12:32], sum[:]) {
		return nil, fmt.Errorf("dex: signature %x, SHA-1 is %x", b[12:32], sum)
	}
	if u32(36) != 0x70 || u32(40) != 0x12345678 {
		return nil, fmt.Errorf("dex: header_size %#x endian_tag %#x", u32(36), u32(40))
	}
	in := func(off, n, each uint32) error {
		if uint64(off)+uint64(n)*uint64(each) > uint64(len(b)) {
			return fmt.Errorf("dex: table at %#x (%d x %d bytes) past the end", off, n, each)
		}
		return nil
	}
	nStrings, stringsOff := u32(56), u32(60)
	nTypes, typesOff := u32(64), u32(68)
	nClasses, classesOff := u32(96), u32(100)
	for _, t := range [][3]uint32{{stringsOff, nStrings, 4}, {typesOff, nTypes, 4}, {classesOff, nClasses, 32}} {
		if err := in(t[0], t[1], t[2]); err != nil {
			return nil, err
		}
	}
	str := func(i uint32) (string, error) { // string_data_item: uleb128 utf16 size, MUTF-8 bytes, NUL
		if i >= nStrings {
			return "", fmt.Errorf("dex: string index %d of %d", i, nStrings)
		}
		p := int(u32(int(stringsOff + 4*i)))
		for p < len(b) && b[p]&0x80 != 0 {
			p++
		}
		p++
		end := p
		for end < len(b) && b[end] != 0 {
			end++
		}
		if p > len(b) || end >= len(b) {
			return "", fmt.Errorf("dex: string %d runs past the end", i)
		}
		return string(b[p:end]), nil
	}
	typ := func(i uint32) (string, error) {
		if i >= nTypes {
			return "", fmt.Errorf("dex: type index %d of %d", i, nTypes)
		}
		return str(u32(int(typesOff + 4*i)))
	}
	out := map[string]string{}
	for i := uint32(0); i < nClasses; i++ {
		def := int(classesOff + 32*i) // class_idx, access_flags, superclass_idx, ...
		cls, err := typ(u32(def))
		if err != nil {
			return nil, err
		}
		super := ""
		if s := u32(def + 8); s != 0xffffffff { // NO_INDEX: java.lang.Object
			if super, err = typ(s); err != nil {
				return nil, err
			}
		}
		out[cls] = super
	}
	return out, nil
}
