package vault_test

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/vaulttest"
)

// A key is read in any base64 of 32 bytes; its id depends on the key
// alone; anything else is refused without being quoted.
func TestParseKey(t *testing.T) {
	raw := make([]byte, vault.KeySize)
	for i := range raw {
		raw[i] = byte(i * 7)
	}
	var ids []string
	for _, text := range []string{
		base64.StdEncoding.EncodeToString(raw), base64.RawStdEncoding.EncodeToString(raw),
		base64.URLEncoding.EncodeToString(raw), base64.RawURLEncoding.EncodeToString(raw),
		"  " + base64.StdEncoding.EncodeToString(raw) + "\n",
	} {
		k, err := vault.ParseKey(text)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if !vault.LooksLikeKey(text) {
			t.Errorf("%q does not look like a key", text)
		}
		ids = append(ids, k.ID())
	}
	if ids = slices.Compact(ids); len(ids) != 1 || len(ids[0]) != 16 {
		t.Fatalf("ids: %q", ids)
	}
	if k, _ := vault.NewKey(raw); k.ID() != ids[0] || !strings.Contains(fmt.Sprint(k), ids[0]) {
		t.Fatalf("NewKey: %v", k)
	}
	other, _ := vault.ParseKey(vault.GenerateKey())
	if other.ID() == ids[0] {
		t.Fatal("two keys of one id")
	}
	short := base64.StdEncoding.EncodeToString(raw[:31])
	long := base64.StdEncoding.EncodeToString(append(raw, 0))
	for _, text := range []string{"", "not base64!", short, long, "TOOLMUX_VAULT_KEY"} {
		_, err := vault.ParseKey(text)
		vaulttest.Kind(t, fmt.Sprintf("%q", text), err, vault.KindKey)
		if text != "" && strings.Contains(err.Error(), text) {
			t.Errorf("the error quotes the text: %v", err)
		}
		if vault.LooksLikeKey(text) {
			t.Errorf("%q looks like a key", text)
		}
	}
	if _, err := vault.NewKey(raw[:16]); vault.KindOf(err) != vault.KindKey {
		t.Fatalf("a 16-byte key: %v", err)
	}
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Keys are read from files and variables; a file others may read, or
// missing, a variable not set, or not a key, are refused naming where
// (never what); no key configured is a locked vault.
func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	cur := filepath.Join(dir, "vault.key")
	curID, err := vault.WriteKeyFile(cur)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(cur); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file's mode: %v %v", fi, err)
	}
	if _, err := vault.WriteKeyFile(cur); vault.KindOf(err) != vault.KindKey || !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("a key file written over: %v", err)
	}
	oldText := vault.GenerateKey()
	oldKey, _ := vault.ParseKey(oldText)
	vars := map[string]string{"OLD": oldText, "BAD": "not-a-key", "EMPTY": ""}

	r, err := vault.Keys{Current: vault.KeySource{File: cur}, Previous: []vault.KeySource{{Env: "OLD"}, {File: cur}}}.Load(env(vars))
	if err != nil || r.Current() != curID || !slices.Equal(r.Previous(), []string{oldKey.ID()}) {
		t.Fatalf("file and previous variable: %v %v", r, err)
	}
	if r.CurrentKey().Source() != "key file "+cur || r.PreviousKeys()[0].Source() != "environment variable OLD" {
		t.Errorf("the keys' sources: %q %q", r.CurrentKey().Source(), r.PreviousKeys()[0].Source())
	}
	r, err = vault.Keys{Current: vault.KeySource{Env: "OLD"}}.Load(env(vars))
	if err != nil || r.Current() != oldKey.ID() || len(r.Previous()) != 0 {
		t.Fatalf("variable: %v %v", r, err)
	}
	for _, ks := range []vault.Keys{{}, {Current: vault.KeySource{Env: "UNSET", Optional: true}}, {Current: vault.KeySource{Env: "EMPTY", Optional: true}}} {
		if r, err := ks.Load(env(vars)); r != nil || err != nil {
			t.Fatalf("%+v: %v %v, want locked", ks, r, err)
		}
	}

	readable := filepath.Join(dir, "readable.key")
	if err := os.WriteFile(readable, []byte(oldText), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.key")
	if err := os.WriteFile(garbage, []byte("hunter2-not-a-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.key")
	if err := os.WriteFile(big, []byte(strings.Repeat("A", 5000)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		keys vault.Keys
		want string
	}{
		{vault.Keys{Current: vault.KeySource{File: readable}}, "chmod 600 " + readable},
		{vault.Keys{Current: vault.KeySource{File: filepath.Join(dir, "none.key")}}, "does not exist (toolmux vault keygen"},
		{vault.Keys{Current: vault.KeySource{File: garbage}}, "does not hold a vault key: want 32 bytes in base64"},
		{vault.Keys{Current: vault.KeySource{File: big}}, "too large"},
		{vault.Keys{Current: vault.KeySource{File: dir}}, "is not a regular file"},
		{vault.Keys{Current: vault.KeySource{Env: "UNSET"}}, "environment variable UNSET is not set"},
		{vault.Keys{Current: vault.KeySource{Env: "EMPTY"}}, "environment variable EMPTY is not set"},
		{vault.Keys{Current: vault.KeySource{Env: "BAD"}}, "environment variable BAD does not hold a vault key"},
		{vault.Keys{Current: vault.KeySource{File: cur, Env: "OLD"}}, "not both"},
		{vault.Keys{Current: vault.KeySource{File: cur}, Previous: []vault.KeySource{{Env: "UNSET"}}}, "UNSET is not set"},
		{vault.Keys{Current: vault.KeySource{File: cur}, Previous: []vault.KeySource{{File: readable}}}, "chmod 600"},
		{vault.Keys{Current: vault.KeySource{Env: "UNSET", Optional: true}, Previous: []vault.KeySource{{Env: "OLD"}}}, "previous keys are configured, but no current key"},
	} {
		r, err := c.keys.Load(env(vars))
		if r != nil || vault.KindOf(err) != vault.KindKey || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v %v, want %q", c.keys, r, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), oldText) || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "not-a-key")) {
			t.Errorf("the error holds what the key source holds: %v", err)
		}
	}
}

// The config adapter: the section's keys and bounds, and the default
// variable when the section names none.
func TestFromConfig(t *testing.T) {
	ks := vault.KeysFromConfig(config.Vault{KeyFile: "/k", PreviousKeyFiles: []string{"/o"}, PreviousKeyEnvs: []string{"OLD"}})
	if ks.Current != (vault.KeySource{File: "/k"}) || !slices.Equal(ks.Previous, []vault.KeySource{{File: "/o"}, {Env: "OLD"}}) {
		t.Errorf("files: %+v", ks)
	}
	if ks := vault.KeysFromConfig(config.Vault{KeyEnv: "K"}); ks.Current != (vault.KeySource{Env: "K"}) {
		t.Errorf("env: %+v", ks)
	}
	if ks := vault.KeysFromConfig(config.Vault{}); ks.Current != (vault.KeySource{Env: vault.DefaultKeyEnv, Optional: true}) {
		t.Errorf("none: %+v", ks)
	}
	// The whole vault: locked without a key, its key from the default
	// variable, a key file missing refused.
	s := newFileStore(t)
	if v, err := vault.FromConfig(config.Vault{MaxEntriesPerOwner: 3}, s, env(nil)); err != nil || !v.Locked() || v.Options().MaxEntriesPerOwner != 3 {
		t.Errorf("no key: %v %v", v, err)
	}
	key := vault.GenerateKey()
	k, _ := vault.ParseKey(key)
	if v, err := vault.FromConfig(config.Vault{}, s, env(map[string]string{vault.DefaultKeyEnv: key})); err != nil || v.Keyring().Current() != k.ID() {
		t.Errorf("the default variable: %v %v", v, err)
	}
	if _, err := vault.FromConfig(config.Vault{KeyFile: "/nonexistent/vault.key"}, s, env(nil)); vault.KindOf(err) != vault.KindKey {
		t.Errorf("a key file missing: %v", err)
	}
	o := vault.OptionsFromConfig(config.Vault{MaxValueBytes: 1000, MaxEntriesPerOwner: 7})
	if o != (vault.Options{MaxValueBytes: 1000, MaxEntriesPerOwner: 7}) {
		t.Errorf("options: %+v", o)
	}
	if v := vault.New(nil, nil, vault.OptionsFromConfig(config.Vault{})); v.Options() !=
		(vault.Options{MaxValueBytes: vault.DefaultMaxValueBytes, MaxEntriesPerOwner: vault.DefaultMaxEntriesPerOwner}) {
		t.Errorf("defaults: %+v", v.Options())
	}
}

// The names of the entries toolmux keeps for servers.
func TestNames(t *testing.T) {
	for _, c := range []struct{ name, server, secret string }{
		{vault.TokenName("github"), "github", ""},
		{vault.SecretName("fx", "API_KEY"), "fx", "API_KEY"},
		{vault.SecretName("my server", "X-Api-Key"), "my server", "X-Api-Key"},
	} {
		if err := vault.CheckName(c.name); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		server, secret, ok := vault.ParseName(c.name)
		if !ok || server != c.server || secret != c.secret {
			t.Errorf("ParseName(%q): %q %q %v", c.name, server, secret, ok)
		}
	}
	for _, n := range []string{"server/fx", "server//token", "server/a/b/token", "x/fx/token", "server/fx/secret/", "server/fx/secret/a/b", "server/fx/other"} {
		if s, sec, ok := vault.ParseName(n); ok {
			t.Errorf("ParseName(%q): %q %q", n, s, sec)
		}
	}
}

// An OAuth token formatted for a log shows no credential.
func TestOAuthTokenRedacted(t *testing.T) {
	tok := vault.OAuthToken{AccessToken: "at-secret-1", RefreshToken: "rt-secret-2", TokenType: "Bearer"}
	var sb strings.Builder
	slog.New(slog.NewTextHandler(&sb, nil)).Info("refreshed", "token", tok)
	for _, s := range []string{fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s", tok, tok, tok, tok), fmt.Sprint(&tok), sb.String()} {
		if strings.Contains(s, "secret") {
			t.Errorf("a token formatted shows a secret: %s", s)
		}
		if !strings.Contains(s, "redacted") {
			t.Errorf("a token formatted: %s", s)
		}
	}
}
