package toolmux_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/vaulttest"
)

// A runtime given a vault makes a server with an auth section a
// per-caller one: a caller's call goes with their secret, its record
// names the credential kind, UserSecrets says what users set, and
// DisconnectCaller closes the caller's process; a server a reload adds
// is one too.
func TestRuntimePerCallerServers(t *testing.T) {
	fx := testservers.Fixture(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "toolmux.yaml")
	body := func(servers ...string) string {
		s := "builtin:\n  enabled: false\nservers:\n"
		for _, n := range servers {
			s += fmt.Sprintf("  %s:\n    command: %s\n    args: [-whoami]\n    auth:\n      kind: user_secrets\n      secrets: {TOKEN: {env: FIXTURE_TOKEN}}\n", n, fx)
		}
		return s
	}
	ctx := context.Background()
	v := vault.New(vault.NewFileStore(filepath.Join(dir, "vault")), vaulttest.Ring(t, vaulttest.NewKey(t)), vault.Options{})
	for _, srv := range []string{"fx", "fy"} {
		if err := v.PutSecret(ctx, "key:ann", srv, "TOKEN", []byte("ann-"+srv)); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := toolmux.Open(ctx, writeConfig(t, path, body("fx")), toolmux.Options{NoTaskLog: true, NoAgents: true, Vault: v})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	ann := identity.With(ctx, &identity.Caller{Subject: "key:ann", Name: "ann", Method: identity.MethodKey})
	call := func(server string) (testservers.Whoami, *tool.Record) {
		t.Helper()
		rec := rt.Scheduler.Call(ann, tool.Call{Server: server, Tool: "whoami", Arguments: map[string]any{"env": "FIXTURE_TOKEN"}})
		var w testservers.Whoami
		if rec.Err() == nil {
			if err := json.Unmarshal([]byte(rec.Result.Text()), &w); err != nil {
				t.Fatal(err)
			}
		}
		return w, rec
	}
	w, rec := call("fx")
	if rec.Err() != nil || w.Env != testservers.WhoamiSum("ann-fx") || rec.Credential != tool.CredentialUserSecret {
		t.Fatalf("ann's call: %+v %q %v", w, rec.Credential, rec.Err())
	}
	if got := rt.UserSecrets(); !reflect.DeepEqual(got, map[string][]string{"fx": {"TOKEN"}}) {
		t.Errorf("UserSecrets: %v", got)
	}
	rt.DisconnectCaller("fx", "key:ann")
	if !testservers.Eventually(5*time.Second, func() bool { return syscall.Kill(w.PID, 0) != nil }) {
		t.Errorf("ann's process %d still runs after DisconnectCaller", w.PID)
	}

	if _, err := rt.Reload(ctx, writeConfig(t, path, body("fx", "fy")), 0); err != nil {
		t.Fatal(err)
	}
	if w, rec := call("fy"); rec.Err() != nil || w.Env != testservers.WhoamiSum("ann-fy") {
		t.Fatalf("the server the reload added: %+v %v", w, rec.Err())
	}
	if got := rt.UserSecrets(); len(got) != 2 {
		t.Errorf("UserSecrets after the reload: %v", got)
	}
}
