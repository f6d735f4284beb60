package pipeline

import (
	"encoding/json"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

func TestRepairScalarToString(t *testing.T) {
	def := tool.Tool{Server: "s", Name: "t", InputSchema: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"id":     map[string]any{"type": "string"},
			"flag":   map[string]any{"type": "string"},
			"either": map[string]any{"type": []any{"string", "integer"}},
			"any":    map[string]any{},
		},
	}}
	in := map[string]any{"id": json.Number("123"), "flag": true, "either": 7.0, "any": 3.0}
	out, reps := Repair(def, in, nil, true)
	if out["id"] != "123" || out["flag"] != "true" {
		t.Errorf("coerced: %#v", out)
	}
	if out["either"] != 7.0 || out["any"] != 3.0 {
		t.Errorf("values a schema allows as they are were changed: %#v", out)
	}
	if len(reps) != 2 || in["id"] != json.Number("123") {
		t.Errorf("repairs %+v; input %v", reps, in)
	}
}
