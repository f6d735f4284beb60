package tool_test

import (
	"testing"

	"github.com/toolmux/toolmux/tool"
)

func TestDepth(t *testing.T) {
	var deep any = "x"
	for range 10000 {
		deep = map[string]any{"a": []any{deep}}
	}
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	for _, tc := range []struct {
		v     any
		limit int
		want  int
	}{
		{"x", 10, 0},
		{map[string]any{}, 10, 1},
		{map[string]any{"a": []any{1, []any{}}}, 10, 3},
		{deep, 64, 65}, // deeper than the limit: limit+1, found without walking it all
		{cyclic, 64, 65},
	} {
		if got := tool.Depth(tc.v, tc.limit); got != tc.want {
			t.Errorf("Depth(%T, %d) = %d, want %d", tc.v, tc.limit, got, tc.want)
		}
	}
	if err := tool.CheckDepth(map[string]any{"a": deep}, 0); err == nil || err.Kind != tool.KindInvalidParams {
		t.Errorf("deep arguments: %v", err)
	}
	if err := tool.CheckDepth(map[string]any{"a": []any{"b"}}, 2); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	if err := tool.CheckDepth(map[string]any{"a": []any{[]any{}}}, 2); err == nil {
		t.Error("past the limit: accepted")
	}
}
