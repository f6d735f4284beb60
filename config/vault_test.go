package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
)

// A key made by toolmux vault keygen (32 bytes in base64): what must
// never be in a configuration.
const aVaultKey = "q2Vk3yq0a6bXhR0nYb2o3m2qW9yJ7o1a8JwCw9m3kOQ="

func TestVault(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`vault:
  key_file: keys/vault.key
  previous_key_files: [/etc/toolmux/vault-2025.key]
  previous_key_envs: [TOOLMUX_VAULT_KEY_OLD]
  max_value_bytes: 16KiB
  max_entries_per_owner: 50
`), config.Options{Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Vault{KeyFile: "/work/keys/vault.key", PreviousKeyFiles: []string{"/etc/toolmux/vault-2025.key"},
		PreviousKeyEnvs: []string{"TOOLMUX_VAULT_KEY_OLD"}, MaxValueBytes: 16 << 10, MaxEntriesPerOwner: 50}
	if !reflect.DeepEqual(cfg.Vault, want) {
		t.Errorf("vault: %+v", cfg.Vault)
	}
	cfg, err = config.ParseWith("toolmux.yaml", []byte("vault: {key_env: MY_VAULT_KEY}\n"), config.Options{Dir: "/work"})
	if err != nil || cfg.Vault.KeyEnv != "MY_VAULT_KEY" || cfg.Vault.KeyFile != "" {
		t.Errorf("key_env: %v %+v", err, cfg.Vault)
	}
	// Left out: the zero value, which means the vault's defaults.
	cfg, err = config.ParseWith("toolmux.yaml", []byte("workspace: .\n"), config.Options{Dir: "/work"})
	if err != nil || !reflect.DeepEqual(cfg.Vault, config.Vault{}) {
		t.Errorf("without the section: %v %+v", err, cfg.Vault)
	}
}

func TestVaultErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `vault:
  key_file: a.key
  key_env: VAULT_KEY
  previous_key_envs: [OLD, "${OLD}", 1x]
  max_value_bytes: 513KiB
  max_entries_per_owner: 0
  key_fil: x
`, []wantErr{
		{3, 12, "vault.key_env", "from key_file or from key_env, not both"},
		{4, 28, "vault.previous_key_envs[1]", "must be the name of an environment variable"},
		{4, 38, "vault.previous_key_envs[2]", "must be the name of an environment variable"},
		{5, 20, "vault.max_value_bytes", "must be between 1 byte and 512KiB"},
		{6, 26, "vault.max_entries_per_owner", "must be between 1 and 100000, got 0"},
		{7, 3, "vault.key_fil", "unknown key (expected one of: key_file, key_env, previous_key_files, previous_key_envs, max_value_bytes, max_entries_per_owner); did you mean key_file?"},
	})
	checkErrors(t, "toolmux.yaml", "vault:\n  previous_key_files: [a, b, c, d, e, f, g, h, i]\n", []wantErr{
		{2, 23, "vault.previous_key_files", "at most 8 previous keys"},
	})
}

// The key itself, wherever it is written in the section, is refused with
// words saying where it goes instead, and is never quoted back.
func TestVaultRefusesTheKey(t *testing.T) {
	for _, c := range []struct {
		content string
		env     map[string]string
		key     string
	}{
		{"vault:\n  key: " + aVaultKey + "\n", nil, "vault.key"},
		{"vault:\n  secret: x\n", nil, "vault.secret"},
		{"vault:\n  key_file: " + aVaultKey + "\n", nil, "vault.key_file"},
		{"vault:\n  key_file: ${VAULT_KEY}\n", map[string]string{"VAULT_KEY": aVaultKey}, "vault.key_file"},
		{"vault:\n  key_env: " + aVaultKey + "\n", nil, "vault.key_env"},
		{"vault:\n  key_env: " + strings.TrimRight(strings.NewReplacer("+", "A", "/", "B").Replace(aVaultKey), "=") + "\n", nil, "vault.key_env"},
		{"vault:\n  previous_key_files: [" + aVaultKey + "]\n", nil, "vault.previous_key_files[0]"},
	} {
		_, err := config.ParseWith("toolmux.yaml", []byte(c.content), config.Options{Dir: "/work",
			LookupEnv: func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }})
		if err == nil {
			t.Errorf("%q: no error", c.content)
			continue
		}
		errs := allErrors(t, err)
		if len(errs) != 1 || errs[0].Key != c.key || !(strings.Contains(errs[0].Msg, "never written in the configuration") ||
			strings.Contains(errs[0].Msg, "not the key itself")) {
			t.Errorf("%q: %v", c.content, err)
		}
		if strings.Contains(err.Error(), aVaultKey[:20]) {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
}
