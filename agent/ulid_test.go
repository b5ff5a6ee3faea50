package agent

import (
	"bytes"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

type stillClock time.Time

func (c stillClock) Now() time.Time { return time.Time(c) }

// TestULIDsMatchTheReferenceEncoding: our ids parse with oklog/ulid, carry the
// clock's millisecond and the entropy's bytes, and stay strictly increasing
// within one millisecond.
func TestULIDsMatchTheReferenceEncoding(t *testing.T) {
	at := time.Date(2026, 11, 21, 8, 0, 0, 123e6, time.UTC)
	entropy := bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe})
	g := NewULIDs(stillClock(at), entropy)
	first := g.NewID()
	id, err := ulid.ParseStrict(first)
	if err != nil {
		t.Fatalf("%s: %v", first, err)
	}
	if id.Time() != uint64(at.UnixMilli()) {
		t.Errorf("time part %d, want %d", id.Time(), at.UnixMilli())
	}
	want := ulid.MustNew(uint64(at.UnixMilli()), bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}))
	if first != want.String() {
		t.Errorf("encoding %s, oklog/ulid says %s", first, want)
	}
	second := g.NewID() // random part ...ff: still this millisecond
	if second <= first || ulid.MustParseStrict(second).Time() != id.Time() {
		t.Errorf("second id %s not after %s in the same millisecond", second, first)
	}
	// The 80-bit random part is now all ones: the next id overflows into the
	// next millisecond with fresh entropy (the reader is empty: it must panic
	// only if it needs to read, so give it more).
	g.entropy = bytes.NewReader(make([]byte, 10))
	third := g.NewID()
	if third <= second || ulid.MustParseStrict(third).Time() != id.Time()+1 {
		t.Errorf("overflow: %s after %s", third, second)
	}
}
