package pipeline

import (
	"strings"
	"testing"
)

// BenchmarkRedactText is what masking secrets costs the record step per
// 10 KB string of a result (BENCHMARKS.md §32): text with no secret (the
// usual case), text with one bearer token, and the same clean text with a
// pattern of the configuration's (redact.patterns), which the built-in
// patterns' hints cannot vouch for.
func BenchmarkRedactText(b *testing.B) {
	var clean strings.Builder
	for clean.Len() < 10_000 {
		clean.WriteString("Order 48213 shipped on 2024-01-15 from warehouse 7 (weight 3.5 kg, 12 items); status ok.\n")
	}
	text := clean.String()[:10_000]
	secret := text[:5_000] + "Authorization: Bearer abcdefghijklmnop\n" + text[5_000:]
	builtin, err := newRedactor(RedactOptions{})
	if err != nil {
		b.Fatal(err)
	}
	custom, err := newRedactor(RedactOptions{Patterns: []string{`\bcorp-[0-9]{8}\b`}})
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name string
		r    *redactor
		in   string
		same bool
	}{
		{"clean", builtin, text, true},
		{"one-secret", builtin, secret, false},
		{"clean-custom-pattern", custom, text, true},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(v.in)))
			for b.Loop() {
				if out := v.r.text(v.in); (out == v.in) != v.same {
					b.Fatalf("masked: %v", out != v.in)
				}
			}
		})
	}
}
