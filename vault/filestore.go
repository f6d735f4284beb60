package vault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/toolmux/toolmux/internal/privfile"
)

// FileStore keeps the vault in a directory (DATA_DIR/vault): one file per
// owner, named by the SHA-256 of the owner (an owner is an issuer's URL
// and a subject, which no file name can hold as it is), holding the
// owner's sealed entries as JSON.
//
// The directory is shared by the processes of a machine (a gateway, the
// CLI), as the API key store is: every writer takes an flock on a lock
// file in it, reads the owner's file afresh, changes it and replaces it by
// a rename, so that two writers at once keep both their changes, and a
// reader sees the old file or the new, never half of one. Files are the
// user's own (0600, in a directory of 0700): one that others could read
// or write is refused, naming it; so is one that does not hold what a
// vault file holds, which is never taken for an owner without entries.
type FileStore struct {
	dir string
	now func() time.Time
}

// NewFileStore returns the store kept in dir, which need not exist yet.
func NewFileStore(dir string) *FileStore { return &FileStore{dir: dir, now: time.Now} }

// Dir is the store's directory.
func (s *FileStore) Dir() string { return s.dir }

// String names the store for people.
func (s *FileStore) String() string { return s.dir }

var _ Store = (*FileStore)(nil)

// fileVersion is the version of the files' format this package reads and
// writes.
const fileVersion = 1

// ownerFile is an owner's file.
type ownerFile struct {
	Version int         `json:"version"`
	Owner   string      `json:"owner"`
	Entries []fileEntry `json:"entries"`
}

type fileEntry struct {
	Name string `json:"name"`
	// Sealed is the sealed value (base64 in the JSON).
	Sealed  []byte    `json:"sealed"`
	Updated time.Time `json:"updated,omitzero"`
}

// ownerFileName is the file of owner in the directory.
func ownerFileName(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(h[:]) + ".json"
}

func (s *FileStore) path(owner string) string { return filepath.Join(s.dir, ownerFileName(owner)) }

// Get implements Store.
func (s *FileStore) Get(ctx context.Context, owner, name string) (Entry, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, err
	}
	of, err := s.read(s.path(owner), owner)
	if err != nil {
		return Entry{}, err
	}
	i, ok := of.find(name)
	if !ok {
		return Entry{}, NotFound(owner, name)
	}
	return of.Entries[i].entry(), nil
}

// List implements Store.
func (s *FileStore) List(ctx context.Context, owner string) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	of, err := s.read(s.path(owner), owner)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(of.Entries))
	for i, e := range of.Entries {
		out[i] = e.entry()
	}
	return out, nil
}

// Owners implements Store: the owners of the files of the directory.
func (s *FileStore) Owners(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	des, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, s.failed(s.dir, "cannot be read", err)
	}
	var owners []string
	for _, de := range des {
		if !isOwnerFileName(de.Name()) {
			continue // the lock file, a write's temporary file
		}
		of, err := s.read(filepath.Join(s.dir, de.Name()), "")
		if err != nil {
			return nil, err
		}
		if len(of.Entries) > 0 {
			owners = append(owners, of.Owner)
		}
	}
	slices.Sort(owners)
	return owners, nil
}

func isOwnerFileName(n string) bool {
	h, ok := strings.CutSuffix(n, ".json")
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

// Update implements Store: under the directory's lock, so change sees the
// entry as it is and nothing changes it before the write.
func (s *FileStore) Update(ctx context.Context, owner, name string, maxEntries int, change func(*Entry) ([]byte, error)) error {
	return s.update(ctx, owner, func(of *ownerFile) (bool, error) {
		i, found := of.find(name)
		var cur *Entry
		if found {
			e := of.Entries[i].entry()
			cur = &e
		}
		sealed, err := change(cur)
		if err != nil || sealed == nil {
			return false, err
		}
		fe := fileEntry{Name: name, Sealed: sealed, Updated: s.now().UTC().Truncate(time.Millisecond)}
		if found {
			of.Entries[i] = fe
			return true, nil
		}
		if len(of.Entries) >= maxEntries {
			return false, TooMany(owner, name, maxEntries)
		}
		of.Entries = slices.Insert(of.Entries, i, fe)
		return true, nil
	})
}

// Delete implements Store. The owner's last entry removes its file.
func (s *FileStore) Delete(ctx context.Context, owner, name string) error {
	return s.update(ctx, owner, func(of *ownerFile) (bool, error) {
		i, found := of.find(name)
		if !found {
			return false, NotFound(owner, name)
		}
		of.Entries = slices.Delete(of.Entries, i, i+1)
		return true, nil
	})
}

// update changes the owner's file with change under the directory's
// lock: the file is read afresh, changed, and replaced in one rename (or
// removed, left without entries). A change that returns false or an
// error writes nothing.
func (s *FileStore) update(ctx context.Context, owner string, change func(*ownerFile) (bool, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return s.failed(s.dir, "cannot be made", err)
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	path := s.path(owner)
	of, err := s.read(path, owner)
	if err != nil {
		return err
	}
	changed, err := change(&of)
	if err != nil || !changed {
		return err
	}
	if len(of.Entries) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return s.failed(path, "cannot be removed", err)
		}
		privfile.SyncDir(s.dir)
		return nil
	}
	return s.write(path, of)
}

// lock takes the directory's lock: an flock on a file of its own (the
// owners' files are replaced by every write, so a lock on one would lock
// a file the next writer no longer opens).
func (s *FileStore) lock() (unlock func(), err error) {
	path := filepath.Join(s.dir, ".lock")
	unlock, err = privfile.Lock(path)
	if err != nil {
		return nil, s.failed(path, "cannot be locked", err)
	}
	return unlock, nil
}

// write replaces the file at path with of, by a rename (privfile.Replace).
func (s *FileStore) write(path string, of ownerFile) error {
	of.Version = fileVersion
	b, err := json.MarshalIndent(of, "", "  ")
	if err != nil {
		return err
	}
	if err := privfile.Replace(path, ".vault-*.tmp", append(b, '\n')); err != nil {
		return s.failed(path, "cannot be written", err)
	}
	return nil
}

// read reads the file at path, of owner ("": whichever it names, checked
// against its name); no file is an owner without entries.
func (s *FileStore) read(path, owner string) (ownerFile, error) {
	of := ownerFile{Version: fileVersion, Owner: owner}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return of, nil
	}
	if err != nil {
		return of, s.failed(path, "cannot be read", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return of, s.failed(path, "cannot be read", err)
	}
	if err := privfile.Check(path, fi); err != nil {
		return of, &Error{Kind: KindStore, Owner: owner, Message: err.Error()}
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return of, s.failed(path, "cannot be read", err)
	}
	got, err := decodeOwnerFile(buf.Bytes())
	if err != nil {
		return of, &Error{Kind: KindCorrupt, Owner: owner, Message: fmt.Sprintf(
			"vault file %s is not one (%v): move it away (its entries are lost) or put it back as it was", path, err)}
	}
	if filepath.Base(path) != ownerFileName(got.Owner) || (owner != "" && got.Owner != owner) {
		return of, &Error{Kind: KindCorrupt, Owner: owner, Message: fmt.Sprintf(
			"vault file %s holds the entries of another owner than its name says: it was renamed or copied; move it away", path)}
	}
	return got, nil
}

// decodeOwnerFile reads the content of an owner's file: strictly (a field
// misspelt is an error, not a field left out), every name valid, once
// each, in order.
func decodeOwnerFile(b []byte) (ownerFile, error) {
	var of ownerFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&of); err != nil {
		return ownerFile{}, fmt.Errorf("its JSON: %w", err)
	}
	if dec.More() {
		return ownerFile{}, errors.New("something follows its JSON object")
	}
	if of.Version != fileVersion {
		return ownerFile{}, fmt.Errorf("version %d, where this toolmux reads version %d", of.Version, fileVersion)
	}
	if err := CheckOwner(of.Owner); err != nil {
		return ownerFile{}, err
	}
	for i, e := range of.Entries {
		if err := CheckName(e.Name); err != nil {
			return ownerFile{}, fmt.Errorf("entry %d: %w", i+1, err)
		}
		if len(e.Sealed) == 0 {
			return ownerFile{}, fmt.Errorf("entry %q has no sealed value", e.Name)
		}
		if i > 0 && of.Entries[i-1].Name >= e.Name {
			return ownerFile{}, fmt.Errorf("entry %q is out of order, or twice", e.Name)
		}
	}
	return of, nil
}

// find returns where name is in the file's entries, or where it would go.
func (of *ownerFile) find(name string) (int, bool) {
	return slices.BinarySearchFunc(of.Entries, name, func(e fileEntry, n string) int { return strings.Compare(e.Name, n) })
}

func (e fileEntry) entry() Entry { return Entry{Name: e.Name, Sealed: e.Sealed, Updated: e.Updated} }

func (s *FileStore) failed(path, detail string, err error) error {
	return &Error{Kind: KindStore, Message: path + " " + detail, Err: err}
}
