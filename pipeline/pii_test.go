package pipeline_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// The values the pii tests send; none may appear in a record but where a
// rule lets it through.
const (
	piiEmail = "jane.doe@example.org"
	piiCard  = "4111 1111 1111 1111"
)

func piiPipeline(t *testing.T, rules ...config.PIIRule) (*pipeline.Pipeline, *recorded) {
	t.Helper()
	return fixturePipeline(t, config.Pipeline{PII: config.PII{Rules: rules}}, t.TempDir(), 0)
}

// piiNote returns the record's one pii note of direction dir.
func piiNote(t *testing.T, rec *tool.Record, dir string) tool.Note {
	t.Helper()
	var found []tool.Note
	for _, n := range rec.Notes {
		if n.Layer == pipeline.NamePII && n.Data["direction"] == dir {
			found = append(found, n)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d pii notes of the %s, want 1: %+v", len(found), dir, rec.Notes)
	}
	return found[0]
}

// findings returns a note's findings as "kind path action" strings.
func findings(n tool.Note) []string {
	var out []string
	list, _ := n.Data["findings"].([]any)
	for _, f := range list {
		m := f.(map[string]any)
		out = append(out, m["kind"].(string)+" "+m["path"].(string)+" "+m["action"].(string))
	}
	return out
}

// jsonHas reports whether the JSON of v contains s.
func jsonHas(t *testing.T, v any, s string) bool {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), s)
}

// checkRecorded checks that the recorder got rec, the record returned.
func checkRecorded(t *testing.T, got *recorded, rec *tool.Record) {
	t.Helper()
	if all := got.all(); len(all) != 1 || all[0] != rec {
		t.Errorf("%d records recorded, want the one returned", len(all))
	}
}

// mask on arguments: the server gets the placeholder (the fixture's echo
// answers what it was sent), the record's arguments hold it, and the note
// names kind and path only.
func TestPIIMasksArguments(t *testing.T) {
	p, got := piiPipeline(t, config.PIIRule{Kinds: []string{"email", "card"}, On: []string{"arguments"}, Action: "mask"})
	rec := p.Call(context.Background(), tool.Call{Server: "fx", Tool: "echo",
		Arguments: map[string]any{"message": "mail " + piiEmail + ", pay with " + piiCard}})
	if rec.Err() != nil {
		t.Fatal(rec.Err())
	}
	if text, want := rec.Result.Text(), "Echo: mail [email], pay with [card]"; text != want {
		t.Errorf("the server got %q, want %q", text, want)
	}
	if msg := rec.Arguments["message"]; msg != "mail [email], pay with [card]" {
		t.Errorf("recorded arguments %q", msg)
	}
	n := piiNote(t, rec, "arguments")
	if f := strings.Join(findings(n), "; "); f != "email /message mask; card /message mask" {
		t.Errorf("findings %q", f)
	}
	if jsonHas(t, rec, piiEmail) || jsonHas(t, rec, piiCard) {
		t.Errorf("the record keeps a value: %+v", rec)
	}
	checkRecorded(t, got, rec)
}

// refuse on arguments: the call is not made, the error is a
// policy_violation naming the kind and where, and the record keeps no
// value (its arguments masked, though only the rule for email refuses).
func TestPIIRefusesArguments(t *testing.T) {
	p, got := piiPipeline(t,
		config.PIIRule{Kinds: []string{"email"}, On: []string{"arguments"}, Action: "refuse"},
		config.PIIRule{Kinds: []string{"card"}, Action: "note"})
	rec := p.Call(context.Background(), tool.Call{Server: "fx", Tool: "echo",
		Arguments: map[string]any{"message": "mail " + piiEmail + " card " + piiCard}})
	if tool.KindOf(rec.Err()) != tool.KindPolicyViolation || rec.Attempts != 0 {
		t.Fatalf("error %v after %d attempts, want a policy_violation before the call", rec.Err(), rec.Attempts)
	}
	if msg := rec.Error.Message; !strings.Contains(msg, "an email address at /message") || strings.Contains(msg, "card") {
		t.Errorf("message %q: want the email's kind and path, not the noted card", msg)
	}
	if f := strings.Join(findings(piiNote(t, rec, "arguments")), "; "); f != "email /message refuse; card /message note" {
		t.Errorf("findings %q", f)
	}
	if msg := rec.Arguments["message"]; msg != "mail [email] card [card]" {
		t.Errorf("recorded arguments %q", msg)
	}
	if jsonHas(t, rec, piiEmail) || jsonHas(t, rec, piiCard) || strings.Contains(formatText(pipeline.Format(rec)), piiEmail) {
		t.Errorf("the record or the model's text keeps a value: %+v", rec)
	}
	checkRecorded(t, got, rec)
}

// note on arguments: the call goes on unchanged, and the note names kind
// and path, never the value.
func TestPIINotesArguments(t *testing.T) {
	p, got := piiPipeline(t, config.PIIRule{Kinds: []string{"email"}, On: []string{"arguments"}, Action: "note"})
	rec := p.Call(context.Background(), tool.Call{Server: "fx", Tool: "echo",
		Arguments: map[string]any{"message": "mail " + piiEmail}})
	if rec.Err() != nil || rec.Result.Text() != "Echo: mail "+piiEmail {
		t.Fatalf("the call changed: %v %+v", rec.Err(), rec.Result)
	}
	n := piiNote(t, rec, "arguments")
	if f := strings.Join(findings(n), "; "); f != "email /message note" {
		t.Errorf("findings %q", f)
	}
	if jsonHas(t, n, piiEmail) || jsonHas(t, n, "jane") {
		t.Errorf("the note quotes the value: %+v", n)
	}
	checkRecorded(t, got, rec)
}

// mask on results: the server got the value, the model gets the
// placeholder.
func TestPIIMasksResult(t *testing.T) {
	p, _ := piiPipeline(t, config.PIIRule{Kinds: []string{"email"}, On: []string{"result"}, Action: "mask"})
	rec := p.Call(context.Background(), tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": piiEmail}})
	if rec.Err() != nil || rec.Result.Text() != "Echo: [email]" {
		t.Fatalf("result %v %+v", rec.Err(), rec.Result)
	}
	if f := strings.Join(findings(piiNote(t, rec, "result")), "; "); f != "email /content/0/text mask" {
		t.Errorf("findings %q", f)
	}
	if strings.Contains(formatText(pipeline.Format(rec)), piiEmail) {
		t.Errorf("the model's text keeps the value: %q", formatText(pipeline.Format(rec)))
	}
}

// refuse on results: the call ran, its result is withheld, the error
// names the kind and where.
func TestPIIRefusesResult(t *testing.T) {
	p, got := piiPipeline(t, config.PIIRule{Kinds: []string{"card"}, On: []string{"result"}, Action: "refuse"})
	rec := p.Call(context.Background(), tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "card " + piiCard}})
	if tool.KindOf(rec.Err()) != tool.KindPolicyViolation || rec.Attempts != 1 || rec.Result != nil {
		t.Fatalf("error %v, %d attempts, result %+v: want the result withheld", rec.Err(), rec.Attempts, rec.Result)
	}
	if msg := rec.Error.Message; !strings.Contains(msg, "withheld") || !strings.Contains(msg, "a payment card number at /content/0/text") {
		t.Errorf("message %q", msg)
	}
	if f := strings.Join(findings(piiNote(t, rec, "result")), "; "); f != "card /content/0/text refuse" {
		t.Errorf("findings %q", f)
	}
	out := formatText(pipeline.Format(rec))
	if strings.Contains(out, piiCard) || !strings.Contains(out, "policy_violation") {
		t.Errorf("the model's text: %q", out)
	}
	checkRecorded(t, got, rec)
}

// note on results: the result goes on unchanged, noted.
func TestPIINotesResult(t *testing.T) {
	p, _ := piiPipeline(t, config.PIIRule{On: []string{"result"}, Action: "note"})
	rec := p.Call(context.Background(), tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "+44 20 7946 0958"}})
	if rec.Err() != nil || rec.Result.Text() != "Echo: +44 20 7946 0958" {
		t.Fatalf("result %v %+v", rec.Err(), rec.Result)
	}
	n := piiNote(t, rec, "result")
	if f := strings.Join(findings(n), "; "); f != "phone /content/0/text note" {
		t.Errorf("findings %q", f)
	}
	if jsonHas(t, n, "7946") {
		t.Errorf("the note quotes the value: %+v", n)
	}
}

// The rules apply to the tools they name, and the first rule naming a kind
// decides.
func TestPIIRuleOrderAndTools(t *testing.T) {
	p, _ := piiPipeline(t,
		config.PIIRule{Kinds: []string{"email"}, Action: "note", Tools: []string{"fx/echo"}},
		config.PIIRule{Kinds: []string{"email"}, Action: "refuse"})
	ctx := context.Background()
	if rec := p.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": piiEmail}}); rec.Err() != nil {
		t.Errorf("echo: the first rule (note) should decide: %v", rec.Err())
	}
	rec := p.Call(ctx, tool.Call{Server: "fx", Tool: "sink", Arguments: map[string]any{"to": piiEmail}})
	if tool.KindOf(rec.Err()) != tool.KindPolicyViolation || !strings.Contains(rec.Error.Message, "/to") {
		t.Errorf("sink: %v, want the second rule's refusal", rec.Err())
	}
}

// A text too large to hold was spilled by the source: the stage checks
// the beginning and end the part keeps, never the file, and where a rule
// masks, the part goes on without its file so no unchecked text reaches
// the model; a note says so.
func TestPIISpilledResultIsDetached(t *testing.T) {
	p, _ := fixturePipeline(t, config.Pipeline{PII: config.PII{Rules: []config.PIIRule{{On: []string{"result"}, Action: "mask"}}}},
		t.TempDir(), 64<<10)
	rec := p.Call(context.Background(), tool.Call{Server: "fx", Tool: "big", Arguments: map[string]any{"bytes": 1 << 20}})
	if rec.Err() != nil {
		t.Fatal(rec.Err())
	}
	var partial bool
	for _, n := range rec.Notes {
		partial = partial || n.Layer == pipeline.NamePII && n.Data["kind"] == "pii_partial"
	}
	if !partial || rec.Result.Content[0].Spill != nil {
		t.Errorf("partial note %v, spill %+v: want the part detached from its file", partial, rec.Result.Content[0].Spill)
	}
}

// A configuration the stage cannot use is refused when the pipeline is
// built, naming what is wrong.
func TestPIIBadOptions(t *testing.T) {
	for bad, o := range map[string]pipeline.PIIOptions{
		`"drop"`: {Rules: []pipeline.PIIRule{{Action: "drop"}}},
		`"ssn"`:  {Rules: []pipeline.PIIRule{{Action: "mask", Kinds: []string{"ssn"}}}},
		`"both"`: {Rules: []pipeline.PIIRule{{Action: "mask", On: []string{"both"}}}},
		`"XX"`:   {Regions: []string{"XX"}},
		"a/b/c[": {Rules: []pipeline.PIIRule{{Action: "mask", Tools: []string{"a/b/c["}}}},
		"-1":     {MaxFindings: -1},
	} {
		// The message names the value at fault, for the person fixing it.
		if _, err := pipeline.NewPII(o); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: err %v", bad, err)
		}
	}
}

// formatText joins the text of what the model sees.
func formatText(cs []tool.Content) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.Text)
	}
	return b.String()
}

// The example of docs/pipeline.md's pii section does what the text says:
// a card number anywhere refuses, an email address outside crm's tools is
// noted and goes through.
func TestPIIDocExample(t *testing.T) {
	data, err := os.ReadFile("../docs/pipeline.md")
	if err != nil {
		t.Fatal(err)
	}
	var example string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(pipeline:\n  pii:\n.*?)```").FindAllStringSubmatch(string(data), -1) {
		example = m[1]
	}
	if example == "" {
		t.Fatal("docs/pipeline.md has no pii example")
	}
	cfg, err := config.ParseWith("pipeline.md", []byte(example), config.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := fixturePipeline(t, cfg.Pipeline, t.TempDir(), 0)
	ctx := context.Background()
	rec := p.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": "card " + piiCard}})
	if tool.KindOf(rec.Err()) != tool.KindPolicyViolation {
		t.Errorf("a card number: %v, want refused", rec.Err())
	}
	rec = p.Call(ctx, tool.Call{Server: "fx", Tool: "echo", Arguments: map[string]any{"message": piiEmail}})
	if rec.Err() != nil || rec.Result.Text() != "Echo: "+piiEmail {
		t.Fatalf("an email address: %v %+v, want it through", rec.Err(), rec.Result)
	}
	if f := findings(piiNote(t, rec, "arguments")); len(f) != 1 || f[0] != "email /message note" {
		t.Errorf("findings %q", f)
	}
}
