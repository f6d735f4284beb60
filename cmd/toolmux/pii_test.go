package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
)

// The pii stage through the real binary: `toolmux call` masks an email
// address in the arguments (the fixture's echo answers what it was sent),
// refuses a card number as policy_violation naming the kind and where, and
// neither value is written anywhere under the data directory (the task
// log).
func TestCallPII(t *testing.T) {
	t.Parallel()
	const email, card = "jane.doe@example.org", "4111 1111 1111 1111"
	dir := workspace(t, fixtureConfig(t)+`pipeline:
  pii:
    rules:
      - {kinds: [card], on: [arguments], action: refuse}
      - {kinds: [email], action: mask}
`)
	data := t.TempDir()
	r := toolmux(t, dir, "", "--data-dir", data, "call", "fx", "echo", `{"message": "mail `+email+`"}`)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Echo: mail [email]" {
		t.Errorf("masked call: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = toolmux(t, dir, "", "--data-dir", data, "call", "fx", "echo", `{"message": "card `+card+`"}`, "--json")
	var rec struct {
		Attempts int
		Error    *struct{ Kind, Message string }
		Notes    []struct {
			Layer string
			Data  map[string]any
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || r.code != 1 || rec.Error == nil ||
		rec.Error.Kind != "policy_violation" || !strings.Contains(rec.Error.Message, "a payment card number at /message") || rec.Attempts != 0 {
		t.Errorf("refused call: exit %d %v %+v", r.code, err, rec)
	}
	if strings.Contains(r.stdout, card) || strings.Contains(r.stdout, email) {
		t.Errorf("the record shows a value: %s", r.stdout)
	}
	err := filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && (strings.Contains(string(b), card) || strings.Contains(string(b), email)) {
			t.Errorf("%s holds a value", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The pii stage on every MCP route of `toolmux serve`, in both protocol
// eras: /mcp, the passthrough route, a virtual server, and serve --stdio.
// An email address in a result is masked; a card number in the arguments
// is refused before the call, an error result naming kind and path
// without the value.
func TestServePIIEveryRoute(t *testing.T) {
	t.Parallel()
	const email, card = "jane.doe@example.org", "4111 1111 1111 1111"
	dir := workspace(t, fmt.Sprintf(`servers:
  fx:
    command: %s
    trust: true
virtual_servers:
  - name: echoes
    tools: ["fx/echo"]
pipeline:
  pii:
    rules:
      - {kinds: [card], on: [arguments], action: refuse}
      - {kinds: [email], on: [result], action: mask}
`, testservers.Fixture(t)))
	check := func(t *testing.T, cs *mcp.ClientSession, name string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"message": email}})
		if err != nil || res.IsError || testservers.ResultText(res) != "Echo: [email]" {
			t.Errorf("masked: %v %+v", err, res)
		}
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"message": card}})
		if err != nil || !res.IsError || res.Meta["toolmux/error_kind"] != "policy_violation" {
			t.Fatalf("refused: %v %+v", err, res)
		}
		if text := testservers.ResultText(res); !strings.Contains(text, "a payment card number at /message") || strings.Contains(text, card) {
			t.Errorf("refusal: %q", text)
		}
	}
	addr := serveGateway(t, dir)
	for _, route := range []struct{ path, tool string }{
		{"/mcp", "fx__echo"}, {"/servers/fx/mcp", "echo"}, {"/virtual/echoes/mcp", "fx__echo"},
	} {
		for _, era := range []string{legacyProtocol, "2026-07-28"} {
			t.Run(route.path+" "+era, func(t *testing.T) {
				check(t, dialEra(t, "http://"+addr+route.path, era).cs, route.tool)
			})
		}
	}
	for _, era := range []string{legacyProtocol, "2026-07-28"} {
		t.Run("stdio "+era, func(t *testing.T) {
			cmd, stderr := stdioServe(t, dir)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ec := connectEra(t, ctx, "stdio-"+era, era, &mcp.CommandTransport{Command: cmd})
			check(t, ec.cs, "fx__echo")
			if t.Failed() {
				t.Log(stderr.String())
			}
		})
	}
}
