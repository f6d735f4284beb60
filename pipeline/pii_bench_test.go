package pipeline_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// piiBenchText is a 10 KB result of the usual kind: lines of prose with
// numbers, dates and amounts, and, every dense-th line (0: none), a line
// with an email address, a phone number and a card number.
func piiBenchText(dense int) string {
	var b strings.Builder
	for i := 0; b.Len() < 10_000; i++ {
		if dense > 0 && i%dense == dense-1 {
			b.WriteString("Contact jane.doe@example.org or +44 20 7946 0958; card on file 4111 1111 1111 1111.\n")
			continue
		}
		b.WriteString("Order 48213 shipped on 2024-01-15 from warehouse 7 (weight 3.5 kg, 12 items); status ok.\n")
	}
	return b.String()[:10_000]
}

// BenchmarkPIIStage is the CPU the pii stage costs one call with a 10 KB
// text result, in front of a stub that answers at once: without rules (the
// stage in the default chain), with every kind masked on a result with
// nothing to find (the usual case), and on one with a finding of each of
// three kinds every 10 lines. BENCHMARKS.md §32 records the numbers.
func BenchmarkPIIStage(b *testing.B) {
	all := []pipeline.PIIRule{{Action: pipeline.PIIMask}}
	for _, v := range []struct {
		name  string
		rules []pipeline.PIIRule
		text  string
	}{
		{"no-rules", nil, piiBenchText(0)},
		{"mask-clean", all, piiBenchText(0)},
		{"mask-dense", all, piiBenchText(10)},
	} {
		b.Run(v.name, func(b *testing.B) {
			mw, err := pipeline.NewPII(pipeline.PIIOptions{Rules: v.rules})
			if err != nil {
				b.Fatal(err)
			}
			h := mw(pipeline.HandlerFunc(func(_ context.Context, call tool.Call) *tool.Record {
				return &tool.Record{Server: call.Server, Tool: call.Tool, Arguments: call.Arguments, Result: tool.TextResult(v.text), Attempts: 1}
			}))
			call := tool.Call{Server: "fx", Tool: "fetch", Arguments: map[string]any{"url": "https://example.org/orders?page=2", "limit": 50}}
			ctx := context.Background()
			b.ReportAllocs()
			b.SetBytes(int64(len(v.text)))
			for b.Loop() {
				rec := h.Call(ctx, call)
				if rec.Err() != nil || len(rec.Result.Text()) < 9_000 {
					b.Fatalf("record %+v", rec)
				}
			}
		})
	}
}
