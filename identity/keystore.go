package identity

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolmux/toolmux/internal/privfile"
)

// The key store: the API keys of a gateway kept in a file of its data
// directory (DATA_DIR/keys.json), written by `toolmux keys` and read by
// `toolmux serve` while it runs. What is kept of a key is its name, its
// groups, the SHA-256 of its secret and when it was made: never the
// secret, which is shown once when the key is made.
//
// The file is shared by processes: every writer takes an flock on a lock
// file beside it, reads the file afresh, changes it and replaces it by a
// rename, so two writers at once keep both their changes, and a reader
// (serve) sees the old file or the new, never half of one. It must be
// readable and writable by its owner only, and its owner must be the user
// reading it (or root): a file others could read would give away which
// keys exist, one others could write would let them add their own. A file
// that is not so, or that does not hold what a store holds, is refused
// naming it; it is never taken for a store without keys.
//
// No last-used time is kept: it would make serve a writer of the file the
// CLI writes, a rewrite of the whole store for a request; the task log
// records who called, and when.

// KeyNameMax is the length of the longest key (and group) name.
const KeyNameMax = 64

// keyFileVersion is the version of the file's format this package reads
// and writes.
const keyFileVersion = 1

// StoredKey is an API key as the store keeps it.
type StoredKey struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups,omitempty"`
	// SHA256 is the SHA-256 of the secret, in lowercase hex.
	SHA256  string    `json:"sha256"`
	Created time.Time `json:"created,omitzero"`
}

// keyFile is the file's content.
type keyFile struct {
	Version int         `json:"version"`
	Keys    []StoredKey `json:"keys"`
}

// KeyStore is the API keys kept in a file. Its methods read the file each
// time (the CLI's commands, one each), and StoreKeys follows it for a
// running gateway.
type KeyStore struct {
	path string
}

// NewKeyStore returns the store kept in the file at path, which need not
// exist yet (a store without keys).
func NewKeyStore(path string) *KeyStore { return &KeyStore{path: path} }

// Path is the store's file.
func (s *KeyStore) Path() string { return s.path }

// StoreProblem says what is wrong with a store's file.
type StoreProblem string

const (
	// StorePermissions: the file may be read or written by others than
	// its owner, or its owner is another user.
	StorePermissions StoreProblem = "permissions"
	// StoreCorrupt: the file does not hold a store: not its JSON, a
	// version this toolmux does not know, or a key that is malformed.
	StoreCorrupt StoreProblem = "corrupt"
	// StoreUnreadable: the file (or its directory) cannot be read or
	// written.
	StoreUnreadable StoreProblem = "unreadable"
)

// StoreError is a store whose file cannot be used. Its message names the
// file and says how to put it right.
type StoreError struct {
	Path    string
	Problem StoreProblem
	// Detail says what is wrong, in words.
	Detail string
	Err    error
}

func (e *StoreError) Error() string {
	msg := fmt.Sprintf("API key store %s: %s", e.Path, e.Detail)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *StoreError) Unwrap() error { return e.Err }

// KeyNameError is a key or group name that is not 1 to KeyNameMax
// letters, digits, '-', '_' or '.' (a group may also hold ':', '/' and
// '@', as the groups of an identity provider often do).
type KeyNameError struct {
	// What is "key" or "group".
	What string
	Name string
}

func (e *KeyNameError) Error() string {
	extra := ""
	if e.What == "group" {
		extra = ", ':', '/', '@'"
	}
	return fmt.Sprintf("%s name %q: want 1 to %d letters, digits, '-', '_', '.'%s", e.What, e.Name, KeyNameMax, extra)
}

// KeyExistsError is a key added under a name the store has already.
type KeyExistsError struct {
	Name    string
	Created time.Time
}

func (e *KeyExistsError) Error() string {
	return fmt.Sprintf("there is already an API key named %q", e.Name)
}

// KeyNotFoundError is a key the store does not have. Names are the keys
// it has, to suggest from.
type KeyNotFoundError struct {
	Name  string
	Names []string
}

func (e *KeyNotFoundError) Error() string {
	return fmt.Sprintf("no API key named %q", e.Name)
}

// CheckKeyName returns a *KeyNameError when name is no valid key name.
func CheckKeyName(name string) error {
	if !validName(name, "") {
		return &KeyNameError{What: "key", Name: name}
	}
	return nil
}

// CheckGroupName returns a *KeyNameError when name is no valid group name.
func CheckGroupName(name string) error {
	if !validName(name, ":/@") {
		return &KeyNameError{What: "group", Name: name}
	}
	return nil
}

func validName(s, extra string) bool {
	if s == "" || len(s) > KeyNameMax {
		return false
	}
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '_', r == '.':
		case strings.ContainsRune(extra, r):
		default:
			return false
		}
	}
	return true
}

// List returns the store's keys, by name.
func (s *KeyStore) List() ([]StoredKey, error) {
	kf, _, err := s.read()
	return kf.Keys, err
}

// Add makes a key named name in groups and returns its secret, which is
// kept nowhere: the caller shows it once. A key of that name is replaced
// when replace is set (its old secret stops working), else refused with a
// *KeyExistsError.
func (s *KeyStore) Add(name string, groups []string, replace bool) (secret string, replaced bool, err error) {
	if err := CheckKeyName(name); err != nil {
		return "", false, err
	}
	for _, g := range groups {
		if err := CheckGroupName(g); err != nil {
			return "", false, err
		}
	}
	groups = slices.Compact(slices.Sorted(slices.Values(groups)))
	err = s.update(func(kf *keyFile) error {
		i := slices.IndexFunc(kf.Keys, func(k StoredKey) bool { return k.Name == name })
		if i >= 0 && !replace {
			return &KeyExistsError{Name: name, Created: kf.Keys[i].Created}
		}
		secret = NewKeySecret()
		h := HashKey(secret)
		k := StoredKey{Name: name, Groups: groups, SHA256: hex.EncodeToString(h[:]), Created: time.Now().UTC().Truncate(time.Second)}
		if i >= 0 {
			kf.Keys[i], replaced = k, true
			return nil
		}
		kf.Keys = append(kf.Keys, k)
		slices.SortFunc(kf.Keys, func(a, b StoredKey) int { return strings.Compare(a.Name, b.Name) })
		return nil
	})
	if err != nil {
		return "", false, err
	}
	return secret, replaced, nil
}

// Revoke removes the key named name: it stops working at once for every
// process that reads the store afresh, and within StoreKeys's interval
// for a running gateway. A name the store does not have is a
// *KeyNotFoundError.
func (s *KeyStore) Revoke(name string) error {
	return s.update(func(kf *keyFile) error {
		i := slices.IndexFunc(kf.Keys, func(k StoredKey) bool { return k.Name == name })
		if i < 0 {
			names := make([]string, len(kf.Keys))
			for j, k := range kf.Keys {
				names[j] = k.Name
			}
			return &KeyNotFoundError{Name: name, Names: names}
		}
		kf.Keys = slices.Delete(kf.Keys, i, i+1)
		return nil
	})
}

// update changes the store with change under the store's lock: the file
// is read afresh, changed, and replaced in one rename. A change that
// returns an error writes nothing.
func (s *KeyStore) update(change func(*keyFile) error) error {
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return s.unreadable("cannot make its directory", err)
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	kf, _, err := s.read()
	if err != nil {
		return err
	}
	if err := change(&kf); err != nil {
		return err
	}
	return s.write(kf)
}

// lock takes the store's lock: an flock on a file beside it.
func (s *KeyStore) lock() (unlock func(), err error) {
	unlock, err = privfile.Lock(s.path + ".lock")
	if err != nil {
		return nil, s.unreadable("cannot lock it", err)
	}
	return unlock, nil
}

// write replaces the file with kf, whole, by rename.
func (s *KeyStore) write(kf keyFile) error {
	kf.Version = keyFileVersion
	if kf.Keys == nil {
		kf.Keys = []StoredKey{}
	}
	b, err := json.MarshalIndent(kf, "", "  ")
	if err != nil {
		return err
	}
	if err := privfile.Write(s.path, append(b, '\n')); err != nil {
		return s.unreadable("cannot write it", err)
	}
	return nil
}

func (s *KeyStore) unreadable(detail string, err error) error {
	return &StoreError{Path: s.path, Problem: StoreUnreadable, Detail: detail, Err: err}
}

func (s *KeyStore) corrupt(format string, args ...any) error {
	return &StoreError{Path: s.path, Problem: StoreCorrupt,
		Detail: "is not a key store (" + fmt.Sprintf(format, args...) + "); fix it, or move it away and add the keys again"}
}

// read reads the store: its keys (none when the file does not exist) and
// the stamp of the file read.
func (s *KeyStore) read() (keyFile, fileStamp, error) {
	var kf keyFile
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return kf, fileStamp{}, nil
	}
	if err != nil {
		return kf, fileStamp{}, s.unreadable("cannot read it", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return kf, fileStamp{}, s.unreadable("cannot read it", err)
	}
	st := stampOf(fi)
	if err := s.checkMode(fi); err != nil {
		return kf, st, err
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return kf, st, s.unreadable("cannot read it", err)
	}
	dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
	// Strict: a key with a misspelt field ("group") would otherwise be
	// read without it.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kf); err != nil {
		return keyFile{}, st, s.corrupt("%s", jsonProblem(buf.Bytes(), err))
	}
	if dec.More() {
		return keyFile{}, st, s.corrupt("something follows its JSON object")
	}
	if kf.Version != keyFileVersion {
		return keyFile{}, st, s.corrupt("version %d, where this toolmux reads version %d", kf.Version, keyFileVersion)
	}
	if err := s.check(kf.Keys); err != nil {
		return keyFile{}, st, err
	}
	return kf, st, nil
}

// checkMode refuses a file others may read or write, or that another
// user owns (who could add keys to it).
func (s *KeyStore) checkMode(fi fs.FileInfo) error {
	me, ok := errors.AsType[*privfile.ModeError](privfile.Check(s.path, fi))
	switch {
	case !ok:
		return nil
	case me.NotRegular:
		return &StoreError{Path: s.path, Problem: StoreCorrupt, Detail: "is not a regular file"}
	case me.Perm != 0:
		return &StoreError{Path: s.path, Problem: StorePermissions, Detail: fmt.Sprintf(
			"may be read or written by others (mode %04o): it must be its owner's only; run chmod 600 %s", me.Perm, s.path)}
	}
	return &StoreError{Path: s.path, Problem: StorePermissions, Detail: fmt.Sprintf(
		"belongs to another user (uid %d), who could add keys to it: it must be yours (uid %d)", me.UID, os.Getuid())}
}

// check refuses keys that are malformed or twice in the store.
func (s *KeyStore) check(keys []StoredKey) error {
	names := make(map[string]bool, len(keys))
	hashes := make(map[string]bool, len(keys))
	for i, k := range keys {
		if err := CheckKeyName(k.Name); err != nil {
			return s.corrupt("key %d: %v", i+1, err)
		}
		for _, g := range k.Groups {
			if err := CheckGroupName(g); err != nil {
				return s.corrupt("key %q: %v", k.Name, err)
			}
		}
		if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != sha256.Size || strings.ToLower(k.SHA256) != k.SHA256 {
			return s.corrupt("key %q: sha256 must be 64 lowercase hex digits", k.Name)
		}
		if names[k.Name] {
			return s.corrupt("two keys named %q", k.Name)
		}
		if hashes[k.SHA256] {
			return s.corrupt("key %q has the hash of another key", k.Name)
		}
		names[k.Name], hashes[k.SHA256] = true, true
	}
	return nil
}

// jsonProblem says where the JSON of b went wrong: line and column for a
// syntax or type error.
func jsonProblem(b []byte, err error) string {
	// The decoder's offsets are just after the byte, or the value, it
	// stumbled on: the position said is of that byte, the value's last.
	var off int64 = -1
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		off = se.Offset - 1
	} else if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		off = te.Offset - 1
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "empty, or its JSON ends too soon"
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if off < 0 || off > int64(len(b)) {
		return msg
	}
	line := 1 + bytes.Count(b[:off], []byte("\n"))
	col := int(off) - bytes.LastIndexByte(b[:off], '\n')
	return fmt.Sprintf("line %d, column %d: %s", line, col, msg)
}

// keys returns the file's keys as a verifier verifies them.
func (kf keyFile) keys() []Key {
	out := make([]Key, 0, len(kf.Keys))
	for _, k := range kf.Keys {
		key := Key{Name: k.Name, Groups: k.Groups}
		hex.Decode(key.Hash[:], []byte(k.SHA256)) //nolint:errcheck // checked when read
		out = append(out, key)
	}
	return out
}

// fileStamp is what tells one version of the store's file from another:
// every write replaces the file by a rename (a new inode); an edit in
// place changes its size or modification time; a chmod its mode.
type fileStamp struct {
	// failed: the file could not even be looked at (its directory
	// unreadable, say); no file's stamp is that.
	failed   bool
	exists   bool
	dev, ino uint64
	size     int64
	mtime    int64
	mode     fs.FileMode
	uid      uint32
}

func stampOf(fi fs.FileInfo) fileStamp {
	st := fileStamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: fi.Mode()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino, st.uid = uint64(sys.Dev), sys.Ino, sys.Uid
	}
	return st
}

// DefaultKeyRecheck is how often at most a running gateway looks whether
// its key store's file changed: a key revoked stops working within it.
const DefaultKeyRecheck = time.Second

// FollowOptions configure how StoreKeys follows the file.
type FollowOptions struct {
	// Every is how often at most the file is looked at; 0 means
	// DefaultKeyRecheck.
	Every time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnChange is told when the keys read from the file change: how
	// many there are now, or why the file cannot be used (the keys are
	// then refused until it can). It is called on the request that
	// looked, one call at a time.
	OnChange func(keys int, err error)
}

// StoreKeys verifies the keys of a store while a gateway runs, following
// its file: a key added or revoked by another process (toolmux keys) is
// seen within FollowOptions.Every.
//
// On verification, at most once per Every, the file's metadata are looked
// at (one stat), and the file read again only when it changed. Looking
// when asked, rather than watching the directory (fsnotify), bounds the
// delay by construction, whatever the filesystem (inotify does not see
// the changes of another machine on a network filesystem, and its events
// can be lost when its queue overflows), needs no goroutine to start and
// stop, and costs nothing while no request comes; the cost is one stat a
// second under load.
type StoreKeys struct {
	store    *KeyStore
	keys     *Keys
	every    int64
	now      func() time.Time
	onChange func(int, error)

	// next is when (Unix nanoseconds) the file is next looked at; the
	// request that moves it on looks, the others go on with the keys
	// they have.
	next atomic.Int64
	// broken is why the file cannot be used now; nil when it can.
	broken atomic.Pointer[StoreError]

	mu    sync.Mutex // one look at a time; guards stamp
	stamp fileStamp
}

// Follow reads the store and returns its verifier. A file that cannot be
// used is refused now (a *StoreError naming it); later, while following,
// such a file makes every key refused (KindUnavailable) until it is put
// right.
func (s *KeyStore) Follow(o FollowOptions) (*StoreKeys, error) {
	if o.Every <= 0 {
		o.Every = DefaultKeyRecheck
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	kf, st, err := s.read()
	if err != nil {
		return nil, err
	}
	k := &StoreKeys{store: s, keys: NewKeys(kf.keys()...), every: int64(o.Every), now: o.Now, onChange: o.OnChange, stamp: st}
	k.next.Store(o.Now().UnixNano() + k.every)
	return k, nil
}

// Verify implements Verifier: the caller of a key of the store as the
// file was at most Every ago.
func (k *StoreKeys) Verify(ctx context.Context, token string) (*Caller, error) {
	k.refresh()
	if k.broken.Load() != nil {
		if strings.HasPrefix(token, KeyPrefix) {
			// The path and the problem are the operator's to read
			// (OnChange), not the client's.
			return nil, &Error{Kind: KindUnavailable, Message: "the gateway's API keys cannot be checked now (its key store cannot be read; its log says why)"}
		}
		return nil, ErrNotMine
	}
	return k.keys.Verify(ctx, token)
}

// Len returns how many keys the store has, as the file was at most Every
// ago; 0 while it cannot be used.
func (k *StoreKeys) Len() int {
	k.refresh()
	return k.keys.Len()
}

// Err returns why the store's file cannot be used now, as it was at most
// Every ago; nil when it can.
func (k *StoreKeys) Err() error {
	k.refresh()
	if e := k.broken.Load(); e != nil {
		return e
	}
	return nil
}

// Path is the store's file.
func (k *StoreKeys) Path() string { return k.store.path }

// refresh looks at the file when Every has passed since the last look.
func (k *StoreKeys) refresh() {
	now := k.now().UnixNano()
	next := k.next.Load()
	if now < next || !k.next.CompareAndSwap(next, now+k.every) {
		return
	}
	k.look()
}

// look reads the file again if it changed since it was last read.
func (k *StoreKeys) look() {
	k.mu.Lock()
	defer k.mu.Unlock()
	var st fileStamp
	fi, err := os.Stat(k.store.path)
	switch {
	case err == nil:
		st = stampOf(fi)
	case !errors.Is(err, fs.ErrNotExist):
		k.fail(fileStamp{failed: true}, k.store.unreadable("cannot read it", err))
		return
	}
	if st == k.stamp {
		return
	}
	kf, st, err := k.store.read()
	if err != nil {
		k.fail(st, err)
		return
	}
	k.stamp = st
	k.keys.Set(kf.keys())
	k.broken.Store(nil)
	if k.onChange != nil {
		k.onChange(len(kf.Keys), nil)
	}
}

// fail records that the file, as of st, cannot be used: every key is
// refused until it changes.
func (k *StoreKeys) fail(st fileStamp, err error) {
	k.stamp = st
	k.keys.Set(nil)
	se, ok := errors.AsType[*StoreError](err)
	if !ok {
		se = k.store.unreadable("cannot read it", err).(*StoreError)
	}
	prev := k.broken.Swap(se)
	// Said once, not at every look while it lasts.
	if k.onChange != nil && (prev == nil || prev.Error() != se.Error()) {
		k.onChange(0, se)
	}
}
