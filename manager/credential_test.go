package manager_test

import (
	"context"
	"testing"

	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/tool"
)

// credentialed is a source whose calls go with their caller's own
// credential: "denied" fails as a caller without one does.
type credentialed struct{ fake }

func (credentialed) Credential() string { return tool.CredentialUserSecret }

func (c credentialed) Call(ctx context.Context, name string, args map[string]any) (*tool.Result, error) {
	if name == "denied" {
		return nil, &tool.Error{Kind: tool.KindAuthRequired, Message: "set your secret", Err: tool.ErrNotSent}
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
