package gateway

import "testing"

func TestMessageDepth(t *testing.T) {
	for _, tc := range []struct {
		in    string
		depth int
		id    string
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"x"}`, 1, `7`},
		{`{"params":{"arguments":{"a":[[1]]}},"id": "req-\"1\"" ,"jsonrpc":"2.0"}`, 5, `"req-\"1\""`},
		{`{"method":"x","params":{"id":3,"s":"{[\"]}"}}`, 2, ``},
		{`[{"id":1}]`, 2, ``},
		{`{"id":null}`, 1, ``},
		{`{"id":{"x":1}}`, 2, ``},
	} {
		d, id := messageDepth([]byte(tc.in))
		if d != tc.depth || string(id) != tc.id {
			t.Errorf("%s: depth %d id %q, want %d %q", tc.in, d, id, tc.depth, tc.id)
		}
	}
}
