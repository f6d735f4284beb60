package vault

import (
	"errors"
	"fmt"
)

// Kind says why the vault refused.
type Kind string

// The kinds of refusal.
const (
	// KindNotFound: the owner has no entry of that name.
	KindNotFound Kind = "not_found"
	// KindLocked: no key is configured; values can be neither sealed
	// nor opened (docs/vault.md says how to configure one).
	KindLocked Kind = "locked"
	// KindWrongKey: the entry was sealed by a key the vault does not
	// have (not its current key, nor one of its previous keys).
	KindWrongKey Kind = "wrong_key"
	// KindCorrupt: what is stored is not a sealed value, or it does not
	// open with the key that sealed it: damaged, tampered with, or
	// copied from another owner's entry or another name.
	KindCorrupt Kind = "corrupt"
	// KindKey: a key configured cannot be used: its file or variable is
	// missing, is not 32 bytes in base64, or the file may be read by
	// others.
	KindKey Kind = "key"
	// KindInvalid: an owner or a name that is not one (CheckOwner,
	// CheckName).
	KindInvalid Kind = "invalid"
	// KindTooLarge: a value larger than Options.MaxValueBytes.
	KindTooLarge Kind = "too_large"
	// KindTooMany: a new entry for an owner who has
	// Options.MaxEntriesPerOwner already.
	KindTooMany Kind = "too_many"
	// KindStore: the store failed: a file that cannot be read or
	// written, or is not its owner's only; a NATS server that did not
	// answer.
	KindStore Kind = "store"
)

// Error is a refusal of the vault. Its message names the entry and what
// went wrong, never a value or a key.
type Error struct {
	Kind Kind
	// Owner and Name are the entry, when the refusal is about one.
	Owner, Name string
	// KeyID is the id of the key that sealed the entry, for
	// KindWrongKey and KindCorrupt.
	KeyID string
	// Limit is the bound reached, for KindTooLarge and KindTooMany.
	Limit int
	// Message says what went wrong and, where there is something to do,
	// what to do.
	Message string
	// Err is the cause, if any.
	Err error
}

func (e *Error) Error() string {
	msg := "vault: "
	if e.Name != "" {
		msg += fmt.Sprintf("%s of %s: ", e.Name, e.Owner)
	} else if e.Owner != "" {
		msg += fmt.Sprintf("%s: ", e.Owner)
	}
	msg += e.Message
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of err: an *Error's in its chain, "" for nil or
// any other error.
func KindOf(err error) Kind {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	return ""
}

// IsNotFound reports whether err says there is no such entry.
func IsNotFound(err error) bool { return KindOf(err) == KindNotFound }

// NotFound is the error a Store returns for an entry it does not have.
func NotFound(owner, name string) error {
	return &Error{Kind: KindNotFound, Owner: owner, Name: name, Message: "no such entry"}
}

// StoreFailed is the error a Store returns when it could not do what was
// asked: detail says what, err why.
func StoreFailed(detail string, err error) error {
	return &Error{Kind: KindStore, Message: detail, Err: err}
}

// TooMany is the error a Store returns for a new entry of an owner who
// has max already.
func TooMany(owner, name string, max int) error {
	return &Error{Kind: KindTooMany, Owner: owner, Name: name, Limit: max,
		Message: fmt.Sprintf("the owner has %d entries, the most vault.max_entries_per_owner allows: delete one first", max)}
}

// lockedError says the vault has no key, and how to give it one.
func lockedError(owner, name string) error {
	return &Error{Kind: KindLocked, Owner: owner, Name: name,
		Message: "the vault is locked: no key is configured; set vault.key_file (a file of mode 0600 holding the key) or vault.key_env " +
			"(an environment variable holding it; " + DefaultKeyEnv + " by default) — toolmux vault keygen makes a key, docs/vault.md says more"}
}
