package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/privfile"
	"github.com/toolmux/toolmux/tasklog/jsjournal"
)

// A fleet's members (docs/fleet.md, "Members"): the workers and the
// submitters that connect to the fleet's NATS server with nkeys of their
// own, each held to what its role may do there, instead of one token
// shared by everyone. The gateway keeps them in a file of its data
// directory (MemberStore, written by toolmux fleet add and remove), gives
// them to its NATS server (the users' public keys and permissions, a
// change applied without a restart) and publishes them on the fleet's
// members bucket, where a worker finds who submitted a run: its name and
// groups, the caller whose policy the run is held to.
//
// What is kept of a member is its public key, never a seed: a seed is
// made where the member runs (toolmux fleet nkey) or shown once when
// toolmux fleet add makes it.

// Role is what a member may do on the fleet's NATS server.
type Role string

// The roles of members.
const (
	// RoleWorker takes runs from the queue and runs them: it cannot
	// submit one, nor change the fleet's streams.
	RoleWorker Role = "worker"
	// RoleSubmitter submits runs as itself and reads its own runs'
	// states and events, nobody else's.
	RoleSubmitter Role = "submitter"
	// RoleGateway may do everything: a gateway (serve --nats) of a fleet
	// on an external NATS server.
	RoleGateway Role = "gateway"
)

// Roles are the roles a member may have.
var Roles = []Role{RoleWorker, RoleSubmitter, RoleGateway}

// Member is a member of the fleet with credentials of its own.
type Member struct {
	// Name names the member: the caller of a submitter's runs (the API
	// key of that name, identity.KeySubject), a worker's name.
	Name string `json:"name"`
	Role Role   `json:"role"`
	// Groups are a submitter's groups: its runs' policy, approval modes
	// and tools are its groups' (docs/identity.md).
	Groups []string `json:"groups,omitempty"`
	// NKey is the member's public nkey (a user key, U…).
	NKey    string    `json:"nkey"`
	Created time.Time `json:"created,omitzero"`
}

// Caller is the caller a submitter's runs are run for: the caller of the
// API key of the member's name, in the member's groups.
func (m *Member) Caller() *identity.Caller {
	return &identity.Caller{Subject: identity.KeySubject(m.Name), Name: m.Name, Groups: slices.Clone(m.Groups), Method: identity.MethodNKey}
}

// MemberNameMax is the length of the longest member name.
const MemberNameMax = 64

// CheckMember returns an error naming what is wrong with m: a name that
// is not 1 to MemberNameMax letters, digits, '-' and '_', an unknown role,
// a bad group, or a key that is not a public user nkey.
func CheckMember(m Member) error {
	if len(m.Name) > MemberNameMax || !validToken(m.Name) {
		return &MemberError{Name: m.Name, Reason: fmt.Sprintf("a member's name is 1 to %d letters, digits, '-' and '_'", MemberNameMax)}
	}
	if !slices.Contains(Roles, m.Role) {
		return &MemberError{Name: m.Name, Reason: fmt.Sprintf("role %q: want worker, submitter or gateway", m.Role)}
	}
	for _, g := range m.Groups {
		if err := identity.CheckGroupName(g); err != nil {
			return &MemberError{Name: m.Name, Reason: err.Error()}
		}
	}
	if !nkeys.IsValidPublicUserKey(m.NKey) {
		return &MemberError{Name: m.Name, Reason: fmt.Sprintf("%q is not a public user nkey (U followed by 55 letters and digits)", m.NKey)}
	}
	return nil
}

// MemberError is a member that cannot be: a bad name, role, group or key.
type MemberError struct {
	Name, Reason string
}

func (e *MemberError) Error() string { return fmt.Sprintf("fleet member %q: %s", e.Name, e.Reason) }

// MemberExistsError is a member added under a name, or with a key, that
// another member has.
type MemberExistsError struct {
	Name string
	// Other is the member of that key, when the key is what is taken.
	Other string
}

func (e *MemberExistsError) Error() string {
	if e.Other != "" {
		return fmt.Sprintf("fleet member %q: its nkey is member %q's already", e.Name, e.Other)
	}
	return fmt.Sprintf("there is already a fleet member named %q", e.Name)
}

// MemberNotFoundError is a member the store does not have; Names are the
// members it has.
type MemberNotFoundError struct {
	Name  string
	Names []string
}

func (e *MemberNotFoundError) Error() string { return fmt.Sprintf("no fleet member named %q", e.Name) }

// MemberStoreError is a members' file that cannot be used: not the
// owner's only, not a members' file, not readable.
type MemberStoreError struct {
	Path   string
	Detail string
	Err    error
}

func (e *MemberStoreError) Error() string {
	msg := fmt.Sprintf("fleet members %s: %s", e.Path, e.Detail)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *MemberStoreError) Unwrap() error { return e.Err }

// memberFileVersion is the version of the file's format.
const memberFileVersion = 1

type memberFile struct {
	Version int      `json:"version"`
	Members []Member `json:"members"`
}

// MemberStore is a fleet's members kept in a file (DATA_DIR/fleet/
// members.json): JSON, the owner's only (mode 0600), written whole by
// rename under an flock, so that two commands at once keep both changes
// and the gateway reading it sees the old file or the new. A file that is
// not a members' file, or that others may read or write (they could add
// themselves), is refused naming it, never taken for a fleet without
// members.
type MemberStore struct{ path string }

// NewMemberStore returns the store of the file at path, which need not
// exist (a fleet without members).
func NewMemberStore(path string) *MemberStore { return &MemberStore{path: path} }

// Path is the store's file.
func (s *MemberStore) Path() string { return s.path }

// List returns the members, by name.
func (s *MemberStore) List() ([]Member, error) {
	mf, _, err := s.read()
	return mf.Members, err
}

// Add adds m (Created set now). A member of that name is replaced when
// replace is set (its old key stops working), else refused with a
// *MemberExistsError, as is a key another member has.
func (s *MemberStore) Add(m Member, replace bool) (replaced bool, err error) {
	m.Groups = slices.Compact(slices.Sorted(slices.Values(m.Groups)))
	if err := CheckMember(m); err != nil {
		return false, err
	}
	m.Created = time.Now().UTC().Truncate(time.Second)
	err = s.update(func(mf *memberFile) error {
		i := slices.IndexFunc(mf.Members, func(o Member) bool { return o.Name == m.Name })
		if i >= 0 && !replace {
			return &MemberExistsError{Name: m.Name}
		}
		if j := slices.IndexFunc(mf.Members, func(o Member) bool { return o.NKey == m.NKey }); j >= 0 && j != i {
			return &MemberExistsError{Name: m.Name, Other: mf.Members[j].Name}
		}
		if i >= 0 {
			mf.Members[i], replaced = m, true
			return nil
		}
		mf.Members = append(mf.Members, m)
		slices.SortFunc(mf.Members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
		return nil
	})
	return replaced, err
}

// Remove removes the member named name: its connections are closed and
// its key refused once the gateway has read the file again. A name the
// store does not have is a *MemberNotFoundError.
func (s *MemberStore) Remove(name string) error {
	return s.update(func(mf *memberFile) error {
		i := slices.IndexFunc(mf.Members, func(o Member) bool { return o.Name == name })
		if i < 0 {
			names := make([]string, len(mf.Members))
			for j, o := range mf.Members {
				names[j] = o.Name
			}
			return &MemberNotFoundError{Name: name, Names: names}
		}
		mf.Members = slices.Delete(mf.Members, i, i+1)
		return nil
	})
}

func (s *MemberStore) update(change func(*memberFile) error) error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return s.fail("cannot make its directory", err)
	}
	unlock, err := privfile.Lock(s.path + ".lock")
	if err != nil {
		return s.fail("cannot lock it", err)
	}
	defer unlock()
	mf, _, err := s.read()
	if err != nil {
		return err
	}
	if err := change(&mf); err != nil {
		return err
	}
	mf.Version = memberFileVersion
	if mf.Members == nil {
		mf.Members = []Member{}
	}
	b, _ := json.MarshalIndent(mf, "", "  ")
	if err := privfile.Write(s.path, append(b, '\n')); err != nil {
		return s.fail("cannot write it", err)
	}
	return nil
}

func (s *MemberStore) fail(detail string, err error) error {
	return &MemberStoreError{Path: s.path, Detail: detail, Err: err}
}

// read reads the file: no file is a fleet without members.
func (s *MemberStore) read() (memberFile, stamp, error) {
	var mf memberFile
	b, fi, err := readPrivate(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return mf, stamp{}, nil
	case err != nil:
		var me *privfile.ModeError
		if errors.As(err, &me) {
			return mf, stampOf(fi), s.fail("others could add themselves to the fleet", err)
		}
		return mf, stamp{}, s.fail("cannot read it", err)
	}
	st := stampOf(fi)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&mf); err != nil {
		return memberFile{}, st, s.fail("is not a members' file", err)
	}
	if mf.Version != memberFileVersion {
		return memberFile{}, st, s.fail(fmt.Sprintf("is version %d, where this toolmux reads version %d", mf.Version, memberFileVersion), nil)
	}
	names, keys := map[string]bool{}, map[string]bool{}
	for _, m := range mf.Members {
		if err := CheckMember(m); err != nil {
			return memberFile{}, st, s.fail("is not a members' file", err)
		}
		if names[m.Name] || keys[m.NKey] {
			return memberFile{}, st, s.fail(fmt.Sprintf("names member %q, or its key, twice", m.Name), nil)
		}
		names[m.Name], keys[m.NKey] = true, true
	}
	return mf, st, nil
}

// readPrivate reads a file that must be its owner's only, and its info.
func readPrivate(path string) ([]byte, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if err := privfile.Check(path, fi); err != nil {
		return nil, fi, err
	}
	var buf bytes.Buffer
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), fi, err
}

// stamp tells one version of a file from another: every write replaces
// it by a rename (a new inode); an edit in place changes its size or
// time; a chmod its mode.
type stamp struct {
	// again: not a file's; the next look reads the file whatever it is.
	again  bool
	exists bool
	ino    uint64
	size   int64
	mtime  int64
	mode   fs.FileMode
}

func stampOf(fi fs.FileInfo) stamp {
	if fi == nil {
		return stamp{}
	}
	st := stamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: fi.Mode()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}

// Follow calls fn with the members now, and again each time the file
// changes (looked at every every, one stat), until ctx ends. A file that
// cannot be used is told as an error, once while it lasts. fn returns
// whether to be called again at the next look even if the file does not
// change (it could not apply the members: the fleet's server was away).
func (s *MemberStore) Follow(ctx context.Context, every time.Duration, fn func([]Member, error) (again bool)) {
	look := func() stamp {
		mf, st, err := s.read()
		if fn(mf.Members, err) {
			return stamp{again: true} // equal to no file's
		}
		return st
	}
	last := look()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var now stamp
		if fi, err := os.Stat(s.path); err == nil {
			now = stampOf(fi)
		}
		if now != last {
			last = look()
		}
	}
}

// validToken: a name that is one subject token, not one of the
// encoded tokens of jsjournal.Token (which begin with '_').
func validToken(s string) bool { return s != "" && s[0] != '_' && jsjournal.ValidToken(s) }

// The members bucket (PREFIX_MEMBERS): each member by its public key, as
// the gateway's store has it (PublishMembers), for the workers to find
// who submitted a run, and a member its own name (Self). Only the gateway
// may write it.

// NotMemberError is a key of no member of the fleet, or of a member that
// is not a submitter, for a run on its subject (a member removed since
// it submitted, say).
type NotMemberError struct {
	Key string
	// Name and Role are the member's, when there is one of another role.
	Name string
	Role Role
}

func (e *NotMemberError) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("the run's submitter, fleet member %s, is a %s, not a submitter", e.Name, e.Role)
	}
	return fmt.Sprintf("the run's submitter (nkey %s) is not a member of the fleet (any more): its runs are refused "+
		"until the fleet's gateway registers it (toolmux fleet add NAME --role submitter --nkey %s)", e.Key, e.Key)
}

// Member returns the member of public key key, or a *NotMemberError.
func (f *Fleet) Member(ctx context.Context, key string) (*Member, error) {
	e, err := f.members.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, &NotMemberError{Key: key}
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: reading member %s: %w", key, err)
	}
	var m Member
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		return nil, fmt.Errorf("fleet: member entry %s: %w", key, err)
	}
	return &m, nil
}

// Self is this member's own entry, for a member with credentials of its
// own: what the fleet's gateway registered it as.
func (f *Fleet) Self(ctx context.Context) (*Member, error) {
	if f.opts.Member == nil {
		return nil, &ConfigError{Field: "member", Reason: "this connection has no credentials of a member's"}
	}
	m, err := f.Member(ctx, f.opts.Member.Key)
	var nm *NotMemberError
	if errors.As(err, &nm) {
		// Its key let it in, so the gateway's store has it: the bucket
		// is written just after.
		return nil, &NotSetUpError{What: "the members' entry of nkey " + f.opts.Member.Key}
	}
	return m, err
}

// Members returns the fleet's members by public key.
func (f *Fleet) Members(ctx context.Context) (map[string]Member, error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	out := map[string]Member{}
	err := readAll(ctx, f.members, ">", "members", func(e jetstream.KeyValueEntry) error {
		var m Member
		if json.Unmarshal(e.Value(), &m) == nil {
			out[e.Key()] = m
		}
		return nil
	})
	return out, err
}

// PublishMembers makes the members bucket hold members, and no one else:
// the gateway's store, for the workers. A member added is written before
// the server lets it in, a member removed deleted after it is shut out
// (the caller orders the two).
func (f *Fleet) PublishMembers(ctx context.Context, members []Member) error {
	have, err := f.Members(ctx)
	if err != nil {
		return err
	}
	for _, m := range members {
		m.Created = time.Time{}
		b, _ := json.Marshal(m)
		if old, ok := have[m.NKey]; ok {
			delete(have, m.NKey)
			if ob, _ := json.Marshal(old); bytes.Equal(ob, b) {
				continue
			}
		}
		if _, err := f.members.Put(ctx, m.NKey, b); err != nil {
			return fmt.Errorf("fleet: publishing member %s: %w", m.Name, err)
		}
	}
	for key := range have {
		if err := f.members.Delete(ctx, key); err != nil {
			return fmt.Errorf("fleet: removing member %s: %w", key, err)
		}
	}
	return nil
}
