package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A 2026-07-28 client's requestState is its to send: whatever it holds,
// withState never fails, adds answers only from a state the gateway
// wrote (authState's prefix), and never lets a carried answer replace
// one the request sends itself; what authState writes, withState reads
// back, the credential questions' answers left out.
func FuzzWithState(f *testing.F) {
	accept := &mcp.ElicitResult{Action: "accept"}
	f.Add(authState(mcp.InputResponseMap{"toolmux-approval-1": accept}), `{"x":{"action":"decline"}}`)
	f.Add(authState(mcp.InputResponseMap{"a": accept, authKey("fx"): accept}), `{}`)
	f.Add(authStatePrefix+"!!!", `{"a":{"action":"accept"}}`)
	f.Add(authStatePrefix+"bnVsbA", ``)
	f.Add("someone-else's-state", `{"a":{"action":"cancel"}}`)
	f.Fuzz(func(t *testing.T, state, answersJSON string) {
		var answers mcp.InputResponseMap
		_ = json.Unmarshal([]byte(answersJSON), &answers)
		sent := encode(t, answers)
		out := withState(answers, state)
		if encode(t, answers) != sent {
			t.Fatal("withState changed the request's own answers")
		}
		for k, v := range answers {
			if out[k] != v {
				t.Fatalf("answer %q replaced by a carried one", k)
			}
		}
		if !strings.HasPrefix(state, authStatePrefix) && len(out) != len(answers) {
			t.Fatalf("a state the gateway did not write added %d answers", len(out)-len(answers))
		}
		// What the gateway writes of out, it reads back.
		back := withState(nil, authState(out))
		for k, v := range out {
			if strings.HasPrefix(k, authKeyPrefix) {
				if _, ok := back[k]; ok {
					t.Fatalf("a credential question's answer %q was carried", k)
				}
				continue
			}
			if v != nil && back[k] == nil {
				t.Fatalf("answer %q lost on the way", k)
			}
		}
	})
}

func encode(t *testing.T, m mcp.InputResponseMap) string {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
