package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
)

// CreatedToken prints a token `token create` made, the only place it is
// ever shown: json, httpapi.CreatedToken's object (not through PrintJSON,
// whose redaction would hide the token); text, its id, scope and token on
// stdout and on stderr a line saying it is not shown again.
func CreatedToken(output string, t httpapi.CreatedToken) error {
	if output == "json" {
		b, err := json.MarshalIndent(t, "", "  ")
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(append(b, '\n'))
		return err
	}
	kind := "tenant " + t.TenantID
	if t.Admin {
		kind = "admin (" + t.TenantID + ")"
	}
	fmt.Printf("token id  %s\nscope     %s\ntoken     %s\n", t.ID, kind, t.Token)
	fmt.Fprintln(os.Stderr, "Keep the token now: it is not shown again (the store keeps only its hash).")
	return nil
}

// RevokedToken prints the token `token revoke` revoked: json, the
// agent.APIToken (no hash); text, one line with its revocation time
// (RFC 3339).
func RevokedToken(output string, t agent.APIToken) error {
	if output == "json" {
		return PrintJSON(t)
	}
	at := "-"
	if t.RevokedAt != nil {
		at = t.RevokedAt.Format(time.RFC3339)
	}
	fmt.Printf("token %s (tenant %s) revoked at %s\n", t.ID, t.TenantID, at)
	return nil
}

// LocalError is err as the in-process API's caller says it: a refusal
// (*client.Error) becomes the *agent.Error of its body (id, retryable,
// LocalMessage), without "daemon http://local-store answered N:", as no
// daemon answered; other errors come back as they are.
func LocalError(err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err
	}
	id := ce.ID
	if id == "" {
		id = agent.ErrInternal
	}
	return &agent.Error{ID: id, Retryable: ce.Retryable, Msg: LocalMessage(err)}
}

// LocalMessage is the message of a refusal (*client.Error) without its
// error id in front ("api token X: not found"); err's text otherwise.
func LocalMessage(err error) string {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	return strings.TrimPrefix(ce.Message, string(ce.ID)+": ")
}
