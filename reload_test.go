package toolmux_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/tool"
)

// writeConfig writes body to path and loads it.
func writeConfig(t *testing.T, path, body string) *config.Config {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Runtime.Reload applies a new configuration to a running runtime: the
// servers it adds, removes and changes, the global deny list, and the
// pipeline's settings (the next call is truncated at the new limit),
// while the caller's own sources stay.
func TestRuntimeReload(t *testing.T) {
	fx := testservers.Fixture(t)
	path := filepath.Join(t.TempDir(), "toolmux.yaml")
	load := func(body string) *config.Config { return writeConfig(t, path, body) }
	v1 := fmt.Sprintf("builtin:\n  enabled: false\nservers:\n  fx:\n    command: %[1]s\n  old:\n    command: %[1]s\n", fx)
	ctx := context.Background()
	own := funcsource.New("own", funcsource.Func("hello", "Says hello.", func(context.Context, struct{}) (string, error) { return "hello", nil }, funcsource.ReadOnly()))
	rt, err := toolmux.Open(ctx, load(v1), toolmux.Options{NoTaskLog: true, NoAgents: true, Sources: []manager.Source{own}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	call := func(server, name string, args map[string]any) *tool.Record {
		return rt.Scheduler.Call(ctx, tool.Call{Server: server, Tool: name, Arguments: args})
	}
	if rec := call("fx", "big", map[string]any{"bytes": 3000}); rec.Err() != nil || len(rec.Result.Text()) < 3000 {
		t.Fatalf("before: %v, %d chars", rec.Err(), len(rec.Result.Text()))
	}

	v2 := fmt.Sprintf("builtin:\n  enabled: false\nservers:\n  fx:\n    command: %[1]s\n  new:\n    command: %[1]s\ndeny: [fx/pid]\npipeline:\n  truncate:\n    max_chars: 500\nlimits:\n  max_depth: 20\n", fx)
	res, err := rt.Reload(ctx, load(v2), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Added, []string{"new"}) || !slices.Equal(res.Removed, []string{"old"}) || len(res.Restarted) != 0 {
		t.Fatalf("reload said %+v", res)
	}
	if !slices.Equal(res.Unchanged, []string{"limits.max_depth"}) || rt.CurrentConfig().Limits.MaxDepth == 20 {
		t.Errorf("a setting fixed at start: reload said %v, in use %d", res.Unchanged, rt.CurrentConfig().Limits.MaxDepth)
	}
	if got := rt.Manager.Servers(); !slices.Equal(got, []string{"fx", "new", "own"}) {
		t.Fatalf("servers %v", got)
	}
	if rec := call("fx", "big", map[string]any{"bytes": 3000}); rec.Err() != nil || len(rec.Result.Text()) >= 3000 {
		t.Fatalf("the new truncation limit was not applied: %v, %d chars", rec.Err(), len(rec.Result.Text()))
	}
	if rec := call("fx", "pid", nil); tool.KindOf(rec.Err()) != tool.KindPolicyViolation {
		t.Fatalf("the new deny list was not applied: %v", rec.Err())
	}
	if rec := call("new", "echo", map[string]any{"message": "x"}); rec.Err() != nil {
		t.Fatal(rec.Err())
	}
	if rec := call("old", "echo", map[string]any{"message": "x"}); tool.KindOf(rec.Err()) != tool.KindServerNotFound {
		t.Fatalf("the removed server: %v", rec.Err())
	}
	if rec := call("own", "hello", nil); rec.Err() != nil {
		t.Fatalf("the caller's own source: %v", rec.Err())
	}
	cat, err := rt.Pipeline.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cat.Find("fx", "pid"); ok {
		t.Error("a denied tool is still in the catalog")
	}
	if rt.CurrentConfig().Path != path || rt.CurrentConfig().Servers[1].Name != "new" {
		t.Error("CurrentConfig is not the reloaded configuration")
	}
}

// A configuration without servers is refused while servers run, whatever
// it came from (an empty file, comments, "servers:" alone, a file cut
// before its servers): the servers stay and answer. Only an explicit
// empty mapping removes them all.
func TestRuntimeReloadRefusesNoServers(t *testing.T) {
	fx := testservers.Fixture(t)
	path := filepath.Join(t.TempDir(), "toolmux.yaml")
	load := func(body string) *config.Config { return writeConfig(t, path, body) }
	full := fmt.Sprintf("pipeline:\n  truncate:\n    max_chars: 5000\nservers:\n  a:\n    command: %[1]s\n  b:\n    command: %[1]s\n    disabled: true\n", fx)
	ctx := context.Background()
	rt, err := toolmux.Open(ctx, load(full), toolmux.Options{NoTaskLog: true, NoAgents: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	for _, c := range []struct{ name, body string }{
		{"empty file", ""},
		{"comments only", "# the servers are elsewhere now\n"},
		{"servers: alone", "servers:\n"},
		{"cut before the servers", full[:strings.Index(full, "servers:")-3]},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := rt.Reload(ctx, load(c.body), 0)
			var ns *toolmux.NoServersError
			if !errors.As(err, &ns) || ns.Path != path || !slices.Equal(ns.Running, []string{"a", "b"}) {
				t.Fatalf("reload of %q: %v", c.body, err)
			}
			if rec := rt.Scheduler.Call(ctx, tool.Call{Server: "a", Tool: "echo", Arguments: map[string]any{"message": "x"}}); rec.Err() != nil {
				t.Fatalf("a after the refusal: %v", rec.Err())
			}
			if got := rt.CurrentConfig(); len(got.Servers) != 2 || got.Pipeline.Truncate.MaxChars != 5000 {
				t.Fatalf("the configuration in use changed: %+v", got)
			}
		})
	}

	res, err := rt.Reload(ctx, load("servers: {}\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Removed, []string{"a", "b"}) {
		t.Fatalf("servers: {} removed %v", res.Removed)
	}
	if rec := rt.Scheduler.Call(ctx, tool.Call{Server: "a", Tool: "echo", Arguments: map[string]any{"message": "x"}}); tool.KindOf(rec.Err()) != tool.KindServerNotFound {
		t.Fatalf("a after servers: {}: %v", rec.Err())
	}
	// Nothing runs now: a file without servers is no loss.
	if _, err := rt.Reload(ctx, load(""), 0); err != nil {
		t.Fatalf("an empty file with no server running: %v", err)
	}
}

// subscriptions (the bounds of the gateway's listen streams, made at
// start) is reported by a reload that changes it, and kept as in use.
func TestReloadKeepsSubscriptions(t *testing.T) {
	ctx := context.Background()
	rt, err := toolmux.Open(ctx, parseIn(t, "builtin: {enabled: false}\nsubscriptions: {max_listens: 10}\n"), toolmux.Options{NoTaskLog: true, NoAgents: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	res, err := rt.Reload(ctx, parseIn(t, "builtin: {enabled: false}\nsubscriptions: {max_listens: 20, max_listens_per_client: 2}\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (config.Subscriptions{MaxListens: 10}); !slices.Equal(res.Unchanged, []string{"subscriptions"}) || rt.CurrentConfig().Subscriptions != want {
		t.Errorf("reload said %v, in use %+v", res.Unchanged, rt.CurrentConfig().Subscriptions)
	}
}

// auth (who may call the gateway, its verifiers made at start) is
// reported by a reload that changes it, and kept as in use.
func TestReloadKeepsAuth(t *testing.T) {
	ctx := context.Background()
	rt, err := toolmux.Open(ctx, parseIn(t, "builtin: {enabled: false}\nauth: {issuers: [{issuer: https://a.example}]}\n"), toolmux.Options{NoTaskLog: true, NoAgents: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	res, err := rt.Reload(ctx, parseIn(t, "builtin: {enabled: false}\nauth: {issuers: [{issuer: https://b.example}]}\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if in := rt.CurrentConfig().Auth; !slices.Equal(res.Unchanged, []string{"auth"}) || len(in.Issuers) != 1 || in.Issuers[0].Issuer != "https://a.example" {
		t.Errorf("reload said %v, in use %+v", res.Unchanged, in)
	}
}

// vault (where the vault's keys are, read at start) is reported by a
// reload that changes it, and kept as in use.
func TestReloadKeepsVault(t *testing.T) {
	ctx := context.Background()
	rt, err := toolmux.Open(ctx, parseIn(t, "builtin: {enabled: false}\nvault: {key_env: KEY_A}\n"), toolmux.Options{NoTaskLog: true, NoAgents: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	res, err := rt.Reload(ctx, parseIn(t, "builtin: {enabled: false}\nvault: {key_env: KEY_B, previous_key_envs: [KEY_A]}\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if in := rt.CurrentConfig().Vault; !slices.Equal(res.Unchanged, []string{"vault"}) || in.KeyEnv != "KEY_A" || len(in.PreviousKeyEnvs) != 0 {
		t.Errorf("reload said %v, in use %+v", res.Unchanged, in)
	}
}

// parseIn parses a toolmux.yaml of body, relative paths in a directory of
// the test's own.
func parseIn(t *testing.T, body string) *config.Config {
	t.Helper()
	cfg, err := config.ParseWith("toolmux.yaml", []byte(body), config.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// hooks and guardrails (the scheduler's gate and a middleware, made at
// start) are reported by a reload that changes them, and kept as in use.
func TestReloadKeepsHooks(t *testing.T) {
	ctx := context.Background()
	const first = "builtin: {enabled: false}\nhooks: {PreToolUse: [{matcher: '*', hooks: [{type: command, command: 'exit 0'}]}]}\n"
	rt, err := toolmux.Open(ctx, parseIn(t, first), toolmux.Options{NoTaskLog: true, NoAgents: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	res, err := rt.Reload(ctx, parseIn(t, "builtin: {enabled: false}\nguardrails: [{name: g, url: 'http://127.0.0.1:1/'}]\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	in := rt.CurrentConfig()
	if !slices.Equal(res.Unchanged, []string{"hooks", "guardrails"}) || len(in.Hooks.PreToolUse) != 1 || len(in.Guardrails) != 0 {
		t.Errorf("reload said %v, in use %+v %+v", res.Unchanged, in.Hooks, in.Guardrails)
	}
}
