package manager_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/tool"
)

// startAppend starts a call of the fixture's append tool on server, which
// sleeps ms after it appended its line, and returns once the server runs
// it.
func startAppend(t *testing.T, m *manager.Manager, server string, ms int) <-chan *tool.Record {
	t.Helper()
	path := filepath.Join(t.TempDir(), "started")
	running := make(chan *tool.Record, 1)
	go func() { running <- do(m, server, "append", map[string]any{"path": path, "line": "x", "ms": ms}) }()
	if !testservers.Eventually(10*time.Second, func() bool { _, err := os.Stat(path); return err == nil }) {
		t.Fatal("the call did not start")
	}
	return running
}

func toolNames(t *testing.T, m *manager.Manager) []string {
	t.Helper()
	c, err := m.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tl := range c.Tools() {
		out = append(out, tl.Server+"/"+tl.Name)
	}
	return out
}

// A reload adds a server, removes one and replaces one while a call of
// the removed server runs: that call ends well, later calls go to the new
// set, the replaced server is a new process.
func TestReconfigureAddsRemovesReplacesAndDrains(t *testing.T) {
	m := newManager(t,
		manager.WithSource(stdio(t, "gone"), manager.ServerOptions{}),
		manager.WithSource(stdio(t, "kept"), manager.ServerOptions{}),
		manager.WithSource(stdio(t, "changed"), manager.ServerOptions{}))
	names := toolNames(t, m)
	if !slices.Contains(names, "gone/echo") || !slices.Contains(names, "changed/echo") {
		t.Fatalf("catalog %v", names)
	}
	pidKept := do(m, "kept", "pid", nil).Result.Text()
	pidChanged := do(m, "changed", "pid", nil).Result.Text()

	running := startAppend(t, m, "gone", 700)

	err := m.Reconfigure(context.Background(), manager.Reconfiguration{
		Order: []string{"kept", "changed", "added"},
		Add: []manager.Server{
			{Source: stdio(t, "changed"), Options: manager.ServerOptions{}},
			{Source: stdio(t, "added"), Options: manager.ServerOptions{}},
		},
		Drain: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Reconfigure returned after the drain: the running call had ended.
	select {
	case r := <-running:
		if r.Err() != nil {
			t.Fatalf("the call in flight on the removed server failed: %v", r.Err())
		}
	default:
		t.Fatal("Reconfigure returned before the call in flight on the removed server ended")
	}
	if r := do(m, "gone", "echo", map[string]any{"message": "x"}); kind(r) != tool.KindServerNotFound {
		t.Fatalf("removed server: %+v", r.Error)
	}
	if r := do(m, "added", "echo", map[string]any{"message": "x"}); r.Err() != nil {
		t.Fatalf("added server: %v", r.Err())
	}
	if got := do(m, "kept", "pid", nil).Result.Text(); got != pidKept {
		t.Errorf("kept server restarted: pid %s, was %s", got, pidKept)
	}
	if got := do(m, "changed", "pid", nil).Result.Text(); got == pidChanged {
		t.Errorf("changed server not restarted: pid %s", got)
	}
	names = toolNames(t, m)
	if slices.Contains(names, "gone/echo") || !slices.Contains(names, "added/echo") {
		t.Fatalf("catalog after reload %v", names)
	}
	if got := m.Servers(); !slices.Equal(got, []string{"kept", "changed", "added"}) {
		t.Errorf("servers %v", got)
	}
}

// A call that outlasts the drain is cancelled when its server is closed;
// the reload does not wait for it beyond the bound.
func TestReconfigureDrainIsBounded(t *testing.T) {
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{}))
	toolNames(t, m)
	running := startAppend(t, m, "fx", 600_000)
	if err := m.Reconfigure(context.Background(), manager.Reconfiguration{Drain: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if r := <-running; r.Err() == nil {
		t.Fatal("a hanging call survived its server's close")
	}
	if len(m.Servers()) != 0 {
		t.Fatalf("servers %v", m.Servers())
	}
}

// A refused reconfiguration leaves the servers as they were and closes
// the sources it was given.
func TestReconfigureRefusedKeepsTheSet(t *testing.T) {
	m := newManager(t, manager.WithSource(stdio(t, "fx"), manager.ServerOptions{}))
	added := stdio(t, "new")
	err := m.Reconfigure(context.Background(), manager.Reconfiguration{
		Order: []string{"fx", "unknown"},
		Add:   []manager.Server{{Source: added}},
	})
	if _, ok := errors.AsType[*manager.ReconfigureError](err); !ok {
		t.Fatalf("got %v", err)
	}
	if r := do(m, "fx", "echo", map[string]any{"message": "x"}); r.Err() != nil {
		t.Fatal(r.Err())
	}
	if r := do(m, "new", "echo", nil); kind(r) != tool.KindServerNotFound {
		t.Fatalf("%+v", r.Error)
	}
}

// Close releases the servers a reload still drains.
func TestCloseDuringDrain(t *testing.T) {
	m, err := manager.New(manager.WithSource(stdio(t, "fx"), manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	toolNames(t, m)
	running := startAppend(t, m, "fx", 600_000)
	done := make(chan error, 1)
	go func() { done <- m.Reconfigure(context.Background(), manager.Reconfiguration{Drain: time.Hour}) }()
	// The set is swapped before the drain: the reload now waits for the call.
	if !testservers.Eventually(10*time.Second, func() bool { return len(m.Servers()) == 0 }) {
		t.Fatal("the reload did not swap the set")
	}
	m.Close()
	<-done
	if r := <-running; r.Err() == nil {
		t.Fatal("the hanging call survived Close")
	}
}
