package gateway_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/gateway"
)

// The call of a name no tool of the route has is answered with an error
// whose message names the closest tool the caller sees (as `toolmux
// call` and the API do), not only its data: on /mcp and virtual servers,
// in both eras, by the gateway's own path and the go-sdk's alike. A
// caller who may not see the closest tool is not told of it.
func TestUnknownToolMessageNamesTheClosest(t *testing.T) {
	url := teamGateway(t, gateway.ToolSearch{})
	for _, c := range []struct {
		route, token, name, want string
	}{
		{"/mcp", "root-token", "up__prats", `unknown tool "up__prats"; did you mean "up__parts"?`},
		// A bare tool name finds the name the route shows it as.
		{"/mcp", "root-token", "progress", `unknown tool "progress"; did you mean "up__progress"?`},
		{"/mcp", "alice-token", "up__prats", `unknown tool "up__prats"; did you mean "up__parts"?`},
		// progress is ops': alice is not pointed to it.
		{"/mcp", "alice-token", "up__progres", `unknown tool "up__progres"`},
		{"/virtual/all/mcp", "root-token", "up__prats", `unknown tool "up__prats"; did you mean "up__parts"?`},
		{"/virtual/all/mcp", "root-token", "up2__parts", `unknown tool "up2__parts"; did you mean "up__parts"?`},
		{"/virtual/devs/mcp", "alice-token", "up__logg", `unknown tool "up__logg"; did you mean "up__log"?`},
		{"/virtual/devs/mcp", "alice-token", "up__progres", `unknown tool "up__progres"`},
	} {
		auth := map[string]string{"Authorization": "Bearer " + c.token}
		t.Run(fmt.Sprintf("%s/%s/%s/2025-11-25", c.route, strings.TrimSuffix(c.token, "-token"), c.name), func(t *testing.T) {
			cs := connectAs(t, url+c.route, c.token, "2025-11-25")
			body := `{"jsonrpc":"2.0","id":"u-1","method":"tools/call","params":{"name":"` + c.name + `","arguments":{}}}`
			_, own := postMCP(t, url+c.route, cs, body, auth)
			auth := map[string]string{"Authorization": auth["Authorization"], "Mcp-Method": "tools/call"}
			_, sdk := postMCP(t, url+c.route, cs, body, auth)
			if len(own) != 1 || len(sdk) != 1 {
				t.Fatalf("messages: own %v, go-sdk %v", own, sdk)
			}
			checkUnknownTool(t, own[0], sdk[0], c.want)
		})
		t.Run(fmt.Sprintf("%s/%s/%s/2026-07-28", c.route, strings.TrimSuffix(c.token, "-token"), c.name), func(t *testing.T) {
			_, _, own := post2026Raw(t, url+c.route, "u", c.name, `{}`, auth)
			auth := map[string]string{"Authorization": auth["Authorization"], "Mcp-Param-Unbound": "1"}
			_, _, sdk := post2026Raw(t, url+c.route, "u", c.name, `{}`, auth)
			checkUnknownTool(t, own, sdk, c.want)
		})
	}
}

// checkUnknownTool checks that the gateway's own answer is the go-sdk
// path's, an invalid-params error saying want, of kind
// tool_not_registered.
func checkUnknownTool(t *testing.T, own, sdk map[string]any, want string) {
	t.Helper()
	o, _ := json.Marshal(own)
	s, _ := json.Marshal(sdk)
	if string(o) != string(s) {
		t.Errorf("own answer\n%s\ngo-sdk's\n%s", o, s)
	}
	var m struct {
		Error struct {
			Code    int
			Message string
			Data    struct{ Kind, Suggestion string }
		}
	}
	if err := json.Unmarshal(o, &m); err != nil {
		t.Fatal(err)
	}
	if m.Error.Code != -32602 || m.Error.Message != want || m.Error.Data.Kind != "tool_not_registered" {
		t.Errorf("answer %s, want the message %q", o, want)
	}
	if sug, ok := strings.CutSuffix(m.Error.Message, `"?`); ok && !strings.HasSuffix(sug, `"`+m.Error.Data.Suggestion) {
		t.Errorf("the message and the data name different tools: %s", o)
	}
}

// serve --stdio answers an unknown tool as /mcp does, the closest tool
// named.
func TestStdioUnknownToolMessageNamesTheClosest(t *testing.T) {
	a := newApprovalsGateway(t, time.Minute, 0)
	send := stdioClient(t, a.g, 0)
	answer := send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"builtin__raed_file","arguments":{}}}`)
	var m struct {
		Error struct {
			Code    int
			Message string
			Data    struct{ Kind, Suggestion string }
		}
	}
	if err := json.Unmarshal([]byte(answer), &m); err != nil {
		t.Fatalf("%q: %v", answer, err)
	}
	if m.Error.Code != -32602 || m.Error.Message != `unknown tool "builtin__raed_file"; did you mean "builtin__read_file"?` ||
		m.Error.Data.Kind != "tool_not_registered" || m.Error.Data.Suggestion != "builtin__read_file" {
		t.Errorf("answer %s", answer)
	}
}
