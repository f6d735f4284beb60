package config_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
)

func TestBuiltinSection(t *testing.T) {
	cfg, dir := mustLoad(t, "toolmux.yaml", `
builtin:
  enabled: true
  max_read_bytes: 20971520
  max_write_bytes: 5MiB
  shell:
    timeout: 10m
    max_timeout: 1h
    inactivity_timeout: 5m
    max_output_bytes: 1048576
  memory_dir: state/memory
  web:
    timeout: 45s
    max_bytes: 2MiB
    deny_private: true
    search:
      provider: serper
      key: ${EVERYTHING_KEY}
`)
	want := config.Builtin{
		Enabled:       true,
		MaxReadBytes:  20 << 20,
		MaxWriteBytes: 5 << 20,
		Shell: config.BuiltinShell{
			Timeout:           10 * time.Minute,
			MaxTimeout:        time.Hour,
			InactivityTimeout: 5 * time.Minute,
			MaxOutputBytes:    1 << 20,
		},
		MemoryDir: filepath.Join(dir, "state/memory"),
		Web: config.BuiltinWeb{
			Timeout:     45 * time.Second,
			MaxBytes:    2 << 20,
			DenyPrivate: true,
			Search:      config.BuiltinSearch{Provider: config.Serper, Key: "secret"},
		},
	}
	if cfg.Builtin != want {
		t.Errorf("builtin:\n got %+v\nwant %+v", cfg.Builtin, want)
	}
}

func TestBuiltinValues(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          config.Builtin
	}{
		{
			// Keys left out, or null, keep the zero values that mean "the
			// package's default".
			name:    "empty",
			content: "builtin:\n  shell:\n  web:\n    search:\n",
			want:    config.Builtin{Enabled: true},
		},
		{
			name:    "disabled with settings",
			content: "builtin: {enabled: false, max_read_bytes: 1}\n",
			want:    config.Builtin{MaxReadBytes: 1},
		},
		{
			name:    "memory_dir with ~",
			content: "builtin: {memory_dir: ~/facts}\n",
			want:    config.Builtin{Enabled: true, MemoryDir: "/home/u/facts"},
		},
		{
			name:    "memory_dir empty keeps the default",
			content: "builtin: {memory_dir: \"${EMPTY}\"}\n",
			want:    config.Builtin{Enabled: true},
		},
		{
			name:    "searxng with url and no key",
			content: "builtin:\n  web:\n    search: {provider: searxng, url: \"http://localhost:8888/\"}\n",
			want:    config.Builtin{Enabled: true, Web: config.BuiltinWeb{Search: config.BuiltinSearch{Provider: config.SearXNG, URL: "http://localhost:8888/"}}},
		},
		{
			name:    "serper with its own url",
			content: "builtin:\n  web:\n    search: {provider: serper, url: \"https://google.serper.dev\", key: \"${REMOTE_TOKEN}\"}\n",
			want:    config.Builtin{Enabled: true, Web: config.BuiltinWeb{Search: config.BuiltinSearch{Provider: config.Serper, URL: "https://google.serper.dev", Key: "tok"}}},
		},
		{
			name:    "provider from a variable",
			content: "builtin:\n  web:\n    search: {provider: \"${PROVIDER:-searxng}\", url: \"http://s\"}\n",
			want:    config.Builtin{Enabled: true, Web: config.BuiltinWeb{Search: config.BuiltinSearch{Provider: config.SearXNG, URL: "http://s"}}},
		},
		{
			name:    "timeout equal to max_timeout",
			content: "builtin: {shell: {timeout: 2h, max_timeout: 2h}}\n",
			want:    config.Builtin{Enabled: true, Shell: config.BuiltinShell{Timeout: 2 * time.Hour, MaxTimeout: 2 * time.Hour}},
		},
		{
			name:    "sizes at the bounds",
			content: "builtin: {max_read_bytes: 1GiB, max_write_bytes: 1, shell: {max_output_bytes: 64KiB}, web: {max_bytes: 1073741824}}\n",
			want: config.Builtin{Enabled: true, MaxReadBytes: 1 << 30, MaxWriteBytes: 1,
				Shell: config.BuiltinShell{MaxOutputBytes: 64 << 10}, Web: config.BuiltinWeb{MaxBytes: 1 << 30}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := mustLoad(t, "toolmux.yaml", tc.content)
			if cfg.Builtin != tc.want {
				t.Errorf("builtin:\n got %+v\nwant %+v", cfg.Builtin, tc.want)
			}
		})
	}
}

func TestBuiltinErrors(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []wantErr
	}{
		{
			name: "unknown keys",
			content: `builtin:
  max_read: 1
  shell: {timeuot: 1m}
  web: {deny_privat: true, search: {providr: serper}}
`,
			want: []wantErr{
				{2, 3, "builtin.max_read", "unknown key (expected one of: enabled, max_read_bytes, max_write_bytes, shell, memory_dir, web)"},
				{3, 11, "builtin.shell.timeuot", "unknown key (expected one of: timeout, max_timeout, inactivity_timeout, max_output_bytes); did you mean timeout?"},
				{4, 9, "builtin.web.deny_privat", "unknown key (expected one of: timeout, max_bytes, deny_private, search); did you mean deny_private?"},
				{4, 28, "builtin.web.search", "needs provider (serper or searxng)"},
				{4, 37, "builtin.web.search.providr", "unknown key (expected one of: provider, url, key); did you mean provider?"},
			},
		},
		{
			name: "wrong types",
			content: `builtin:
  enabled: yes
  max_read_bytes: lots
  max_write_bytes: 1.5
  shell: 10m
  memory_dir: [a]
  web:
    timeout: 30
    max_bytes: -1
    deny_private: "false"
    search: serper
`,
			want: []wantErr{
				{2, 12, "builtin.enabled", `expected true or false, got "yes"`},
				{3, 19, "builtin.max_read_bytes", `"lots" is not a size (expected a size in bytes such as 1048576 or "1MiB"`},
				{4, 20, "builtin.max_write_bytes", `expected a size in bytes such as 1048576 or "1MiB", got 1.5`},
				{5, 10, "builtin.shell", `expected a mapping, got "10m"`},
				{6, 15, "builtin.memory_dir", "expected a string, got a list"},
				{8, 14, "builtin.web.timeout", `"30" is not a duration (use a unit, e.g. "30s")`},
				{9, 16, "builtin.web.max_bytes", "must be between 1 byte and 1GiB, got -1"},
				{10, 19, "builtin.web.deny_private", `expected true or false, got "false"`},
				{11, 13, "builtin.web.search", `expected a mapping, got "serper"`},
			},
		},
		{
			name: "bad shell limits",
			content: `builtin:
  shell:
    timeout: 2h
    max_timeout: 1h
    inactivity_timeout: 0s
    max_output_bytes: 2GiB
`,
			want: []wantErr{
				{3, 5, "builtin.shell", "timeout (2h0m0s) is longer than max_timeout (1h0m0s)"},
				{5, 25, "builtin.shell.inactivity_timeout", `must be positive, got "0s"`},
				{6, 23, "builtin.shell.max_output_bytes", "must be between 1 byte and 1GiB, got 2GiB"},
			},
		},
		{
			name: "bad memory_dir",
			content: `builtin:
  memory_dir: ~other/facts
`,
			want: []wantErr{{2, 15, "builtin.memory_dir", `cannot expand "~other/facts": only ~ and ~/ are supported`}},
		},
		{
			name:    "unset variable in memory_dir",
			content: "builtin: {memory_dir: \"${FACTS}\"}\n",
			want:    []wantErr{{1, 23, "builtin.memory_dir", "environment variable FACTS is not set"}},
		},
		{
			name: "unknown provider",
			content: `builtin:
  web:
    search:
      provider: serpr
`,
			want: []wantErr{{4, 17, "builtin.web.search.provider", `unknown search provider "serpr" (expected serper or searxng); did you mean serper?`}},
		},
		{
			name:    "provider in the wrong case",
			content: "builtin: {web: {search: {provider: SearXNG, url: \"http://s\"}}}\n",
			want:    []wantErr{{1, 36, "builtin.web.search.provider", `unknown search provider "SearXNG" (expected serper or searxng); did you mean searxng?`}},
		},
		{
			name: "searxng without url",
			content: `builtin:
  web:
    search:
      provider: searxng
      key: k
`,
			want: []wantErr{{4, 7, "builtin.web.search.provider", "searxng needs url, the address of the instance (there is no public default)"}},
		},
		{
			name:    "searxng with an empty url",
			content: "builtin: {web: {search: {provider: searxng, url: \"${EMPTY}\"}}}\n",
			want:    []wantErr{{1, 50, "builtin.web.search.url", "must not be empty: searxng needs the address of the instance"}},
		},
		{
			name: "bad urls",
			content: `builtin:
  web:
    search: {provider: serper, url: "ftp://h/"}
`,
			want: []wantErr{{3, 37, "builtin.web.search.url", `"ftp://h/" is not an http:// or https:// URL`}},
		},
		{
			name:    "url without host",
			content: "builtin: {web: {search: {provider: searxng, url: \"http:///search\"}}}\n",
			want:    []wantErr{{1, 50, "builtin.web.search.url", `"http:///search" has no host`}},
		},
		{
			name:    "unset key variable",
			content: "builtin: {web: {search: {provider: serper, key: \"${SEARCH_KEY}\"}}}\n",
			want:    []wantErr{{1, 49, "builtin.web.search.key", "environment variable SEARCH_KEY is not set (use ${SEARCH_KEY:-default} to give a default)"}},
		},
		{
			name:    "empty search mapping",
			content: "builtin:\n  web:\n    search: {}\n",
			want:    []wantErr{{3, 5, "builtin.web.search", "needs provider (serper or searxng)"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, "toolmux.yaml", tc.content, tc.want)
		})
	}
}
