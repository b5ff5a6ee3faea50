package storekit

import (
	"github.com/screengraph/screengraph-agent/agent"
)

// MaxParkedReason bounds a stored reason (a publisher's error text).
const MaxParkedReason = 512

func ClipReason(s string) string {
	s = agent.RedactString(s)
	if len(s) > MaxParkedReason {
		s = s[:MaxParkedReason]
	}
	return s
}

// StatusRows is what *sql.Rows and pgx.Rows share for reading.
type StatusRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanStatusCounts reads (status, count) rows of either store.
func ScanStatusCounts(rows StatusRows) (map[agent.RunStatus]int, error) {
	by := map[agent.RunStatus]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		by[agent.RunStatus(st)] = n
	}
	return by, rows.Err()
}
