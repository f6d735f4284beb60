package pipeline

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/toolmux/toolmux/config"
)

func applied(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FromConfig carries every key of the `pipeline:` section into the
// pipeline's own options: the section and the options have the same
// fields, so the same JSON.
func TestFromConfigCarriesEverySetting(t *testing.T) {
	c := config.Pipeline{
		Order:     []string{NameRecord, NameDedupe},
		Repair:    config.Repair{Aliases: []config.Aliases{{Tools: "web/*", Map: map[string]string{"q": "query"}}}, NoSchema: true},
		Validate:  config.Validate{MaxArgumentBytes: 99},
		URLPolicy: config.URLPolicy{Arguments: []string{"site"}, Default: "deny", Rules: []config.URLRule{{Action: "allow", Host: "a.org", Path: "/x/**", Tools: []string{"web/*"}, Message: "m"}}},
		Dedupe:    config.Dedupe{Policy: "reject", Keys: []string{"q"}, Tools: []config.DedupeTool{{Tools: "s/t", Keys: []string{"u"}, Policy: "warn"}}},
		Fallbacks: []config.Fallback{{Tools: []string{"a/b"}, On: []string{"timeout"}, Target: "c/d", Arguments: map[string]string{"x": "y"}}},
		Truncate: config.Truncate{MaxChars: 7, Tools: []config.ToolLimit{{Tools: "a/*", MaxChars: 3}},
			LowContext: config.LowContext{Enabled: true, MaxChars: 5, Tools: []config.ToolLimit{{Tools: "b/*", MaxChars: 2}}}},
		Rollback:     config.Rollback{Rules: []config.RollbackRule{{Tools: []string{"a/*"}, Prefix: "p", IsError: true, JSONEmpty: "d.i", Kinds: []string{"timeout"}, Reason: "r"}}},
		Instructions: config.Instructions{Tools: []config.ToolText{{Tools: "a/*", Text: "t"}}, Rules: []config.InstructionRule{{Tools: []string{"b/*"}, Match: "m", Kinds: []string{"timeout"}, Text: "u"}}},
		Redact:       config.Redact{Keys: []string{"k"}, Patterns: []string{"p+"}},
		PII:          config.PII{Rules: []config.PIIRule{{Kinds: []string{"email"}, On: []string{"result"}, Action: "mask", Tools: []string{"a/*"}}}, Regions: []string{"GB"}, MaxFindings: 4},
	}
	o := applied(FromConfig(c))
	pairs := []struct {
		name      string
		cfg, opts any
	}{
		{"repair", c.Repair, o.repair},
		{"validate", c.Validate, o.validate},
		{"url_policy", c.URLPolicy, o.urlPolicy},
		{"dedupe", c.Dedupe, o.dedupe},
		{"fallbacks", c.Fallbacks, o.fallbacks},
		{"truncate", c.Truncate, o.truncate},
		{"rollback", c.Rollback, o.rollback},
		{"instructions", c.Instructions, o.instructions},
		{"redact", c.Redact, o.redact},
		{"pii", c.PII, o.pii},
	}
	for _, p := range pairs {
		if got, want := jsonOf(t, p.opts), jsonOf(t, p.cfg); got != want {
			t.Errorf("%s: the options are %s, the section %s", p.name, got, want)
		}
	}
	if !o.orderSet || !slices.Equal(o.order, c.Order) {
		t.Errorf("order: %v (set %v)", o.order, o.orderSet)
	}
	// A key added to the section must be carried too.
	if n := reflect.TypeFor[config.Pipeline]().NumField(); n != len(pairs)+1 {
		t.Errorf("config.Pipeline has %d fields; this test and FromConfig know %d", n, len(pairs)+1)
	}
}

// Unset keys stay unset, so the pipeline's defaults apply: nil lists are
// not made empty (an empty list of rollback rules means no rule).
func TestFromConfigLeavesDefaults(t *testing.T) {
	o := applied(FromConfig(config.Pipeline{}))
	if o.orderSet || o.rollback.Rules != nil || o.dedupe.Keys != nil || o.fallbacks != nil {
		t.Errorf("defaults overridden: %+v", o)
	}
	o = applied(FromConfig(config.Pipeline{Order: []string{}, Rollback: config.Rollback{Rules: []config.RollbackRule{}}}))
	if !o.orderSet || len(o.order) != 0 || o.rollback.Rules == nil {
		t.Errorf("empty lists lost: %+v", o)
	}
}

// config validates `pipeline.order` against its own list of names, which
// must be the pipeline's.
func TestConfigKnowsTheMiddlewares(t *testing.T) {
	if !slices.Equal(config.DefaultPipelineOrder, DefaultOrder()) {
		t.Errorf("config's default order %v, the pipeline's %v", config.DefaultPipelineOrder, DefaultOrder())
	}
	for _, name := range config.DefaultPipelineOrder {
		if _, _, err := (&chain{}).middleware(name, lookupOnly{}, options{}, ""); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// lookupOnly is a Backend for building middlewares that are never called.
type lookupOnly struct{ Backend }
