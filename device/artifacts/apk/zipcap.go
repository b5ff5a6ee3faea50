package apk

import (
	"archive/zip"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"os"
)

// Caps on the zip entries the manifest parser reads whole into memory
// (androidbinary reads AndroidManifest.xml and resources.arsc with
// io.ReadAll). Real apps stay far below: manifests are kilobytes,
// resources.arsc tens of megabytes.
const (
	MaxManifestBytes  int64 = 16 << 20
	MaxResourcesBytes int64 = 128 << 20
)

// CodeEntryTooLarge refines artifact_unavailable: a zip entry that is parsed
// in memory declares or inflates to more than its cap (a zip bomb).
const CodeEntryTooLarge = "APK_ENTRY_TOO_LARGE"

// ErrEntryTooLarge is the cause of a CodeEntryTooLarge refusal.
var ErrEntryTooLarge = errors.New("zip entry exceeds its size cap")

// entryCaps maps the entries parsed in memory to their caps.
var entryCaps = map[string]int64{"AndroidManifest.xml": MaxManifestBytes, "resources.arsc": MaxResourcesBytes}

// CheckEntries refuses a zip whose AndroidManifest.xml or resources.arsc
// (every entry of that name: a duplicate must not slip past) declares more
// than its cap, or inflates to more than it declares or than its cap (read
// through a limited reader into io.Discard: nothing is kept in memory).
// Errors wrap ErrEntryTooLarge, or are archive/zip's when r is not a zip.
func CheckEntries(r io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return err
	}
	for _, f := range zr.File {
		limit, ok := entryCaps[f.Name]
		if !ok {
			continue
		}
		if f.UncompressedSize64 > uint64(limit) {
			return fmt.Errorf("%s declares %d bytes, cap %d: %w", f.Name, f.UncompressedSize64, limit, ErrEntryTooLarge)
		}
		// Inflated here, not through f.Open: its reader hides how far past
		// the declared size an entry goes.
		raw, err := f.OpenRaw()
		if err != nil {
			return err
		}
		var body io.Reader
		switch f.Method {
		case zip.Store:
			body = raw
		case zip.Deflate:
			fr := flate.NewReader(raw)
			defer fr.Close()
			body = fr
		default:
			return fmt.Errorf("%s: compression method %d: %w", f.Name, f.Method, zip.ErrAlgorithm)
		}
		want := min(limit, int64(f.UncompressedSize64))
		n, err := io.Copy(io.Discard, io.LimitReader(body, want+1))
		switch {
		case n > want:
			return fmt.Errorf("%s inflates past its declared %d bytes (cap %d): %w", f.Name, f.UncompressedSize64, limit, ErrEntryTooLarge)
		case err != nil:
			return fmt.Errorf("%s: %w", f.Name, err)
		}
	}
	return nil
}

// checkFile is CheckEntries on the file at path, as the agent error Inspect returns.
func checkFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return invalid(CodeNotAPK, err, "%s is not a readable APK", path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return invalid(CodeNotAPK, err, "%s is not a readable APK", path)
	}
	if err := CheckEntries(f, st.Size()); err != nil {
		if errors.Is(err, ErrEntryTooLarge) {
			return invalid(CodeEntryTooLarge, err, "%s refused before parsing", path)
		}
		return invalid(CodeNotAPK, err, "%s is not a readable APK", path)
	}
	return nil
}
