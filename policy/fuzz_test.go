package policy_test

import (
	"context"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/policy"
)

// FuzzAnswer feeds arbitrary input to a terminal prompt: whatever is typed,
// it must end (never hang or panic) with the answer of the first line that
// is one, or Decline at the end of input.
func FuzzAnswer(f *testing.F) {
	for _, seed := range []string{"y\n", "n", "\n\nt\n", "garbage\r\n3\r\n", "yes please\nno\n", "\x00\xff\n4", " Y \n"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input string) {
		term := policy.NewTerminal(strings.NewReader(input), io.Discard)
		got, err := term.Approve(context.Background(), request(map[string]any{"input": input}))
		if err != nil {
			t.Fatalf("error %v", err)
		}
		want, exact := policy.Decline, true
		lines := strings.Split(input, "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		for _, l := range lines {
			if len(l) > 1000 {
				exact = false // the cut-off for long lines is approximate here
				break
			}
			if a, ok := policy.ParseAnswer(l); ok {
				want = a
				break
			}
		}
		if exact && got != want {
			t.Fatalf("got %v, want %v", got, want)
		}
		if got < policy.ProceedOnce || got > policy.Decline {
			t.Fatalf("invalid answer %v", got)
		}
	})
}

// FuzzArgs checks argument matching against its definition: a string is
// matched as it is, anything else as its JSON encoding.
func FuzzArgs(f *testing.F) {
	f.Add(`^git (status|diff)`, `"git status"`)
	f.Add(`^4[0-9]$`, `42`)
	f.Add(`"a"`, `["a", 1, null, {"b": true}]`)
	f.Add(`<`, `{"x": "<tag>"}`)
	f.Add(`(`, `1`)
	f.Fuzz(func(t *testing.T, expr, value string) {
		var v any
		if json.Unmarshal([]byte(value), &v) != nil {
			return
		}
		re, err := regexp.Compile(expr)
		e, nerr := policy.New(policy.ModeYolo, []policy.Rule{{Args: map[string]string{"a": expr}, Action: policy.Deny}})
		if (err != nil || expr == "") != (nerr != nil) {
			t.Fatalf("regexp error %v, New error %v", err, nerr)
		}
		if nerr != nil {
			return
		}
		d := e.Decide(shell, call(shell, map[string]any{"a": v}))
		if want := re.MatchString(policy.ArgumentText(v)); (d.Action == policy.Deny) != want {
			t.Fatalf("%q on %s (%q): %s, regexp says %v", expr, value, policy.ArgumentText(v), d.Action, want)
		}
		if s, ok := v.(string); ok && policy.ArgumentText(v) != s {
			t.Fatalf("string %q became %q", s, policy.ArgumentText(v))
		}
	})
}
