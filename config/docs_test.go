package config_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
)

// Every configuration example in the README and docs/ must parse.
func TestDocumentedExamplesParse(t *testing.T) {
	block := regexp.MustCompile("(?s)```(yaml|json)\n(.*?)```")
	env := func(k string) (string, bool) {
		switch k {
		case "HOME":
			return "/home/user", true
		case "ACME_GUARD_TOKEN": // docs/hooks.md's guardrail
			return "token", true
		}
		return "", false
	}
	for _, doc := range []string{"../README.md", "../docs/config.md", "../docs/pipeline.md", "../docs/policy.md", "../docs/agent.md", "../docs/gateway.md", "../docs/operations.md", "../docs/identity.md", "../docs/vault.md", "../docs/hooks.md", "../docs/openapi.md"} {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range block.FindAllStringSubmatch(string(data), -1) {
			lang, text := m[1], m[2]
			if lang == "json" && !strings.Contains(text, "mcpServers") {
				continue // a call record, not a configuration
			}
			n++
			name := filepath.Base(doc) + "." + lang
			if _, err := config.ParseWith(name, []byte(text), config.Options{LookupEnv: env, Dir: t.TempDir()}); err != nil {
				t.Errorf("%s: example %d does not parse:\n%s\n%v", doc, n, text, err)
			}
		}
		if n == 0 {
			t.Errorf("%s: no configuration examples found", doc)
		}
	}
}
