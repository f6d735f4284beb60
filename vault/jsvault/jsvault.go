// Package jsvault is a [vault.Store] on a NATS JetStream key-value
// bucket: the vault of a fleet, which every worker reads, so that a worker
// acts for a run's submitter with the submitter's credentials.
//
// The bucket holds what a vault.FileStore holds: sealed values, by owner
// and name. The vault's key stays on the machines (each member's key file
// or variable); nothing in NATS opens a value. It is a package of its own
// so that nats.go stays out of package vault.
//
// The mapping:
//
//   - an entry is one key, OWNER.NAME, each part the base32 (extended
//     hex alphabet, no padding) of the owner and of the name, which may
//     hold any character; the value is the sealed value as it is;
//   - the bucket keeps one revision of each key (History 1): a value
//     replaced or re-sealed by a rotation leaves nothing of the old one;
//     a deleted entry is purged;
//   - Update is compare-and-set on the key's revision (Create for a new
//     entry), tried again when another member wrote the entry meanwhile;
//   - the entries of an owner are bounded by counting its keys around
//     the creation of one: a new entry that would make one too many is
//     refused before it is written, and taken back when members created
//     entries of the owner at once.
package jsvault

import (
	"context"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/vault"
)

// Config says which bucket holds the vault.
type Config struct {
	// Bucket is the bucket's name (default "TOOLMUX_VAULT").
	Bucket string
	// Replicas is the bucket's replication in a cluster (default 1).
	Replicas int
	// Memory keeps the bucket in memory (tests: nothing survives the
	// server).
	Memory bool
	// MaxValueBytes bounds a value: the bucket refuses a sealed value
	// larger than it and vault.SealOverhead (default
	// vault.DefaultMaxValueBytes). Set by whoever creates the bucket.
	MaxValueBytes int
	// MaxAttempts bounds how many times Update tries again when other
	// members keep writing the entry (default 16).
	MaxAttempts int
}

func (c *Config) defaults() {
	if c.Bucket == "" {
		c.Bucket = "TOOLMUX_VAULT"
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.MaxValueBytes <= 0 {
		c.MaxValueBytes = vault.DefaultMaxValueBytes
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 16
	}
}

// Store is a vault.Store on a JetStream bucket. It is safe for concurrent
// use, by any number of members of the fleet.
type Store struct {
	kv  jetstream.KeyValue
	cfg Config
}

var _ vault.Store = (*Store)(nil)

// Open binds the vault's bucket, creating it when it does not exist (a
// bucket that exists is never changed: another member set it up). The
// connection stays the caller's.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg.defaults()
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:       cfg.Bucket,
			Description:  "toolmux vault: users' credentials, sealed (the key is not here)",
			History:      1,
			MaxValueSize: int32(cfg.MaxValueBytes + vault.SealOverhead),
			Replicas:     cfg.Replicas,
			Storage:      storage,
		})
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			kv, err = js.KeyValue(ctx, cfg.Bucket) // created by another member meanwhile
		}
	}
	if err != nil {
		return nil, vault.StoreFailed("JetStream bucket "+cfg.Bucket+" cannot be opened", err)
	}
	return &Store{kv: kv, cfg: cfg}, nil
}

// Bucket is the bucket's name.
func (s *Store) Bucket() string { return s.cfg.Bucket }

// String names the store for people.
func (s *Store) String() string { return "JetStream bucket " + s.cfg.Bucket }

// enc writes an owner or a name as a key token: the extended hex
// alphabet (0-9, A-V) is within the characters a key may hold, and has no
// '.', which separates the two.
var enc = base32.HexEncoding.WithPadding(base32.NoPadding)

func key(owner, name string) string {
	return ownerToken(owner) + "." + enc.EncodeToString([]byte(name))
}

func ownerToken(owner string) string { return enc.EncodeToString([]byte(owner)) }

// parseKey reads a key back into its owner and name; ok is false for a
// key that is not one of this store's.
func parseKey(k string) (owner, name string, ok bool) {
	o, n, found := strings.Cut(k, ".")
	if !found {
		return "", "", false
	}
	ob, err1 := enc.DecodeString(o)
	nb, err2 := enc.DecodeString(n)
	if err1 != nil || err2 != nil || vault.CheckOwner(string(ob)) != nil || vault.CheckName(string(nb)) != nil {
		return "", "", false
	}
	return string(ob), string(nb), true
}

func (s *Store) failed(what string, err error) error {
	return vault.StoreFailed(fmt.Sprintf("%s in JetStream bucket %s", what, s.cfg.Bucket), err)
}

func gone(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
}

// Get implements vault.Store.
func (s *Store) Get(ctx context.Context, owner, name string) (vault.Entry, error) {
	e, err := s.kv.Get(ctx, key(owner, name))
	if gone(err) {
		return vault.Entry{}, vault.NotFound(owner, name)
	}
	if err != nil {
		return vault.Entry{}, s.failed("reading an entry", err)
	}
	return vault.Entry{Name: name, Sealed: e.Value(), Updated: e.Created()}, nil
}

// List implements vault.Store: the owner's keys, then each entry.
func (s *Store) List(ctx context.Context, owner string) ([]vault.Entry, error) {
	names, err := s.names(ctx, owner)
	if err != nil {
		return nil, err
	}
	out := make([]vault.Entry, 0, len(names))
	for _, n := range names {
		e, err := s.Get(ctx, owner, n)
		if vault.IsNotFound(err) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// names returns the names of the owner's entries, sorted.
func (s *Store) names(ctx context.Context, owner string) ([]string, error) {
	keys, err := s.keys(ctx, ownerToken(owner)+".*")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, k := range keys {
		if o, n, ok := parseKey(k); ok && o == owner {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil // a key may be listed twice while it is written
}

// keys lists the bucket's keys matching filter.
func (s *Store) keys(ctx context.Context, filter string) ([]string, error) {
	l, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, s.failed("listing entries", err)
	}
	defer l.Stop()
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	// The lister ends early, without a word, when ctx does: a list cut
	// short must not pass for the whole (the owner's bound counts it).
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return keys, nil
}

// Owners implements vault.Store.
func (s *Store) Owners(ctx context.Context) ([]string, error) {
	keys, err := s.keys(ctx, ">")
	if err != nil {
		return nil, err
	}
	var owners []string
	for _, k := range keys {
		if o, _, ok := parseKey(k); ok {
			owners = append(owners, o)
		}
	}
	slices.Sort(owners)
	return slices.Compact(owners), nil
}

// Update implements vault.Store: compare-and-set on the entry's revision,
// tried again (with change asked again) when another member wrote it
// between the read and the write.
func (s *Store) Update(ctx context.Context, owner, name string, maxEntries int, change func(*vault.Entry) ([]byte, error)) error {
	k := key(owner, name)
	for range s.cfg.MaxAttempts {
		e, err := s.kv.Get(ctx, k)
		var cur *vault.Entry
		switch {
		case gone(err):
		case err != nil:
			return s.failed("reading an entry", err)
		default:
			cur = &vault.Entry{Name: name, Sealed: e.Value(), Updated: e.Created()}
		}
		sealed, err := change(cur)
		if err != nil || sealed == nil {
			return err
		}
		if cur != nil {
			_, err = s.kv.Update(ctx, k, sealed, e.Revision())
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
				continue // written meanwhile
			}
			if err != nil {
				return s.failed("writing an entry", err)
			}
			return nil
		}
		retry, err := s.create(ctx, owner, name, k, sealed, maxEntries)
		if retry {
			continue
		}
		return err
	}
	return s.failed("writing an entry", fmt.Errorf("it was changed by others %d times in a row while it was written", s.cfg.MaxAttempts))
}

// create writes a new entry, within the owner's bound: refused when the
// owner has maxEntries already; taken back when others created entries of
// the owner meanwhile and there are now more than maxEntries. retry is
// true when the entry was created by another member first.
func (s *Store) create(ctx context.Context, owner, name, k string, sealed []byte, maxEntries int) (retry bool, err error) {
	names, err := s.names(ctx, owner)
	if err != nil {
		return false, err
	}
	if len(names) >= maxEntries {
		return false, vault.TooMany(owner, name, maxEntries)
	}
	rev, err := s.kv.Create(ctx, k, sealed)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true, nil
	}
	if err != nil {
		return false, s.failed("writing an entry", err)
	}
	names, err = s.names(ctx, owner)
	if err != nil {
		return false, err
	}
	if len(names) > maxEntries {
		// Others created entries of the owner at the same time: the
		// bound holds by taking this one back (unless it was written
		// again since, which makes it theirs).
		if err := s.kv.Purge(ctx, k, jetstream.LastRevision(rev)); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) &&
			!errors.Is(err, jetstream.ErrKeyExists) {
			return false, s.failed("taking an entry back", err)
		}
		return false, vault.TooMany(owner, name, maxEntries)
	}
	return false, nil
}

// Delete implements vault.Store: the entry is purged, its value gone from
// the bucket.
func (s *Store) Delete(ctx context.Context, owner, name string) error {
	k := key(owner, name)
	e, err := s.kv.Get(ctx, k)
	if gone(err) {
		return vault.NotFound(owner, name)
	}
	if err != nil {
		return s.failed("reading an entry", err)
	}
	if err := s.kv.Purge(ctx, k, jetstream.LastRevision(e.Revision())); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			// Written meanwhile: deleted all the same, whatever it is now.
			err = s.kv.Purge(ctx, k)
		}
		if err != nil {
			return s.failed("deleting an entry", err)
		}
	}
	return nil
}
