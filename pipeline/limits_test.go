package pipeline_test

import (
	"context"
	"encoding/json"
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
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// recorded collects what a pipeline records.
type recorded struct {
	mu   sync.Mutex
	recs []*tool.Record
}

func (r *recorded) Record(_ context.Context, rec *tool.Record) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

func (r *recorded) all() []*tool.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tool.Record(nil), r.recs...)
}

// fixturePipeline is a pipeline in front of the fixture MCP server over
// stdio, its big results spilled under dataDir.
func fixturePipeline(t *testing.T, cfg config.Pipeline, dataDir string, maxResult int, opts ...pipeline.Option) (*pipeline.Pipeline, *recorded) {
	t.Helper()
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t),
		ConnectTimeout: 10 * time.Second, StopGrace: time.Second, SpillDir: filepath.Join(dataDir, "spill"), MaxResultBytes: maxResult})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	rec := &recorded{}
	p, err := pipeline.New(m, append(append(pipeline.FromConfig(cfg), pipeline.WithDataDir(dataDir), pipeline.WithRecorder(rec)), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p, rec
}

func nested(depth int) any {
	var v any = "bottom"
	for range depth {
		v = []any{v}
	}
	return v
}

// Arguments nested past the limit are refused as invalid_tool_params
// before any middleware (or the server) sees them, and the refusal is
// recorded with the arguments cut at the limit, so that nothing after it
// walks the whole of them. A Go caller's cyclic map, which no JSON can
// make, is refused the same way instead of hanging the process.
func TestDeepArgumentsAreRefusedFirst(t *testing.T) {
	p, rec := fixturePipeline(t, config.Pipeline{}, t.TempDir(), 0, pipeline.WithLimits(pipeline.Limits{MaxDepth: 8}))
	ctx := context.Background()
	cyclic := map[string]any{"message": "hi"}
	cyclic["self"] = cyclic
	for name, args := range map[string]map[string]any{
		"deep":   {"message": nested(5000)},
		"cyclic": cyclic,
	} {
		r := p.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: args})
		if tool.KindOf(r.Err()) != tool.KindInvalidParams || !strings.Contains(r.Error.Message, "8 levels") ||
			!strings.Contains(r.Error.Message, "limits.max_depth") {
			t.Fatalf("%s: %+v", name, r.Error)
		}
		if r.Attempts != 0 {
			t.Errorf("%s: the call was made (%d attempts)", name, r.Attempts)
		}
		if d := tool.Depth(r.Arguments, 100); d > 9 {
			t.Errorf("%s: the record keeps arguments %d levels deep", name, d)
		}
		b, err := json.Marshal(r)
		if err != nil || !strings.Contains(string(b), "nested deeper than 8 levels") {
			t.Errorf("%s: record %v %.300s", name, err, b)
		}
	}
	if n := len(rec.all()); n != 2 {
		t.Errorf("%d records, want 2", n)
	}
	// Within the limit the call goes through.
	if r := p.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "ok"}}); r.Err() != nil {
		t.Errorf("shallow call: %v", r.Err())
	}
}

// A record is cut to fit MaxRecordBytes: the long argument and the long
// result share the room (each keeps its start and end around a marker), a
// note says what was done, and what is recorded is what the caller gets.
// A record within the limit is kept whole.
func TestRecordsAreBounded(t *testing.T) {
	const limit = 64 << 10
	// No truncate middleware: nothing else cuts the result.
	p, rec := fixturePipeline(t, config.Pipeline{Order: []string{"record", "validate"}}, t.TempDir(), 0,
		pipeline.WithLimits(pipeline.Limits{MaxRecordBytes: limit}))
	ctx := context.Background()
	long := "START" + strings.Repeat("m", 300<<10) + "END"
	r := p.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": long}})
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	b, _ := json.Marshal(r)
	if len(b) > limit+limit/8 {
		t.Errorf("the record is %d bytes, limit %d", len(b), limit)
	}
	arg, _ := r.Arguments["message"].(string)
	text := r.Result.Text()
	for what, s := range map[string]string{"argument": arg, "result": text} {
		if !strings.HasSuffix(s, "END") || !strings.Contains(s, "bytes cut by toolmux") || len(s) < limit/4 {
			t.Errorf("%s: %d bytes kept, %.40q…%q", what, len(s), s, s[max(len(s)-20, 0):])
		}
	}
	if !strings.HasPrefix(arg, "START") || !strings.HasPrefix(text, "Echo: START") {
		t.Errorf("heads lost: %.20q %.20q", arg, text)
	}
	if layers := noteLayers(r); len(layers) == 0 || layers[len(layers)-1] != "limits" {
		t.Errorf("notes: %v", layers)
	}
	small := p.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "short"}})
	if small.Result.Text() != "Echo: short" || len(small.Notes) != 0 {
		t.Errorf("a small record was changed: %+v", small.Notes)
	}
	all := rec.all()
	if len(all) != 2 || all[0] != r || all[1] != small {
		t.Errorf("recorded %d records, not the ones returned", len(all))
	}
}

func noteLayers(r *tool.Record) []string {
	var out []string
	for _, n := range r.Notes {
		out = append(out, n.Layer)
	}
	return out
}

// A result streamed to a file by the source is cut for the model from
// that file: the model sees the real beginning and end, and the call's
// spill file is the whole text, moved there rather than copied when it is
// one part, combined from the parts (and their files removed) when it is
// several.
func TestTruncateUsesSpilledText(t *testing.T) {
	data := t.TempDir()
	p, _ := fixturePipeline(t, config.Pipeline{Truncate: config.Truncate{MaxChars: 2000}}, data, 64<<10)
	ctx := context.Background()

	const size = 5 << 20
	r := p.Call(ctx, tool.Call{Server: "fx", Tool: "big", Arguments: map[string]any{"bytes": size}})
	want := testservers.BigText(size)
	path := spillPath(t, r)
	if got, err := os.ReadFile(path); err != nil || string(got) != want {
		t.Fatalf("the spill file is not the whole text (%v, %d bytes)", err, len(got))
	}
	text := r.Result.Text()
	i, j := strings.Index(text, "\n\n[... toolmux cut"), strings.Index(text, "...]\n\n")
	if len([]rune(text)) > 2000 || i < 0 || j < 0 || !strings.HasPrefix(want, text[:i]) ||
		!strings.HasSuffix(want, text[j+len("...]\n\n"):]) || !strings.Contains(text, path) {
		t.Errorf("the model's text is not the head and tail of the real one: %q", text)
	}
	if left, _ := filepath.Glob(filepath.Join(data, "spill", "fx", "*")); len(left) != 0 {
		t.Errorf("the source's file was copied, not moved: %v", left)
	}

	const n = 40 << 10 // the first part is held, the next two do not fit
	r = p.Call(ctx, tool.Call{Server: "fx", Tool: "bulk", Arguments: map[string]any{"parts": 3, "bytes": n}})
	parts := []string{testservers.BulkText(0, n), testservers.BulkText(1, n), testservers.BulkText(2, n)}
	path = spillPath(t, r)
	if got, err := os.ReadFile(path); err != nil || string(got) != strings.Join(parts, "\n") {
		t.Fatalf("the combined file differs (%v, %d bytes)", err, len(got))
	}
	text = r.Result.Text()
	if !strings.HasPrefix(text, parts[0][:1000]) || !strings.HasSuffix(text, parts[2][len(parts[2])-500:]) {
		t.Errorf("head or tail not the real text's: %.80q", text)
	}
	if left, _ := filepath.Glob(filepath.Join(data, "spill", "fx", "*")); len(left) != 0 {
		t.Errorf("the parts' files were left: %v", left)
	}
}

func spillPath(t *testing.T, r *tool.Record) string {
	t.Helper()
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	for _, n := range r.Notes {
		if p, ok := n.Data["spill_path"].(string); ok && n.Layer == "truncate" {
			return p
		}
	}
	t.Fatalf("no spill path in %+v", r.Notes)
	return ""
}

// Through the scheduler, a Go caller's cyclic arguments are refused before
// the policy's argument rules (which would encode them) or the recording
// of a refusal walk them: the process survives, the refusal is recorded.
func TestSchedulerRefusesCyclicArguments(t *testing.T) {
	p, rec := fixturePipeline(t, config.Pipeline{}, t.TempDir(), 0)
	engine, err := policy.New(policy.ModeDefault, []policy.Rule{{Tools: []string{"fx/echo"}, Args: map[string]string{"message": "x"}, Action: policy.Allow}})
	if err != nil {
		t.Fatal(err)
	}
	s := schedule.New(p, schedule.WithGate(policy.NewGate(engine)))
	cyclic := map[string]any{}
	cyclic["message"] = cyclic
	for _, c := range []tool.Call{
		{Server: "fx", Tool: "echo", Arguments: cyclic},
		{Server: "fx", Tool: "no_such_tool", Arguments: cyclic},
	} {
		r := s.Call(context.Background(), c)
		if tool.KindOf(r.Err()) != tool.KindInvalidParams || !strings.Contains(r.Error.Message, "limits.max_depth") {
			t.Errorf("%s: %+v", c.Tool, r.Error)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Errorf("%s: the record cannot be encoded: %v", c.Tool, err)
		}
	}
	if n := len(rec.all()); n != 2 {
		t.Errorf("%d records, want 2", n)
	}
}
