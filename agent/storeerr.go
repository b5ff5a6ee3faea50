package agent

import (
	"errors"
	"strings"
)

// errStoreDown is what every error MarkStoreUnavailable returns matches.
var errStoreDown = errors.New("the store is unavailable")

type storeUnavailable struct{ err error }

func (e storeUnavailable) Error() string        { return e.err.Error() }
func (e storeUnavailable) Unwrap() error        { return e.err }
func (e storeUnavailable) Is(target error) bool { return target == errStoreDown }

// MarkStoreUnavailable marks err, a store adapter's failure to reach its
// database (a refused or failed dial), for IsStoreUnavailable; err's text
// and chain are kept. nil stays nil.
func MarkStoreUnavailable(err error) error {
	if err == nil {
		return nil
	}
	return storeUnavailable{err}
}

// IsStoreUnavailable reports whether err says the store cannot be reached
// now: an error marked by MarkStoreUnavailable or an *Error
// store_unavailable anywhere in its chain, or a Postgres error (anything
// with a SQLState() method, as pgconn.PgError has) of class 08 (connection
// exception) or 57P01-57P03 (the server shutting down, crashed, starting).
// Callers answer it with ErrStoreUnavailable (HTTP 503) and show its
// details (addresses, user and database names) to an admin only.
func IsStoreUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errStoreDown) {
		return true
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		c := pg.SQLState()
		return strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02" || c == "57P03"
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ae, ok := e.(*Error); ok && ae.ID == ErrStoreUnavailable {
			return true
		}
	}
	return false
}
