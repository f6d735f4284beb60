package funcsource_test

import (
	"context"
	"testing"

	"github.com/toolmux/toolmux/funcsource"
)

// BenchmarkCall is what the source adds to a call of a function that does
// nothing: checking and decoding the arguments, the result.
func BenchmarkCall(b *testing.B) {
	src := funcsource.New("s", funcsource.Func("add", "", add))
	ctx := context.Background()
	args := map[string]any{"a": 1.5, "b": 2.0}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := src.Call(ctx, "add", args); err != nil || res.Text() != "3.5" {
			b.Fatal(res, err)
		}
	}
}
