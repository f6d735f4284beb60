package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// The default chain, configured, in front of two real MCP servers over stdio.
func TestChainAgainstRealServers(t *testing.T) {
	dir := t.TempDir()
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("alpha beta gamma"), 0o644); err != nil {
		t.Fatal(err)
	}
	everything, err := mcpsource.New(mcpsource.Config{Name: "everything", Transport: mcpsource.Stdio,
		Command: testservers.NodeBin(t, "mcp-server-everything"), ConnectTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := mcpsource.New(mcpsource.Config{Name: "fs", Transport: mcpsource.Stdio,
		Command: testservers.NodeBin(t, "mcp-server-filesystem"), Args: []string{dir}, ConnectTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(everything, manager.ServerOptions{}), manager.WithSource(fs, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	var mu sync.Mutex
	var recorded []*tool.Record
	cfg := config.Pipeline{
		Dedupe:       config.Dedupe{Tools: []config.DedupeTool{{Tools: "fs/read_text_file", Keys: []string{"path"}, Policy: "reject"}}},
		Fallbacks:    []config.Fallback{{Tools: []string{"fs/get_file_info"}, On: []string{"tool_error"}, Target: "everything/echo", Arguments: map[string]string{"message": "path"}}},
		Truncate:     config.Truncate{Tools: []config.ToolLimit{{Tools: "everything/get-env", MaxChars: 300}}},
		Instructions: config.Instructions{Tools: []config.ToolText{{Tools: "fs/*", Text: "Paths must be absolute and inside the allowed directory."}}},
	}
	p, err := pipeline.New(m, append(pipeline.FromConfig(cfg), pipeline.WithDataDir(dataDir),
		pipeline.WithRecorder(pipeline.RecorderFunc(func(_ context.Context, r *tool.Record) { mu.Lock(); recorded = append(recorded, r); mu.Unlock() })))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := func(server, name string, args map[string]any) *tool.Record {
		t.Helper()
		return p.Call(ctx, tool.Call{Task: "task-1", Session: "main", Server: server, Tool: name, Arguments: args})
	}

	// Repair: a near-miss key and a number sent as a string.
	rec := call("everything", "get-sum", map[string]any{"A": "2", "b": 40})
	if rec.Err() != nil || !strings.Contains(rec.Result.Text(), "42") {
		t.Fatalf("repaired get-sum: %v %s", rec.Err(), rec.Result.Summary())
	}
	if layers := notesBy(rec, "repair"); len(layers) != 2 {
		t.Errorf("repair notes: %+v", rec.Notes)
	}

	// Validation: the server is never called with arguments that cannot work.
	rec = call("everything", "get-sum", map[string]any{"a": 1})
	if tool.KindOf(rec.Err()) != tool.KindInvalidParams || !strings.Contains(rec.Error.Message, "/b") || rec.Attempts != 0 {
		t.Errorf("validation: %+v", rec.Error)
	}

	// Content of every kind passes the chain unchanged.
	rec = call("everything", "get-tiny-image", nil)
	if rec.Err() != nil || !hasImage(rec.Result) {
		t.Errorf("image through the chain: %v %s", rec.Err(), rec.Result.Summary())
	}

	// Progress still reaches the caller through every middleware.
	var reports int
	pctx := tool.WithProgress(ctx, func(tool.Progress) { mu.Lock(); reports++; mu.Unlock() })
	if rec := p.Call(pctx, tool.Call{Server: "everything", Tool: "trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 2}}); rec.Err() != nil {
		t.Fatal(rec.Err())
	}
	testservers.Eventually(2*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return reports >= 2 })

	// Truncation with the full output spilled to the data directory.
	rec = call("everything", "get-env", nil)
	if rec.Err() != nil {
		t.Fatal(rec.Err())
	}
	tn := notesBy(rec, "truncate")
	if len(tn) != 1 {
		t.Fatalf("get-env was not truncated: %d chars", len(rec.Result.Text()))
	}
	spill := tn[0].Data["spill_path"].(string)
	if b, err := os.ReadFile(spill); err != nil || len(b) <= 300 || !strings.HasPrefix(spill, dataDir) {
		t.Errorf("spill file %s: %v, %d bytes", spill, err, len(b))
	}

	// Duplicate detection, committed per turn, with a rollback verdict.
	path := filepath.Join(dir, "notes.txt")
	rec = call("fs", "read_text_file", map[string]any{"path": path})
	if rec.Err() != nil || rec.Result.Text() != "alpha beta gamma" {
		t.Fatalf("read_text_file: %v %s", rec.Err(), rec.Result.Summary())
	}
	if len(rec.Instructions) != 1 {
		t.Errorf("first use of fs/* should carry instructions: %v", rec.Instructions)
	}
	p.Commit("task-1", "main")
	rec = call("fs", "read_text_file", map[string]any{"path": path})
	if tool.KindOf(rec.Err()) != tool.KindDuplicateQuery || rec.Verdict == nil || !rec.Verdict.Rollback {
		t.Errorf("duplicate: %v verdict %+v", rec.Err(), rec.Verdict)
	}
	if len(rec.Instructions) != 0 {
		t.Errorf("second use got instructions again: %v", rec.Instructions)
	}
	// Another session of the same task has its own history.
	other := p.Call(ctx, tool.Call{Task: "task-1", Session: "agent-browsing-1", Server: "fs", Tool: "read_text_file", Arguments: map[string]any{"path": path}})
	if other.Err() != nil {
		t.Errorf("sub-agent session: %v", other.Err())
	}

	// A fallback chosen by error kind: get_file_info on a missing file is a
	// tool error, answered by everything/echo.
	rec = call("fs", "get_file_info", map[string]any{"path": filepath.Join(dir, "missing.txt")})
	if rec.Err() != nil || !strings.Contains(rec.Result.Text(), "missing.txt") {
		t.Fatalf("fallback: %v %s", rec.Err(), rec.Result.Summary())
	}
	if fb := notesBy(rec, "fallback"); len(fb) == 0 || fb[len(fb)-1].Data["target"] != "everything/echo" {
		t.Errorf("fallback notes: %+v", rec.Notes)
	}

	// Exactly one record per call reached the recorder, secrets masked.
	secret := call("everything", "echo", map[string]any{"message": "key sk-0123456789abcdefghijklmn"})
	if strings.Contains(secret.Result.Text(), "sk-0123") || strings.Contains(secret.Arguments["message"].(string), "sk-0123") {
		t.Errorf("secret in record: %v / %s", secret.Arguments, secret.Result.Text())
	}
	mu.Lock()
	n := len(recorded)
	mu.Unlock()
	if n != 10 {
		t.Errorf("recorder saw %d records for 10 calls", n)
	}
}

func notesBy(rec *tool.Record, layer string) []tool.Note {
	var out []tool.Note
	for _, n := range rec.Notes {
		if n.Layer == layer {
			out = append(out, n)
		}
	}
	return out
}

func hasImage(r *tool.Result) bool {
	if r == nil {
		return false
	}
	for _, c := range r.Content {
		if c.Type == tool.ContentImage && len(c.Data) > 0 {
			return true
		}
	}
	return false
}
