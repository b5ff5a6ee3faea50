package agent_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
)

type sqlStateErr string

func (e sqlStateErr) Error() string    { return "pg: " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

// IsStoreUnavailable: a marked dial failure however wrapped, an *Error
// store_unavailable, and Postgres's connection and shutdown states; not a
// constraint violation, not another component's network error.
func TestIsStoreUnavailable(t *testing.T) {
	dial := agent.MarkStoreUnavailable(errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"))
	for err, want := range map[error]bool{
		dial: true,
		fmt.Errorf("snapshots: postgres: %w", dial):                                         true,
		agent.Wrap(agent.ErrInternal, dial, "listing runs"):                                 true,
		agent.Errorf(agent.ErrStoreUnavailable, "down"):                                     true,
		agent.Wrap(agent.ErrInternal, agent.Errorf(agent.ErrStoreUnavailable, "down"), "x"): true,
		sqlStateErr("08006"): true,
		sqlStateErr("57P01"): true,
		sqlStateErr("57P03"): true,
		sqlStateErr("23505"): false,
		errors.New("dial tcp 127.0.0.1:5037: connect: connection refused"): false,
		agent.MarkStoreUnavailable(nil):                                    false,
	} {
		if got := agent.IsStoreUnavailable(err); got != want {
			t.Errorf("IsStoreUnavailable(%v) = %v, want %v", err, got, want)
		}
	}
	if dial.Error() != "dial tcp 127.0.0.1:5432: connect: connection refused" {
		t.Errorf("marking changed the text: %s", dial)
	}
}
