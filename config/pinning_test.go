package config_test

import (
	"maps"
	"testing"

	"github.com/toolmux/toolmux/config"
)

func TestPinningSection(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    config.Pinning
	}{
		{"workspace: .\n", config.Pinning{}},
		{"pinning: {policy: warn}\n", config.Pinning{Policy: "warn"}},
		{"servers: {a: {command: x}, b: {command: y}}\npinning:\n  policy: ask\n  servers: {a: off, b: hold}\n",
			config.Pinning{Policy: "ask", Servers: map[string]string{"a": "off", "b": "hold"}}},
	} {
		cfg, err := config.ParseWith("toolmux.yaml", []byte(tc.content), config.Options{Dir: "/work"})
		if err != nil {
			t.Fatalf("%q: %v", tc.content, err)
		}
		if cfg.Pinning.Policy != tc.want.Policy || !maps.Equal(cfg.Pinning.Servers, tc.want.Servers) {
			t.Errorf("%q: got %+v, want %+v", tc.content, cfg.Pinning, tc.want)
		}
	}
}

func TestPinningErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `servers:
  github: {command: x}
pinning:
  polcy: hold
  servers:
    githb: warn
    github: block
`, []wantErr{
		{4, 3, "pinning.polcy", "unknown key (expected one of: policy, servers); did you mean policy?"},
		{6, 5, "pinning.servers.githb", `no server named "githb" is configured; did you mean github?`},
		{7, 13, "pinning.servers.github", `unknown policy "block" (expected hold, ask, warn or off)`},
	})
}
