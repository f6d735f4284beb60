package vault

import (
	"path/filepath"

	"github.com/toolmux/toolmux/config"
)

// This file is the only use of package config: the vault section read
// into the vault's own options and key sources.

// OptionsFromConfig returns the bounds of the `vault:` section (zero
// values: the defaults).
func OptionsFromConfig(c config.Vault) Options {
	return Options{MaxValueBytes: int(c.MaxValueBytes), MaxEntriesPerOwner: c.MaxEntriesPerOwner}
}

// KeysFromConfig returns where the `vault:` section says the keys are:
// key_file or key_env, else the variable DefaultKeyEnv when it is set
// (the vault is locked when it is not); previous_key_files, then
// previous_key_envs.
func KeysFromConfig(c config.Vault) Keys {
	var ks Keys
	switch {
	case c.KeyFile != "":
		ks.Current = KeySource{File: c.KeyFile}
	case c.KeyEnv != "":
		ks.Current = KeySource{Env: c.KeyEnv}
	default:
		ks.Current = KeySource{Env: DefaultKeyEnv, Optional: true}
	}
	for _, f := range c.PreviousKeyFiles {
		ks.Previous = append(ks.Previous, KeySource{File: f})
	}
	for _, e := range c.PreviousKeyEnvs {
		ks.Previous = append(ks.Previous, KeySource{Env: e})
	}
	return ks
}

// FromConfig returns the vault the `vault:` section describes, its
// entries in store: its keys read with lookupEnv (os.LookupEnv; none
// configured: the vault is locked), its bounds. A key configured that
// cannot be read is an *Error of KindKey.
func FromConfig(c config.Vault, store Store, lookupEnv func(string) (string, bool)) (*Vault, error) {
	ring, err := KeysFromConfig(c).Load(lookupEnv)
	if err != nil {
		return nil, err
	}
	return New(store, ring, OptionsFromConfig(c)), nil
}

// Dir is where a data directory keeps its vault (FileStore).
func Dir(dataDir string) string { return filepath.Join(dataDir, "vault") }
