package vault

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds of the vault. Owners and names are identities and labels, not
// data: their lengths are fixed here (as identity.KeyNameMax is), while the
// bounds on what a user may store are Options.
const (
	// MaxOwnerBytes is the longest owner: an issuer's URL and a subject.
	MaxOwnerBytes = 1024
	// MaxNameBytes is the longest name of an entry.
	MaxNameBytes = 512
)

// Defaults of Options.
const (
	// DefaultMaxValueBytes bounds a value: an OAuth token (a JWT access
	// token, a refresh token) or an API key is some kilobytes at most.
	DefaultMaxValueBytes = 64 << 10
	// DefaultMaxEntriesPerOwner bounds one owner's entries: a token and
	// some secrets for each of the servers of a gateway.
	DefaultMaxEntriesPerOwner = 256
)

// Options bound what the vault keeps. Zero values mean the defaults.
type Options struct {
	// MaxValueBytes is the largest value Put takes (DefaultMaxValueBytes).
	MaxValueBytes int
	// MaxEntriesPerOwner is how many entries one owner may have
	// (DefaultMaxEntriesPerOwner): Put of a new name beyond it is refused.
	MaxEntriesPerOwner int
}

// WithDefaults returns o with the defaults in place of zero values.
func (o Options) WithDefaults() Options {
	if o.MaxValueBytes <= 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	if o.MaxEntriesPerOwner <= 0 {
		o.MaxEntriesPerOwner = DefaultMaxEntriesPerOwner
	}
	return o
}

// Entry is a sealed entry as a store keeps it.
type Entry struct {
	Name string
	// Sealed is the sealed value: what Keyring.seal made of it.
	Sealed []byte
	// Updated is when it was last written.
	Updated time.Time
}

// Store keeps sealed entries by owner and name: FileStore, or
// vault/jsvault's JetStream bucket. It never sees a value or a key.
// Owners and names it is given have been checked (CheckOwner, CheckName).
type Store interface {
	// Get returns the entry (owner, name); NotFound when there is none.
	Get(ctx context.Context, owner, name string) (Entry, error)
	// List returns the owner's entries, by name (none: no owner).
	List(ctx context.Context, owner string) ([]Entry, error)
	// Owners returns the owners with at least one entry, sorted.
	Owners(ctx context.Context) ([]string, error)
	// Update changes the entry (owner, name) atomically: change is given
	// the entry as it is now (nil when there is none) and returns its new
	// sealed value, or nil to leave it as it is; the store writes it only
	// if the entry has not changed since change saw it (else it calls
	// change again with the entry as it is then). An entry that does not
	// exist yet is refused with TooMany when the owner has maxEntries
	// already. An error of change is returned as it is, nothing written.
	Update(ctx context.Context, owner, name string, maxEntries int, change func(cur *Entry) ([]byte, error)) error
	// Delete removes the entry; NotFound when there is none.
	Delete(ctx context.Context, owner, name string) error
}

// Vault is the encrypted store of users' credentials. It is safe for
// concurrent use, as its Store is.
type Vault struct {
	store Store
	ring  *Keyring
	opts  Options
}

// New returns the vault keeping its entries in store, sealed with ring's
// current key; a nil ring makes it locked (Put and Get refuse with
// KindLocked; List, Delete and Status still work: they need no key).
func New(store Store, ring *Keyring, o Options) *Vault {
	return &Vault{store: store, ring: ring, opts: o.WithDefaults()}
}

// Locked reports whether the vault has no key.
func (v *Vault) Locked() bool { return v.ring == nil }

// Keyring returns the vault's keys; nil when it is locked.
func (v *Vault) Keyring() *Keyring { return v.ring }

// Options returns the vault's bounds, defaults applied.
func (v *Vault) Options() Options { return v.opts }

// Store returns where the vault keeps its entries.
func (v *Vault) Store() Store { return v.store }

// Put seals value and keeps it as the owner's entry name, replacing the
// entry of that name if there is one.
func (v *Vault) Put(ctx context.Context, owner, name string, value []byte) error {
	if err := checkEntry(owner, name); err != nil {
		return err
	}
	if v.ring == nil {
		return lockedError(owner, name)
	}
	if len(value) > v.opts.MaxValueBytes {
		return &Error{Kind: KindTooLarge, Owner: owner, Name: name, Limit: v.opts.MaxValueBytes,
			Message: fmt.Sprintf("a value of %d bytes, more than the %d bytes vault.max_value_bytes allows", len(value), v.opts.MaxValueBytes)}
	}
	err := v.store.Update(ctx, owner, name, v.opts.MaxEntriesPerOwner, func(*Entry) ([]byte, error) {
		return v.ring.seal(owner, name, value), nil
	})
	return named(err, owner, name)
}

// Get opens the owner's entry name.
func (v *Vault) Get(ctx context.Context, owner, name string) ([]byte, error) {
	if err := checkEntry(owner, name); err != nil {
		return nil, err
	}
	if v.ring == nil {
		return nil, lockedError(owner, name)
	}
	e, err := v.store.Get(ctx, owner, name)
	if err != nil {
		return nil, named(err, owner, name)
	}
	b, err := v.ring.open(owner, name, e.Sealed)
	return b, named(err, owner, name)
}

// Delete removes the owner's entry name. It needs no key: a user may
// remove a secret the vault can no longer open.
func (v *Vault) Delete(ctx context.Context, owner, name string) error {
	if err := checkEntry(owner, name); err != nil {
		return err
	}
	return named(v.store.Delete(ctx, owner, name), owner, name)
}

// Info is what is known of an entry without opening it.
type Info struct {
	Name string `json:"name"`
	// KeyID is the id of the key that sealed it ("" when what is stored
	// is not a sealed value).
	KeyID   string    `json:"key_id"`
	Updated time.Time `json:"updated,omitzero"`
}

// List returns the owner's entries, by name, without their values. It
// needs no key.
func (v *Vault) List(ctx context.Context, owner string) ([]Info, error) {
	if err := CheckOwner(owner); err != nil {
		return nil, err
	}
	es, err := v.store.List(ctx, owner)
	if err != nil {
		return nil, named(err, owner, "")
	}
	out := make([]Info, len(es))
	for i, e := range es {
		out[i] = Info{Name: e.Name, KeyID: SealedKeyID(e.Sealed), Updated: e.Updated}
	}
	return out, nil
}

// named fills in the entry of an *Error that does not name one.
func named(err error, owner, name string) error {
	if e, ok := err.(*Error); ok && e.Owner == "" && e.Name == "" {
		c := *e
		c.Owner, c.Name = owner, name
		return &c
	}
	return err
}

// The names of the entries toolmux keeps for a server.
const (
	namePrefix    = "server/"
	tokenSuffix   = "/token"
	secretSegment = "/secret/"
)

// TokenName is the name of the OAuth token of an upstream server, which
// toolmux holds for a user (OAuthToken).
func TokenName(server string) string { return namePrefix + server + tokenSuffix }

// SecretName is the name of a secret a user sets for a server (an API
// key sent as a header or an environment variable named secret).
func SecretName(server, secret string) string { return namePrefix + server + secretSegment + secret }

// ParseName reads a name of TokenName or SecretName: the server, and the
// secret ("" for the token). ok is false for any other name.
func ParseName(name string) (server, secret string, ok bool) {
	rest, found := strings.CutPrefix(name, namePrefix)
	if !found {
		return "", "", false
	}
	if s, found := strings.CutSuffix(rest, tokenSuffix); found && s != "" && !strings.Contains(s, "/") {
		return s, "", true
	}
	s, sec, found := strings.Cut(rest, secretSegment)
	if !found || s == "" || sec == "" || strings.Contains(s, "/") || strings.Contains(sec, "/") {
		return "", "", false
	}
	return s, sec, true
}

// CheckOwner returns an *Error of KindInvalid when owner is not one: 1 to
// MaxOwnerBytes of UTF-8 without control characters.
func CheckOwner(owner string) error {
	if msg := checkText(owner, MaxOwnerBytes); msg != "" {
		return &Error{Kind: KindInvalid, Message: "an owner " + msg}
	}
	return nil
}

// CheckName returns an *Error of KindInvalid when name is not one: 1 to
// MaxNameBytes of UTF-8 without control characters, parts separated by
// '/', none empty.
func CheckName(name string) error {
	if msg := checkText(name, MaxNameBytes); msg != "" {
		return &Error{Kind: KindInvalid, Message: "a name " + msg}
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == "" {
			return &Error{Kind: KindInvalid, Message: fmt.Sprintf("a name is parts separated by '/', none empty, such as %s: not %q", TokenName("github"), name)}
		}
	}
	return nil
}

func checkText(s string, max int) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > max:
		return fmt.Sprintf("is at most %d bytes, not %d", max, len(s))
	case !utf8.ValidString(s):
		return "must be UTF-8"
	case strings.ContainsFunc(s, unicode.IsControl):
		return "must not hold control characters"
	}
	return ""
}

func checkEntry(owner, name string) error {
	if err := CheckOwner(owner); err != nil {
		return err
	}
	if err := CheckName(name); err != nil {
		e := err.(*Error)
		e.Owner = owner
		return e
	}
	return nil
}

// PutJSON keeps value, as JSON, as the owner's entry name.
func (v *Vault) PutJSON(ctx context.Context, owner, name string, value any) error {
	b, err := json.Marshal(value)
	if err != nil {
		return &Error{Kind: KindInvalid, Owner: owner, Name: name, Message: "the value is not JSON", Err: err}
	}
	defer clear(b)
	return v.Put(ctx, owner, name, b)
}

// GetJSON opens the owner's entry name into value, a pointer. A value
// that opens but is not the JSON of value's type is KindCorrupt.
func (v *Vault) GetJSON(ctx context.Context, owner, name string, value any) error {
	b, err := v.Get(ctx, owner, name)
	if err != nil {
		return err
	}
	defer clear(b)
	if err := json.Unmarshal(b, value); err != nil {
		// The decoder's message may quote the value: it is not kept.
		return &Error{Kind: KindCorrupt, Owner: owner, Name: name, Message: fmt.Sprintf("the value is not the JSON of a %T", value)}
	}
	return nil
}

// OAuthToken is an OAuth token toolmux holds for a user: what it sends to
// an upstream server on the user's behalf, and what it refreshes it with.
// Its fields are golang.org/x/oauth2.Token's, by the same JSON names.
type OAuthToken struct {
	AccessToken  string    `json:"access_token"`
	TokenType    string    `json:"token_type,omitempty"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	// Scope is the scopes granted, separated by spaces.
	Scope string `json:"scope,omitempty"`
}

// String shows what a token is without its secrets: whatever formats it
// with %v or %s (a log line, an error) shows no credential.
func (t OAuthToken) String() string {
	s := fmt.Sprintf("OAuthToken{access: %s, refresh: %s", redacted(t.AccessToken), redacted(t.RefreshToken))
	if !t.Expiry.IsZero() {
		s += ", expiry: " + t.Expiry.UTC().Format(time.RFC3339)
	}
	return s + "}"
}

// GoString is String, for %#v.
func (t OAuthToken) GoString() string { return t.String() }

// LogValue is String, for log/slog.
func (t OAuthToken) LogValue() slog.Value { return slog.StringValue(t.String()) }

func redacted(s string) string {
	if s == "" {
		return "none"
	}
	return "[redacted]"
}

// PutToken keeps the OAuth token of server for owner.
func (v *Vault) PutToken(ctx context.Context, owner, server string, t OAuthToken) error {
	return v.PutJSON(ctx, owner, TokenName(server), t)
}

// Token returns the OAuth token of server kept for owner.
func (v *Vault) Token(ctx context.Context, owner, server string) (OAuthToken, error) {
	var t OAuthToken
	err := v.GetJSON(ctx, owner, TokenName(server), &t)
	return t, err
}

// PutSecret keeps the secret named secret of server for owner.
func (v *Vault) PutSecret(ctx context.Context, owner, server, secret string, value []byte) error {
	return v.Put(ctx, owner, SecretName(server, secret), value)
}

// Secret returns the secret named secret of server kept for owner.
func (v *Vault) Secret(ctx context.Context, owner, server, secret string) ([]byte, error) {
	return v.Get(ctx, owner, SecretName(server, secret))
}
