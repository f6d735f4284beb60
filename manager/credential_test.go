package manager_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/tool"
)

// credentialed is a source whose calls go with their caller's own
// credential: "denied" fails as a caller without one does.
type credentialed struct{ fake }

func (credentialed) Credential() string { return tool.CredentialUserSecret }

func (c credentialed) Call(ctx context.Context, name string, args map[string]any) (*tool.Result, error) {
	switch name {
	case "denied":
		return nil, &tool.Error{Kind: tool.KindAuthRequired, Message: "set your secret", Err: tool.ErrNotSent}
	case "authorize":
		// A message that names its URL, as an OAuth client's error does.
		return nil, &tool.Error{Kind: tool.KindAuthRequired, URL: authorizeURL, Err: tool.ErrNotSent,
			Message: "authorize at " + authorizeURL, Detail: "the flow for " + authorizeURL}
	}
	return c.fake.Call(ctx, name, args)
}

// A record names the kind of credential its call went with, for a source
// that says; none when the caller had none, or for a source that does
// not say.
func TestRecordCredential(t *testing.T) {
	m := newManager(t,
		manager.WithSource(credentialed{fake{name: "mine", tools: []string{"ok", "denied"}}}, manager.ServerOptions{}),
		manager.WithSource(fake{name: "shared", tools: []string{"ok"}}, manager.ServerOptions{}))
	if r := do(m, "mine", "ok", nil); r.Err() != nil || r.Credential != tool.CredentialUserSecret {
		t.Errorf("mine/ok: %q %v", r.Credential, r.Err())
	}
	if r := do(m, "mine", "denied", nil); kind(r) != tool.KindAuthRequired || r.Credential != "" {
		t.Errorf("mine/denied: %q %v", r.Credential, r.Err())
	}
	if r := do(m, "shared", "ok", nil); r.Err() != nil || r.Credential != "" {
		t.Errorf("shared/ok: %q %v", r.Credential, r.Err())
	}
}

const authorizeURL = "https://as.example/authorize?state=single-use-7c1"

// An auth_required error's URL, where its caller's user goes, is the
// gateway's to send, never the record's to keep: not as a field, nor in
// the message or the detail, whatever the source wrote there.
func TestRecordWithoutAuthURL(t *testing.T) {
	m := newManager(t, manager.WithSource(credentialed{fake{name: "mine", tools: []string{"authorize"}}}, manager.ServerOptions{}))
	r := do(m, "mine", "authorize", nil)
	if kind(r) != tool.KindAuthRequired || r.Error.URL != authorizeURL {
		t.Fatalf("the caller is not told where to go: %+v", r.Error)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "single-use-7c1") || strings.Contains(r.Error.Error(), "single-use-7c1") {
		t.Errorf("the record holds the URL: %s", b)
	}
}
