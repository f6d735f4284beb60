package vault

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/toolmux/toolmux/internal/privfile"
)

// KeySize is the size of a vault key: AES-256.
const KeySize = 32

// keyIDSize is the size of a key's id in a sealed value.
const keyIDSize = 8

// DefaultKeyEnv is the environment variable the current key is read from
// when the configuration names neither a file nor a variable.
const DefaultKeyEnv = "TOOLMUX_VAULT_KEY"

// keyFormat says what a key is written as.
const keyFormat = "want 32 bytes in base64 (toolmux vault keygen makes a key)"

// maxKeyFileBytes bounds what is read of a key file: a key in base64 is
// 44 characters; anything much larger is not a key file.
const maxKeyFileBytes = 4096

// Key is one key of the vault: an AES-256-GCM AEAD and its id. The key's
// bytes are kept only inside the AEAD.
type Key struct {
	id   [keyIDSize]byte
	aead cipher.AEAD
	// source is where the key was read ("" when it was given).
	source string
}

// NewKey makes the Key of secret, which must be KeySize bytes.
func NewKey(secret []byte) (*Key, error) {
	if len(secret) != KeySize {
		return nil, &Error{Kind: KindKey, Message: fmt.Sprintf("a vault key is %d bytes, not %d", KeySize, len(secret))}
	}
	block, err := aes.NewCipher(secret)
	if err != nil {
		return nil, &Error{Kind: KindKey, Message: "not an AES key", Err: err}
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, &Error{Kind: KindKey, Message: "not an AES-GCM key", Err: err}
	}
	k := &Key{aead: aead}
	// The id says which key sealed a value without saying anything of
	// the key: a hash of it, under a label of its own so that it is no
	// hash of the key anyone else computes.
	h := sha256.Sum256(append([]byte("toolmux vault key id\x00"), secret...))
	copy(k.id[:], h[:keyIDSize])
	return k, nil
}

// ID is the key's id: 16 hex digits, what status shows and what each
// sealed value records.
func (k *Key) ID() string { return hex.EncodeToString(k.id[:]) }

// Source says where the key was read: "key file PATH" or "environment
// variable NAME"; "" for a key made by NewKey or ParseKey.
func (k *Key) Source() string { return k.source }

// String names the key by its id, never its bytes.
func (k *Key) String() string { return "vault key " + k.ID() }

// GenerateKey returns a new random key, in base64 (what a key file or
// variable holds).
func GenerateKey() string {
	b := make([]byte, KeySize)
	rand.Read(b) // never fails (crypto/rand)
	return base64.StdEncoding.EncodeToString(b)
}

// ParseKey reads a key written in base64 (standard or URL alphabet,
// padded or not, surrounded by white space or not). Its errors never
// quote the text: it may be a key of another length.
func ParseKey(text string) (*Key, error) {
	b, ok := decodeKey(text)
	if !ok {
		return nil, &Error{Kind: KindKey, Message: "not a vault key: " + keyFormat}
	}
	return NewKey(b)
}

// LooksLikeKey reports whether s is something ParseKey would take for a
// key: what must never be written in a configuration.
func LooksLikeKey(s string) bool {
	_, ok := decodeKey(s)
	return ok
}

func decodeKey(text string) ([]byte, bool) {
	s := strings.TrimSpace(text)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == KeySize {
			return b, true
		}
	}
	return nil, false
}

// Keyring is the vault's keys: the current one, which seals, and the
// previous ones, which still open what they sealed until a rotation has
// re-sealed it.
type Keyring struct {
	current  *Key
	previous []*Key
}

// NewKeyring returns the ring of current and previous keys. A previous
// key equal to the current one, or given twice, is kept once.
func NewKeyring(current *Key, previous ...*Key) (*Keyring, error) {
	if current == nil {
		return nil, &Error{Kind: KindKey, Message: "a key ring needs a current key"}
	}
	r := &Keyring{current: current}
	for _, k := range previous {
		if k.id == current.id || slices.ContainsFunc(r.previous, func(p *Key) bool { return p.id == k.id }) {
			continue
		}
		r.previous = append(r.previous, k)
	}
	return r, nil
}

// Current is the id of the key that seals.
func (r *Keyring) Current() string { return r.current.ID() }

// Previous are the ids of the keys that only open.
func (r *Keyring) Previous() []string {
	ids := make([]string, len(r.previous))
	for i, k := range r.previous {
		ids[i] = k.ID()
	}
	return ids
}

// CurrentKey is the key that seals.
func (r *Keyring) CurrentKey() *Key { return r.current }

// PreviousKeys are the keys that only open.
func (r *Keyring) PreviousKeys() []*Key { return slices.Clone(r.previous) }

// key returns the key of id, nil when the ring has none.
func (r *Keyring) key(id [keyIDSize]byte) *Key {
	if r.current.id == id {
		return r.current
	}
	for _, k := range r.previous {
		if k.id == id {
			return k
		}
	}
	return nil
}

// KeySource is where a key is read: a file or an environment variable
// (exactly one of them).
type KeySource struct {
	// File is a file holding the key in base64; it must be of mode 0600
	// (or stricter) and belong to the user reading it.
	File string
	// Env is an environment variable holding the key in base64.
	Env string
	// Optional makes a variable that is not set mean "no key" rather
	// than an error: the default variable, which nobody asked for.
	Optional bool
}

func (s KeySource) String() string {
	if s.File != "" {
		return "key file " + s.File
	}
	return "environment variable " + s.Env
}

// Keys say where the vault's keys are read.
type Keys struct {
	// Current is where the key that seals is; the zero KeySource is no
	// key (the vault is locked).
	Current KeySource
	// Previous are where the keys that only open are, during a
	// rotation.
	Previous []KeySource
}

// Load reads the keys. With no current key (none configured, or an
// Optional variable not set) it returns a nil ring and no error: the vault
// is locked. A key configured that cannot be read, or is not a key, is an
// *Error of KindKey naming where it was looked for (never its content).
// lookupEnv is os.LookupEnv, or a test's.
func (ks Keys) Load(lookupEnv func(string) (string, bool)) (*Keyring, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	cur, err := ks.Current.load(lookupEnv)
	if err != nil || cur == nil {
		if cur == nil && err == nil && len(ks.Previous) > 0 {
			return nil, &Error{Kind: KindKey, Message: "previous keys are configured, but no current key: " + ks.Current.missing()}
		}
		return nil, err
	}
	var prev []*Key
	for _, s := range ks.Previous {
		k, err := s.load(lookupEnv)
		if err != nil {
			return nil, err
		}
		if k == nil {
			return nil, &Error{Kind: KindKey, Message: s.missing()}
		}
		prev = append(prev, k)
	}
	return NewKeyring(cur, prev...)
}

func (s KeySource) missing() string {
	if s.File == "" && s.Env == "" {
		return "none is configured"
	}
	return s.String() + " is not set"
}

// load reads the key of s; nil without error when s is the zero source,
// or an optional variable not set.
func (s KeySource) load(lookupEnv func(string) (string, bool)) (*Key, error) {
	switch {
	case s.File != "" && s.Env != "":
		return nil, &Error{Kind: KindKey, Message: "a key is read from a file or from an environment variable, not both"}
	case s.File != "":
		return loadKeyFile(s.File)
	case s.Env != "":
		v, ok := lookupEnv(s.Env)
		if !ok || v == "" {
			if s.Optional {
				return nil, nil
			}
			return nil, &Error{Kind: KindKey, Message: s.missing()}
		}
		k, err := ParseKey(v)
		if err != nil {
			return nil, &Error{Kind: KindKey, Message: s.String() + " does not hold a vault key: " + keyFormat}
		}
		k.source = s.String()
		return k, nil
	}
	return nil, nil
}

// loadKeyFile reads a key file, which must be its owner's only: a key
// others could read would open every value of the vault.
func loadKeyFile(path string) (*Key, error) {
	fail := func(msg string, err error) error {
		return &Error{Kind: KindKey, Message: "key file " + path + ": " + msg, Err: err}
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fail("does not exist (toolmux vault keygen "+path+" makes one)", nil)
	}
	if err != nil {
		return nil, fail("cannot be read", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fail("cannot be read", err)
	}
	if err := privfile.Check(path, fi); err != nil {
		return nil, &Error{Kind: KindKey, Message: "key file " + err.Error()}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fail("cannot be read", err)
	}
	defer clear(b)
	if len(b) > maxKeyFileBytes {
		return nil, fail("is not a vault key file (too large)", nil)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fail("does not hold a vault key: "+keyFormat, nil)
	}
	k.source = KeySource{File: path}.String()
	return k, nil
}

// WriteKeyFile writes a new random key to path, of mode 0600, refusing a
// file that exists: a key overwritten is every value it sealed lost. It
// returns the key's id.
func WriteKeyFile(path string) (string, error) {
	text := GenerateKey()
	k, err := ParseKey(text)
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", &Error{Kind: KindKey, Message: "key file " + path + " exists already: a key replaced is every value it sealed lost; choose another file"}
		}
		return "", &Error{Kind: KindKey, Message: "key file " + path + " cannot be written", Err: err}
	}
	_, err = f.WriteString(text + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", &Error{Kind: KindKey, Message: "key file " + path + " cannot be written", Err: err}
	}
	return k.ID(), nil
}
