package config

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file reads the vault section: where the keys of the vault of
// users' credentials are (docs/vault.md). A key is never read from the
// configuration, which is shown, copied and committed: what looks like one
// is refused, and never quoted back.

var vaultKeys = []string{"key_file", "key_env", "previous_key_files", "previous_key_envs", "max_value_bytes", "max_entries_per_owner"}

// vaultKeyWords are keys someone putting the key itself in the section
// would write.
var vaultKeyWords = []string{"key", "keys", "secret", "master_key", "previous_keys", "previous_key"}

// Bounds of the vault section. A value is sealed into one message of a
// fleet's NATS server (1 MiB unless configured); a rotation needs one
// previous key, a few cover rotations that overlap.
const (
	maxVaultValueBytes   = 512 << 10
	maxVaultEntries      = 100_000
	maxVaultPreviousKeys = 8
)

const vaultKeyNotHere = "the vault's key is never written in the configuration: put it in a file of mode 0600 (key_file) " +
	"or in an environment variable (key_env), and name that here (toolmux vault keygen makes a key)"

// vault reads the vault section.
func (p *parser) vault(n *yaml.Node, kp string) Vault {
	var vc Vault
	var fileNode, envNode *yaml.Node
	es, _ := p.entries(n, kp)
	for _, e := range es {
		fp := join(kp, e.key)
		switch {
		case slices.Contains(vaultKeyWords, e.key):
			p.errAt(e.k, fp, "%s", vaultKeyNotHere)
			continue
		case !slices.Contains(vaultKeys, e.key):
			p.errAt(e.k, fp, "%s", unknownKeyMsg(e.key, vaultKeys, nil))
			continue
		}
		switch e.key {
		case "key_file":
			fileNode = e.v
			vc.KeyFile, _ = p.vaultKeyFile(e.v, fp)
		case "key_env":
			envNode = e.v
			vc.KeyEnv, _ = p.vaultKeyEnv(e.v, fp)
		case "previous_key_files", "previous_key_envs":
			items := p.items(e.v, fp)
			if len(items) > maxVaultPreviousKeys {
				p.errAt(e.v, fp, "at most %d previous keys", maxVaultPreviousKeys)
				continue
			}
			for i, it := range items {
				ip := fmt.Sprintf("%s[%d]", fp, i)
				if e.key == "previous_key_files" {
					if s, ok := p.vaultKeyFile(it, ip); ok {
						vc.PreviousKeyFiles = append(vc.PreviousKeyFiles, s)
					}
				} else if s, ok := p.vaultKeyEnv(it, ip); ok {
					vc.PreviousKeyEnvs = append(vc.PreviousKeyEnvs, s)
				}
			}
		case "max_value_bytes":
			vc.MaxValueBytes, _ = p.sizeUpTo(e.v, fp, maxVaultValueBytes, "512KiB")
		case "max_entries_per_owner":
			vc.MaxEntriesPerOwner, _ = p.integer(e.v, fp, 1, maxVaultEntries)
		}
	}
	if fileNode != nil && envNode != nil {
		p.errAt(envNode, kp+".key_env", "the current key is read from key_file or from key_env, not both")
	}
	return vc
}

// vaultKeyFile reads the path of a key file: expanded, relative to the
// configuration's directory; never a key.
func (p *parser) vaultKeyFile(n *yaml.Node, kp string) (string, bool) {
	if v := deref(n); v.Kind == yaml.ScalarNode && looksLikeVaultKey(v.Value) {
		p.errAt(n, kp, "%s", vaultKeyNotHere)
		return "", false
	}
	s, ok := p.text(n, kp)
	if !ok {
		return "", false
	}
	if looksLikeVaultKey(s) {
		// A variable expanded to the key.
		p.errAt(n, kp, "%s", vaultKeyNotHere)
		return "", false
	}
	r, err := resolvePath(s, p.dir, p.lookup)
	if err != nil {
		p.errAt(n, kp, "%v", err)
		return "", false
	}
	return r, true
}

// vaultKeyEnv reads the name of an environment variable, not expanded and
// not quoted back: what is written there by mistake may be the key.
func (p *parser) vaultKeyEnv(n *yaml.Node, kp string) (string, bool) {
	s, ok := p.str(n, kp)
	if !ok {
		return "", false
	}
	if looksLikeVaultKey(s) || !envNameRE.MatchString(s) {
		p.errAt(n, kp, "must be the name of an environment variable (letters, digits and _), such as TOOLMUX_VAULT_KEY: not the key itself, nor ${...}")
		return "", false
	}
	return s, true
}

// looksLikeVaultKey says whether s is what package vault would read as a
// key: 32 bytes in base64, in either alphabet, padded or not.
func looksLikeVaultKey(s string) bool {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == 32 {
			return true
		}
	}
	return false
}
