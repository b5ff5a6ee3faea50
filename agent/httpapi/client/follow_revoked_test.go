package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
)

// A stream the daemon ends with `event: error` (its token was revoked) is
// the 401 refusal, not an event handed to fn.
func TestFollowEndedByRevocation(t *testing.T) {
	body := httpapi.ErrorBody(agent.Wrap(agent.ErrPermission, agent.ErrUnauthenticated, "%v", agent.ErrTokenRevoked), "")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "id: 1\nevent: agent.run.started\ndata: {\"runId\":\"R\",\"sequence\":1,\"kind\":\"agent.run.started\"}\n\n")
		fmt.Fprintf(w, "event: error\ndata: %s\n\n", mustJSON(t, body))
	}))
	defer srv.Close()
	var got []agent.Event
	err := client.New(srv.URL, "", nil).Follow(context.Background(), "R", 0, func(e agent.Event) error {
		got = append(got, e)
		return nil
	})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized || ce.ID != agent.ErrPermission || len(got) != 1 {
		t.Fatalf("Follow: %v (%d events)", err, len(got))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
