package cmdsource_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/cmdsource"
	"github.com/toolmux/toolmux/tool"
)

func names(ts []tool.Tool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDiscoverShapes(t *testing.T) {
	cases := []struct {
		name, out string
		want      []string
	}{
		{"plain array", `[
			{"name": "greet", "description": "Says hello.", "parameters": {"type": "object", "properties": {"who": {"type": "string"}}}},
			{"name": "uptime"}
		]`, []string{"greet", "uptime"}},
		{"camelCase group", `[{"functionDeclarations": [{"name": "a"}, {"name": "b"}]}]`, []string{"a", "b"}},
		{"snake_case group", `[{"function_declarations": [{"name": "a"}, {"name": "b"}]}]`, []string{"a", "b"}},
		{"mixed", `[
			{"name": "first"},
			{"functionDeclarations": [{"name": "second"}]},
			{"function_declarations": [{"name": "third"}, {"name": "fourth"}]},
			{"name": "fifth"},
			{"functionDeclarations": null}
		]`, []string{"first", "second", "third", "fourth", "fifth"}},
		{"top-level camelCase group", `{"functionDeclarations": [{"name": "a"}]}`, []string{"a"}},
		{"top-level snake_case group", ` {"function_declarations": [{"name": "a"}, {"name": "b"}]}` + "\n", []string{"a", "b"}},
		{"both spellings in one group", `{"functionDeclarations": [{"name": "a"}], "function_declarations": [{"name": "b"}]}`, []string{"a", "b"}},
		{"empty", `[]`, []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSource(t, cmdsource.Config{Discover: printing(t, c.out)})
			tools, err := s.Tools(testContext(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := names(tools); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("names = %v, want %v", got, c.want)
			}
			for _, tl := range tools {
				if tl.Server != "discovered" || tl.Exposed != "discovered__"+tl.Name {
					t.Errorf("tool %+v: wrong server or exposed name", tl)
				}
				if tl.InputSchema["type"] != "object" {
					t.Errorf("tool %s: schema %v is not an object schema", tl.Name, tl.InputSchema)
				}
			}
		})
	}
}

func TestDiscoverDefaultsAndDescription(t *testing.T) {
	s := newSource(t, cmdsource.Config{Discover: printing(t,
		`[{"name": "greet", "description": "Says hello.", "parameters": {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]}}, {"name": "bare"}]`)})
	tools, err := s.Tools(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if tools[0].Description != "Says hello." {
		t.Errorf("description = %q", tools[0].Description)
	}
	want := decode(t, `{"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]}`)
	if !reflect.DeepEqual(tools[0].InputSchema, want) {
		t.Errorf("schema = %v, want %v", tools[0].InputSchema, want)
	}
	if want := decode(t, `{"type": "object", "properties": {}}`); !reflect.DeepEqual(tools[1].InputSchema, want) {
		t.Errorf("schema of a declaration without parameters = %v, want %v", tools[1].InputSchema, want)
	}
}

func TestDiscoverNormalisesOpenAPITypes(t *testing.T) {
	s := newSource(t, cmdsource.Config{Discover: printing(t, `[{"name": "search", "parameters": {
		"type": "OBJECT",
		"properties": {
			"query": {"type": "STRING", "description": "what to look for"},
			"limit": {"type": "INTEGER", "nullable": true},
			"score": {"type": "Number"},
			"exact": {"type": "BOOLEAN", "nullable": false},
			"tags": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["A", "B"]}},
			"filter": {"type": "OBJECT", "properties": {"field": {"type": "STRING"}}, "propertyOrdering": ["field"]},
			"either": {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]},
			"anything": {"type": "TYPE_UNSPECIFIED"}
		},
		"required": ["query"]
	}}]`)})
	tools, err := s.Tools(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	want := decode(t, `{
		"type": "object",
		"properties": {
			"query": {"type": "string", "description": "what to look for"},
			"limit": {"type": ["integer", "null"]},
			"score": {"type": "number"},
			"exact": {"type": "boolean"},
			"tags": {"type": "array", "items": {"type": "string", "enum": ["A", "B"]}},
			"filter": {"type": "object", "properties": {"field": {"type": "string"}}, "propertyOrdering": ["field"]},
			"either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
			"anything": {}
		},
		"required": ["query"]
	}`)
	if got := tools[0].InputSchema; !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		t.Errorf("schema:\n%s", g)
	}
}

func TestDiscoverKeepsParametersJSONSchemaAsIs(t *testing.T) {
	schema := `{"type": "object", "properties": {"mode": {"type": "string", "enum": ["STRING", "OBJECT"], "x-kind": {"type": "STRING"}}}, "additionalProperties": false, "$schema": "https://json-schema.org/draft/2020-12/schema"}`
	s := newSource(t, cmdsource.Config{Discover: printing(t,
		`[{"name": "pick", "parametersJsonSchema": `+schema+`, "parameters": {"type": "OBJECT", "properties": {"ignored": {"type": "STRING"}}}}]`)})
	tools, err := s.Tools(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tools[0].InputSchema, decode(t, schema); !reflect.DeepEqual(got, want) {
		t.Errorf("schema = %v, want %v (parametersJsonSchema wins, unchanged)", got, want)
	}
}

func TestDiscoverRejectsInvalidDeclarations(t *testing.T) {
	cases := []struct {
		name, out string
		want      []string
	}{
		{"missing name", `[{"name": "ok"}, {"description": "no name here"}]`, []string{`[1]: no "name"`}},
		{"missing name in group", `[{"functionDeclarations": [{"name": "ok"}, {"parameters": {}}]}]`, []string{`[0].functionDeclarations[1]: no "name"`}},
		{"name not a string", `[{"name": 42}]`, []string{`[0]: "name" is a number, want a string`}},
		{"empty name", `{"function_declarations": [{"name": "  "}]}`, []string{`function_declarations[0]: the name is empty`}},
		{"several problems", `[{"name": "a", "description": 3}, "x", {"name": "b", "parameters": "string"}, {"name": "c", "parametersJsonSchema": {"type": "string"}}]`,
			[]string{`[0] (a): "description" is a number`, `[1]: want a declaration or group object, got a string`, `[2] (b): "parameters" is a string`, `[3] (c): "parametersJsonSchema" must describe an object`}},
		{"group and name", `[{"name": "x", "functionDeclarations": []}]`, []string{`[0]: has both "name" and a list`}},
		{"group not a list", `[{"functionDeclarations": {"name": "x"}}]`, []string{`[0].functionDeclarations: want an array of declarations, got an object`}},
		{"single declaration at the top", `{"name": "x"}`, []string{`must be inside an array`}},
		{"scalar at the top", `"tools"`, []string{`want an array of function declarations, got a string`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSource(t, cmdsource.Config{Discover: printing(t, c.out)})
			_, err := s.Tools(testContext(t))
			var de *cmdsource.DeclarationError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *DeclarationError", err)
			}
			if tool.KindOf(err) != tool.KindServerUnavailable {
				t.Errorf("kind = %s", tool.KindOf(err))
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !strings.Contains(tool.AsError(err).Message, "discovery command `cat ") {
				t.Errorf("message does not name the command: %q", tool.AsError(err).Message)
			}
		})
	}
}

func TestDiscoverDuplicatesKeepTheFirst(t *testing.T) {
	var logs logBuffer
	s := newSource(t, cmdsource.Config{Logger: logs.logger(), Discover: printing(t, `[
		{"name": "dup", "description": "first"},
		{"functionDeclarations": [{"name": "other"}, {"name": "dup", "description": "second"}]}
	]`)})
	tools, err := s.Tools(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(tools); !reflect.DeepEqual(got, []string{"dup", "other"}) || tools[0].Description != "first" {
		t.Fatalf("tools = %+v", tools)
	}
	if l := logs.String(); !strings.Contains(l, `[1].functionDeclarations[1]: the name \"dup\" was already declared at [0]`) {
		t.Errorf("log does not report the duplicate: %s", l)
	}
}

func TestDiscoverFailuresQuoteTheOutput(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		timeout time.Duration
		limit   int
		message string   // in the message
		detail  []string // in the detail
	}{
		{name: "invalid JSON", body: `echo "here are my tools:"; echo "[{\"name\": \"x\"}]"; echo "warning: deprecated" >&2`,
			message: "printed unusable output: not JSON", detail: []string{"stdout:\nhere are my tools:\n[{\"name\": \"x\"}]", "stderr:\nwarning: deprecated"}},
		{name: "non-zero exit", body: `echo '[]'; echo "cannot reach the registry" >&2; exit 3`,
			message: "exited with status 3", detail: []string{"stdout:\n[]", "stderr:\ncannot reach the registry"}},
		{name: "signal", body: `echo "dying" >&2; kill -9 $$`,
			message: "was killed by SIGKILL", detail: []string{"stdout: (empty)", "stderr:\ndying"}},
		{name: "hang", body: `echo "[" ; echo "thinking..." >&2; sleep 300`, timeout: 300 * time.Millisecond,
			message: "did not finish within 300ms and was killed", detail: []string{"stdout:\n[", "stderr:\nthinking..."}},
		{name: "nothing", body: `true`, message: "printed unusable output: nothing", detail: []string{"stdout: (empty)"}},
		{name: "too much", body: `echo '[{"name": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}]'`, limit: 16,
			message: "printed 63 bytes, more than the limit of 16", detail: []string{"stdout (63 bytes, shown in part):\n[{\"name\": \"aaaaa\n[…]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			argv := []string{script(t, "discover.sh", c.body)}
			s := newSource(t, cmdsource.Config{Discover: argv, DiscoverTimeout: c.timeout, MaxOutput: c.limit})
			start := time.Now()
			_, err := s.Tools(testContext(t))
			if time.Since(start) > 10*time.Second {
				t.Errorf("discovery took %s", time.Since(start))
			}
			te := tool.AsError(err)
			if te == nil || te.Kind != tool.KindServerUnavailable {
				t.Fatalf("error = %v", err)
			}
			if !strings.Contains(te.Message, "discovery command `"+argv[0]+"` "+c.message) {
				t.Errorf("message %q does not contain %q", te.Message, c.message)
			}
			for _, d := range c.detail {
				if !strings.Contains(te.Detail, d) {
					t.Errorf("detail %q does not contain %q", te.Detail, d)
				}
			}
			var ce *cmdsource.CommandError
			if !errors.As(err, &ce) || !reflect.DeepEqual(ce.Argv, argv) {
				t.Errorf("no *CommandError for %v in %v", argv, err)
			}
			h := s.Health()
			if h.State != tool.StateFailed || h.Error != te.Message || h.Detail != te.Detail || h.Transport != "command" {
				t.Errorf("health = %+v", h)
			}
		})
	}
}

func TestDiscoverTimeoutKillsTheGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	body := `sleep 300 & echo $! > "$PIDFILE"; wait`
	s := newSource(t, cmdsource.Config{Discover: []string{script(t, "discover.sh", body)},
		Env: []string{"PIDFILE=" + pidFile}, DiscoverTimeout: time.Second})
	_, err := s.Tools(testContext(t))
	if err == nil || !strings.Contains(err.Error(), "did not finish within 1s") {
		t.Fatalf("error = %v", err)
	}
	assertGone(t, waitPID(t, pidFile))
}

func TestHealthFollowsDiscovery(t *testing.T) {
	dir := t.TempDir()
	flag := filepath.Join(dir, "broken")
	body := `if [ -e "$FLAG" ]; then echo "registry down" >&2; exit 1; fi; echo '[{"name": "a"}, {"name": "b"}]'`
	s := newSource(t, cmdsource.Config{Discover: []string{script(t, "discover.sh", body)}, Env: []string{"FLAG=" + flag}})
	if h := s.Health(); h.State != tool.StateConnecting || h.Name != "discovered" {
		t.Errorf("health before discovery = %+v", h)
	}
	ctx := testContext(t)
	if _, err := s.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if h := s.Health(); h.State != tool.StateReady || h.Tools != 2 || h.Error != "" {
		t.Errorf("health after discovery = %+v", h)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Tools(ctx); err == nil {
		t.Fatal("discovery succeeded with the flag set")
	}
	h := s.Health()
	if h.State != tool.StateDegraded || h.Tools != 2 || !strings.Contains(h.Error, "exited with status 1") || !strings.Contains(h.Detail, "registry down") || h.ErrorAt.IsZero() {
		t.Errorf("health after a failed rediscovery = %+v", h)
	}
	os.Remove(flag)
	if _, err := s.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if h := s.Health(); h.State != tool.StateReady || h.Error != "" {
		t.Errorf("health after recovery = %+v", h)
	}
}

func TestNewValidatesTheConfiguration(t *testing.T) {
	ok := []string{"true"}
	cases := []struct {
		name string
		cfg  cmdsource.Config
		want string
	}{
		{"no name", cmdsource.Config{Discover: ok, Call: ok}, "needs a name"},
		{"no discovery command", cmdsource.Config{Name: "d", Call: ok}, `server "d": discovery command: no command given`},
		{"no call command", cmdsource.Config{Name: "d", Discover: ok}, `server "d": call command: no command given`},
		{"empty program", cmdsource.Config{Name: "d", Discover: []string{""}, Call: ok}, "the program (first element) is empty"},
		{"NUL in an argument", cmdsource.Config{Name: "d", Discover: ok, Call: []string{"x", "a\x00b"}}, "argument 1 contains a NUL byte"},
		{"bad env", cmdsource.Config{Name: "d", Discover: ok, Call: ok, Env: []string{"A=1", "B"}}, `environment entry 1 ("B") is not KEY=VALUE`},
		{"env without a name", cmdsource.Config{Name: "d", Discover: ok, Call: ok, Env: []string{"=1"}}, "has an empty name"},
		{"negative timeout", cmdsource.Config{Name: "d", Discover: ok, Call: ok, CallTimeout: -time.Second}, "the call timeout is negative"},
		{"negative limit", cmdsource.Config{Name: "d", Discover: ok, Call: ok, MaxOutput: -1}, "the output limit is negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := cmdsource.New(c.cfg)
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}
}
