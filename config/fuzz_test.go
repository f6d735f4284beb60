package config_test

import (
	"errors"
	"path"
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
			default:
				t.Fatalf("server %q: transport %q", s.Name, s.Transport)
			}
			for _, p := range append(s.Allow, s.Deny...) {
				if _, err := path.Match(p, ""); err != nil {
					t.Fatalf("server %q: invalid pattern %q accepted", s.Name, p)
				}
			}
		}
		if cfg.Timeout <= 0 || cfg.ConnectTimeout <= 0 || cfg.Retry.MaxAttempts < 1 || cfg.CircuitBreaker.Failures < 1 {
			t.Fatalf("non-positive policy %+v", cfg)
		}
	})
}
