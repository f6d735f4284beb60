package main_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
