package config_test

import (
	"errors"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
)

// FuzzParse feeds arbitrary bytes through both parsers: a config file is
// untrusted input, so Parse must never panic, must return either a config
// or an error, and every error must be a located *config.Error.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		fullExample,
		"",
		"servers:\n  a: &a {command: x, env: {A: \"${X:-y}\"}}\n  b:\n    <<: *a\n    args: [\"$$\", 1, true]\n",
		"servers:\n  a: &a\n    <<: *a\n",
		"allow: [\"a/[b\"]\nretry: {max_attempts: 0x10, tools: [\"*/x\"]}\nservers: {s: {url: \"http://h/sse\", tool_timeouts: {t: 1m}}}\n",
		`{"mcpServers": {"a": {"command": "x", "timeout": 30000, "includeTools": ["a*"], "trust": true}}, "theme": 1}`,
		`{"mcpServers": {"a": {"httpUrl": "http://h/\u00e9\/", "headers": {"k": "v"}}}} // c`,
		"{\n\t\"mcpServers\": {\"a\": {\"url\": \"x\", \"type\": \"sse\",}}\n}",
		"a: b: c\n",
		"timeout: 1m\n---\ntimeout: 2m\n",
		"- [a, {b: *c}]\n",
		"servers:\n  \"\": {command: \"${\"}\n",
		pipelineExample,
		"pipeline:\n  order: [dedupe, dedupe, fallbacks]\n  validate: {max_argument_bytes: 512KiB}\n  rollback: {rules: [{prefix: x, kinds: [timout]}, {}]}\n",
		"pipeline:\n  fallbacks: [{tools: [\"a/[\"], on: [], target: \"x/*\", arguments: {u: ${X}}}]\n  redact: {patterns: [\"a*\", \"(\"]}\n",
		`{"mcpServers": {"a": {"command": "a"}}, "pipeline": {"truncate": {"tools": {"*": 5}, "low_context": {"enabled": true}}, "dedupe": {"keys": []}}}`,
		"servers:\n  d: {discover: [./t.sh, d], call: [\"${X:-./t.sh}\"], transport: command, env: {A: b}, cwd: x}\n  e: {call: [c], url: \"http://h\"}\n",
		`{"toolDiscoveryCommand": "t list", "toolCallCommand": "t call", "mcpServers": {"discovered": {"command": "x"}}}`,
		"tool_search: {enabled: true, above: 3, pinned: [\"a/*\"], limit: 9}\nvirtual_servers:\n  - {name: v, tools: [\"a/*\", \"b/[\"], rename: {a/x: y, a/z: y, \"a/*\": w}, descriptions: {q: r}, tool_search: {}}\n  - {name: v}\n  - null\n",
		"builtin:\n  max_read_bytes: 1MiB\n  shell: {timeout: 2h, max_timeout: 1h, max_output_bytes: 0x10}\n  memory_dir: ~/m\n  web: {timeout: 1s, deny_private: true, search: {provider: searxng, url: \"http://s\", key: \"${K:-}\"}}\n",
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	env := envOf(testEnv)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		name := "fuzz.yaml"
		if asJSON {
			name = "fuzz.json"
		}
		cfg, err := config.ParseWith(name, data, config.Options{LookupEnv: env, Dir: "/cfg"})
		if err != nil {
			if cfg != nil {
				t.Fatalf("config along with error %v", err)
			}
			var first *config.Error
			if !errors.As(err, &first) {
				t.Fatalf("errors.As found no *config.Error in %v (%T)", err, err)
			}
			var list []error
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				list = j.Unwrap()
			} else {
				list = []error{err}
			}
			for _, e := range list {
				var ce *config.Error
				if !errors.As(e, &ce) {
					t.Fatalf("error %v (%T) is not a *config.Error", e, e)
				}
				if ce.File != name || ce.Line < 0 || ce.Column < 0 || ce.Msg == "" {
					t.Fatalf("badly located error %+v", ce)
				}
			}
			return
		}
		if cfg == nil {
			t.Fatal("neither config nor error")
		}
		seen := map[string]bool{}
		for _, s := range cfg.Servers {
			if s.Name == "" || strings.Contains(s.Name, "/") || seen[s.Name] {
				t.Fatalf("bad or duplicate server name %q", s.Name)
			}
			seen[s.Name] = true
			switch s.Transport {
			case config.Stdio:
				if s.Command == "" && !s.Disabled {
					t.Fatalf("stdio server %q without command", s.Name)
				}
			case config.SSE, config.HTTP:
				if s.URL == "" && !s.Disabled {
					t.Fatalf("%s server %q without url", s.Transport, s.Name)
				}
			case config.Command:
				if (len(s.Discover) == 0 || len(s.Call) == 0 || s.Discover[0] == "" || s.Call[0] == "") && !s.Disabled {
					t.Fatalf("command server %q without commands: %q %q", s.Name, s.Discover, s.Call)
				}
				if s.Command != "" || s.URL != "" {
					t.Fatalf("command server %q of two kinds", s.Name)
				}
			default:
				t.Fatalf("server %q: transport %q", s.Name, s.Transport)
			}
			for _, p := range append(s.Allow, s.Deny...) {
				if _, err := path.Match(p, ""); err != nil {
					t.Fatalf("server %q: invalid pattern %q accepted", s.Name, p)
				}
			}
		}
		if s := cfg.Builtin.Web.Search; s.Provider != "" && s.Provider != config.Serper && s.Provider != config.SearXNG ||
			s.Provider == config.SearXNG && s.URL == "" || s.Provider == "" && (s.URL != "" || s.Key != "") {
			t.Fatalf("search backend %+v", s)
		}
		if b := cfg.Builtin; b.MaxReadBytes < 0 || b.MaxWriteBytes < 0 || b.Web.MaxBytes < 0 || b.Shell.MaxOutputBytes < 0 ||
			b.Shell.Timeout < 0 || b.Shell.MaxTimeout < 0 || b.Shell.InactivityTimeout < 0 || b.Web.Timeout < 0 {
			t.Fatalf("negative builtin setting %+v", b)
		}
		if cfg.Timeout <= 0 || cfg.ConnectTimeout <= 0 || cfg.Retry.MaxAttempts < 1 || cfg.CircuitBreaker.Failures < 1 {
			t.Fatalf("non-positive policy %+v", cfg)
		}
		if msg := pipelineInvariant(cfg.Pipeline); msg != "" {
			t.Fatalf("pipeline: %s: %#v", msg, cfg.Pipeline)
		}
	})
}

// pipelineInvariant returns what is wrong with a pipeline the parser
// accepted, "" if nothing: everything it promises to have checked.
func pipelineInvariant(pl config.Pipeline) string {
	validPattern := func(p string) bool {
		if p == "" {
			return false
		}
		for _, part := range strings.SplitN(p, "/", 2) {
			if _, err := path.Match(part, ""); err != nil || part == "" {
				return false
			}
		}
		return true
	}
	validRegexp := func(s string) bool { _, err := regexp.Compile(s); return s != "" && err == nil }
	var patterns, kinds []string
	for i, m := range pl.Order {
		if !slices.Contains(config.DefaultPipelineOrder, m) || slices.Index(pl.Order, m) != i {
			return "order " + m
		}
	}
	for _, a := range pl.Repair.Aliases {
		patterns = append(patterns, a.Tools)
	}
	if b := pl.Validate.MaxArgumentBytes; b < 0 || b > 1<<30 {
		return "max_argument_bytes"
	}
	if !slices.Contains([]string{"", "allow", "deny"}, pl.URLPolicy.Default) {
		return "url_policy.default"
	}
	for _, r := range pl.URLPolicy.Rules {
		if r.Action != "allow" && r.Action != "deny" {
			return "url rule action"
		}
		if _, err := path.Match(r.Host, ""); err != nil || r.Host != strings.ToLower(r.Host) {
			return "url rule host"
		}
		patterns = append(patterns, r.Tools...)
	}
	policies := []string{"", "allow", "warn", "reject"}
	if !slices.Contains(policies, pl.Dedupe.Policy) {
		return "dedupe policy"
	}
	for _, d := range pl.Dedupe.Tools {
		if !slices.Contains(policies, d.Policy) {
			return "dedupe tool policy"
		}
		patterns = append(patterns, d.Tools)
	}
	for _, f := range pl.Fallbacks {
		srv, tl, ok := strings.Cut(f.Target, "/")
		if len(f.Tools) == 0 || len(f.On) == 0 || !ok || srv == "" || tl == "" || strings.ContainsAny(f.Target, "*?[\\") || strings.Contains(tl, "/") {
			return "fallback"
		}
		patterns = append(patterns, f.Tools...)
		kinds = append(kinds, f.On...)
	}
	for _, l := range append(slices.Clone(pl.Truncate.Tools), pl.Truncate.LowContext.Tools...) {
		if l.MaxChars < 1 {
			return "truncate limit"
		}
		patterns = append(patterns, l.Tools)
	}
	if pl.Truncate.MaxChars < 0 || pl.Truncate.LowContext.MaxChars < 0 {
		return "max_chars"
	}
	for _, r := range pl.Rollback.Rules {
		n := 0
		for _, set := range []bool{r.Prefix != "", r.IsError, r.JSONEmpty != "", len(r.Kinds) > 0} {
			if set {
				n++
			}
		}
		if n != 1 {
			return "rollback rule conditions"
		}
		patterns = append(patterns, r.Tools...)
		kinds = append(kinds, r.Kinds...)
	}
	for _, tt := range pl.Instructions.Tools {
		if tt.Text == "" {
			return "instruction text"
		}
		patterns = append(patterns, tt.Tools)
	}
	for _, r := range pl.Instructions.Rules {
		if r.Text == "" || r.Match == "" && len(r.Kinds) == 0 || r.Match != "" && !validRegexp(r.Match) {
			return "instruction rule"
		}
		patterns = append(patterns, r.Tools...)
		kinds = append(kinds, r.Kinds...)
	}
	for _, p := range pl.Redact.Patterns {
		if !validRegexp(p) || regexp.MustCompile(p).MatchString("") {
			return "redact pattern " + p
		}
	}
	for _, p := range patterns {
		if !validPattern(p) {
			return "pattern " + p
		}
	}
	for _, k := range kinds {
		if strings.Trim(k, "abcdefghijklmnopqrstuvwxyz_") != "" || k == "" {
			return "kind " + k
		}
	}
	return ""
}
