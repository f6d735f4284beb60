package identity_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/identity"
)

func newStore(t *testing.T) *identity.KeyStore {
	t.Helper()
	return identity.NewKeyStore(filepath.Join(t.TempDir(), "data", "keys.json"))
}

// A key is added (its groups sorted, once each), listed without its
// secret, verified, refused when added again, replaced on request (the
// old secret then fails), and revoked; the file is its owner's only and
// holds no secret.
func TestKeyStore(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if keys, err := s.List(); err != nil || len(keys) != 0 {
		t.Fatalf("no file yet: %v %v", keys, err)
	}
	ci, replaced, err := s.Add("ci", []string{"ops", "dev", "ops"}, false)
	if err != nil || replaced || !strings.HasPrefix(ci, identity.KeyPrefix) {
		t.Fatalf("add: %q %v %v", ci, replaced, err)
	}
	bot, _, err := s.Add("a.bot_1-x", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := s.List()
	if err != nil || len(keys) != 2 || keys[0].Name != "a.bot_1-x" || keys[1].Name != "ci" ||
		!slices.Equal(keys[1].Groups, []string{"dev", "ops"}) || keys[1].Created.IsZero() {
		t.Fatalf("list: %+v %v", keys, err)
	}
	fi, err := os.Stat(s.Path())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file's mode: %v %v", fi.Mode(), err)
	}
	b, _ := os.ReadFile(s.Path())
	h := identity.HashKey(ci)
	if strings.Contains(string(b), ci) || strings.Contains(string(b), bot) || !strings.Contains(string(b), fmt.Sprintf("%x", h)) {
		t.Fatalf("the file holds a secret, or not the hash:\n%s", b)
	}
	if _, _, err := s.Add("ci", nil, false); !errors.As(err, new(*identity.KeyExistsError)) {
		t.Fatalf("added twice: %v", err)
	}
	if _, _, err := s.Add("bad name", nil, false); !errors.As(err, new(*identity.KeyNameError)) {
		t.Fatalf("a bad name: %v", err)
	}
	if _, _, err := s.Add(strings.Repeat("k", identity.KeyNameMax+1), nil, false); !errors.As(err, new(*identity.KeyNameError)) {
		t.Fatalf("a name one longer than the longest: %v", err)
	}
	if _, _, err := s.Add(strings.Repeat("k", identity.KeyNameMax), []string{"team:a/b@c"}, false); err != nil {
		t.Fatalf("the longest name, a group of an identity provider's form: %v", err)
	}
	if _, _, err := s.Add("g", []string{"no spaces"}, false); !errors.As(err, new(*identity.KeyNameError)) {
		t.Fatalf("a bad group: %v", err)
	}
	ci2, replaced, err := s.Add("ci", []string{"dev"}, true)
	if err != nil || !replaced || ci2 == ci {
		t.Fatalf("replace: %v %v", replaced, err)
	}
	v, err := s.Follow(identity.FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := v.Verify(ctx, ci2); err != nil || c.Name != "ci" || !c.In("dev") || c.In("ops") {
		t.Fatalf("the new key: %+v %v", c, err)
	}
	if _, err := v.Verify(ctx, ci); identity.KindOf(err) != identity.KindInvalid {
		t.Fatalf("the replaced key: %v", err)
	}
	var nf *identity.KeyNotFoundError
	if err := s.Revoke("cj"); !errors.As(err, &nf) || !slices.Contains(nf.Names, "ci") {
		t.Fatalf("revoke an unknown key: %v", err)
	}
	if err := s.Revoke("ci"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.List(); slices.ContainsFunc(keys, func(k identity.StoredKey) bool { return k.Name == "ci" }) {
		t.Fatalf("revoked, still listed: %+v", keys)
	}
}

// A file that does not hold a store is refused by every use, naming the
// file and where it went wrong, and left as it was: never taken for a
// store without keys.
func TestKeyStoreRefusesCorruptFile(t *testing.T) {
	good := fmt.Sprintf("%x", identity.HashKey("x"))
	for name, content := range map[string]string{
		"empty":         "",
		"not json":      "keys:\n  - ci\n",
		"truncated":     `{"version": 1, "keys": [`,
		"syntax":        "{\"version\": 1,\n \"keys\": [}\n",
		"trailing":      `{"version": 1, "keys": []} {}`,
		"unknown field": `{"version": 1, "keys": [{"name": "ci", "group": ["dev"], "sha256": "` + good + `"}]}`,
		"version":       `{"version": 2, "keys": []}`,
		"no version":    `{"keys": []}`,
		"bad name":      `{"version": 1, "keys": [{"name": "c i", "sha256": "` + good + `"}]}`,
		"bad group":     `{"version": 1, "keys": [{"name": "ci", "groups": [""], "sha256": "` + good + `"}]}`,
		"short hash":    `{"version": 1, "keys": [{"name": "ci", "sha256": "abc"}]}`,
		"upper hash":    `{"version": 1, "keys": [{"name": "ci", "sha256": "` + strings.ToUpper(good) + `"}]}`,
		"no hash":       `{"version": 1, "keys": [{"name": "ci"}]}`,
		"twice":         `{"version": 1, "keys": [{"name": "ci", "sha256": "` + good + `"}, {"name": "ci", "sha256": "` + strings.Repeat("0", 64) + `"}]}`,
		"same hash":     `{"version": 1, "keys": [{"name": "a", "sha256": "` + good + `"}, {"name": "b", "sha256": "` + good + `"}]}`,
		"wrong type":    `{"version": 1, "keys": {"name": "ci"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			if err := os.MkdirAll(filepath.Dir(s.Path()), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.Path(), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			check := func(what string, err error) {
				t.Helper()
				var se *identity.StoreError
				if !errors.As(err, &se) || se.Problem != identity.StoreCorrupt || se.Path != s.Path() || !strings.Contains(err.Error(), s.Path()) {
					t.Errorf("%s: %v", what, err)
				}
			}
			_, err := s.List()
			check("list", err)
			_, _, err = s.Add("other", nil, false)
			check("add", err)
			check("revoke", s.Revoke("ci"))
			_, err = s.Follow(identity.FollowOptions{})
			check("follow", err)
			if b, _ := os.ReadFile(s.Path()); string(b) != content {
				t.Errorf("the file was changed: %q", b)
			}
		})
	}
	// Where the JSON went wrong is said.
	s := newStore(t)
	_ = os.MkdirAll(filepath.Dir(s.Path()), 0o700)
	_ = os.WriteFile(s.Path(), []byte("{\"version\": 1,\n \"keys\": [}\n"), 0o600)
	if _, err := s.List(); err == nil || !strings.Contains(err.Error(), "line 2, column 11") {
		t.Errorf("no position: %v", err)
	}
}

// A file others may read or write, or another user's, is refused naming
// it and saying how to put it right.
func TestKeyStoreRefusesPermissions(t *testing.T) {
	s := newStore(t)
	if _, _, err := s.Add("ci", nil, false); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o620, 0o644, 0o666} {
		if err := os.Chmod(s.Path(), mode); err != nil {
			t.Fatal(err)
		}
		var se *identity.StoreError
		_, err := s.List()
		if !errors.As(err, &se) || se.Problem != identity.StorePermissions || !strings.Contains(err.Error(), "chmod 600 "+s.Path()) {
			t.Errorf("mode %04o: %v", mode, err)
		}
		if _, err := s.Follow(identity.FollowOptions{}); !errors.As(err, &se) || se.Problem != identity.StorePermissions {
			t.Errorf("mode %04o, follow: %v", mode, err)
		}
		if _, _, err := s.Add("other", nil, false); !errors.As(err, &se) || se.Problem != identity.StorePermissions {
			t.Errorf("mode %04o, add: %v", mode, err)
		}
	}
	if err := os.Chmod(s.Path(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != 0 {
		return // only root can give the file to another user
	}
	if err := os.Chown(s.Path(), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	var se *identity.StoreError
	if _, err := s.List(); !errors.As(err, &se) || se.Problem != identity.StorePermissions || !strings.Contains(err.Error(), "uid 4242") {
		t.Errorf("another user's file: %v", err)
	}
}

// clock is a clock the test moves.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

type change struct {
	keys int
	err  error
}

// A running verifier follows the file: a key revoked by another writer is
// refused once Every has passed (and not before: the file is looked at
// no more often), a key added is known; a file edited in place, replaced
// by a corrupt one or opened to others makes every key refused as
// unavailable, said once, until it is put right; a file removed has no
// keys.
func TestStoreKeysFollowsTheFile(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	ci, _, err := s.Add("ci", []string{"dev"}, false)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	var changes []change
	v, err := s.Follow(identity.FollowOptions{Every: time.Second, Now: clk.now,
		OnChange: func(n int, err error) { changes = append(changes, change{n, err}) }})
	if err != nil {
		t.Fatal(err)
	}
	known := func(secret string) bool {
		t.Helper()
		c, err := v.Verify(ctx, secret)
		if err != nil && identity.KindOf(err) != identity.KindInvalid {
			t.Fatalf("verify: %v", err)
		}
		return err == nil && c != nil
	}
	if !known(ci) || v.Len() != 1 {
		t.Fatal("the key at start")
	}
	// Revoked by another writer: refused once a second has passed.
	if err := identity.NewKeyStore(s.Path()).Revoke("ci"); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second - 1)
	if !known(ci) {
		t.Fatal("the file was looked at before its interval")
	}
	clk.advance(1)
	if known(ci) {
		t.Fatal("revoked, still known after the interval")
	}
	// Added: known once a second has passed.
	bot, _, err := s.Add("bot", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if !known(bot) || v.Len() != 1 {
		t.Fatal("added, not known")
	}
	// Edited in place (the same file, another content): seen.
	b, _ := os.ReadFile(s.Path())
	edited := strings.Replace(string(b), `"name": "bot"`, `"name": "robot"`, 1)
	if err := os.WriteFile(s.Path(), []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if c, err := v.Verify(ctx, bot); err != nil || c.Name != "robot" {
		t.Fatalf("edited in place: %+v %v", c, err)
	}
	// Corrupt: every key unavailable, said once; other credentials are
	// not the store's.
	if err := os.WriteFile(s.Path(), []byte(edited[:len(edited)/2]), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if _, err := v.Verify(ctx, bot); identity.KindOf(err) != identity.KindUnavailable || strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("a corrupt store: %v", err)
	}
	if _, err := v.Verify(ctx, "eyJ.a.b"); !errors.Is(err, identity.ErrNotMine) {
		t.Fatalf("a token, with a corrupt store: %v", err)
	}
	var se *identity.StoreError
	if !errors.As(v.Err(), &se) || se.Problem != identity.StoreCorrupt {
		t.Fatalf("Err: %v", v.Err())
	}
	clk.advance(time.Second)
	if _, err := v.Verify(ctx, bot); identity.KindOf(err) != identity.KindUnavailable {
		t.Fatalf("a corrupt store, later: %v", err)
	}
	// Put right.
	if err := os.WriteFile(s.Path(), []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if !known(bot) || v.Err() != nil {
		t.Fatal("put right, the key is not known")
	}
	// Opened to others.
	if err := os.Chmod(s.Path(), 0o644); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if _, err := v.Verify(ctx, bot); identity.KindOf(err) != identity.KindUnavailable || !errors.As(v.Err(), &se) || se.Problem != identity.StorePermissions {
		t.Fatalf("opened to others: %v, %v", err, v.Err())
	}
	// Removed: no keys.
	if err := os.Remove(s.Path()); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if known(bot) || v.Len() != 0 || v.Err() != nil {
		t.Fatal("removed, a key still known")
	}
	// Its directory made a file: the store cannot be looked at; then
	// gone: no keys, nothing wrong.
	dir := filepath.Dir(s.Path())
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if !errors.As(v.Err(), &se) || se.Problem != identity.StoreUnreadable {
		t.Fatalf("no directory to look in: %v", v.Err())
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if v.Err() != nil || v.Len() != 0 {
		t.Fatalf("the directory gone: %v", v.Err())
	}
	var got []string
	for _, c := range changes {
		if c.err != nil {
			got = append(got, string(c.err.(*identity.StoreError).Problem))
		} else {
			got = append(got, strconv.Itoa(c.keys))
		}
	}
	if want := []string{"0", "1", "1", "corrupt", "1", "permissions", "0", "unreadable", "0"}; !slices.Equal(got, want) {
		t.Errorf("changes said: %v, want %v", got, want)
	}
}

// Verifications from many goroutines while the file changes under them:
// the race detector's test, every answer a key's caller or a refusal.
func TestStoreKeysConcurrentUse(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	ci, _, err := s.Add("ci", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Follow(identity.FollowOptions{Every: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := v.Verify(ctx, ci)
				if err == nil && c.Name != "ci" || err != nil && identity.KindOf(err) != identity.KindInvalid {
					t.Errorf("%+v %v", c, err)
					return
				}
				_ = v.Len()
			}
		})
	}
	for i := range 20 {
		if _, _, err := s.Add(fmt.Sprint("k", i), nil, false); err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			if err := s.Revoke("ci"); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if _, err := v.Verify(ctx, ci); identity.KindOf(err) != identity.KindInvalid {
		t.Errorf("revoked: %v", err)
	}
}

// keyStoreWriterEnv makes the test binary a writer of a store (TestMain):
// "PATH PREFIX N" adds N keys named PREFIX-i.
const keyStoreWriterEnv = "TOOLMUX_TEST_KEYSTORE_WRITER"

// keyStoreWriter is a writer process of TestKeyStoreWritersInProcesses:
// it adds the keys spec (keyStoreWriterEnv) names.
func keyStoreWriter(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 3 {
		return fmt.Errorf("%s=%q: want PATH PREFIX N", keyStoreWriterEnv, spec)
	}
	n, err := strconv.Atoi(f[2])
	if err != nil {
		return fmt.Errorf("%s=%q: %w", keyStoreWriterEnv, spec, err)
	}
	s := identity.NewKeyStore(f[0])
	for i := range n {
		if _, _, err := s.Add(fmt.Sprintf("%s-%d", f[1], i), nil, false); err != nil {
			return err
		}
	}
	return nil
}

// Writers in processes of their own, at once: every key each added is
// kept (the store is read and written again under the lock, never one
// writer's file over another's).
func TestKeyStoreWritersInProcesses(t *testing.T) {
	s := newStore(t)
	const writers, each = 4, 15
	cmds := make([]*exec.Cmd, writers)
	outs := make([]strings.Builder, writers)
	for w := range writers {
		cmds[w] = exec.Command(os.Args[0])
		cmds[w].Env = append(os.Environ(), fmt.Sprintf("%s=%s w%d %d", keyStoreWriterEnv, s.Path(), w, each))
		cmds[w].Stdout, cmds[w].Stderr = &outs[w], &outs[w]
		if err := cmds[w].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for w, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("writer %d: %v\n%s", w, err, outs[w].String())
		}
	}
	keys, err := s.List()
	if err != nil || len(keys) != writers*each {
		t.Fatalf("%d keys, want %d: %v", len(keys), writers*each, err)
	}
}

// Whatever the file holds, reading it either refuses it as corrupt or
// gives keys that are well formed: never a panic, never a key the store
// could not have written.
func FuzzKeyStoreFile(f *testing.F) {
	good := fmt.Sprintf("%x", identity.HashKey("x"))
	f.Add(`{"version": 1, "keys": [{"name": "ci", "groups": ["dev"], "sha256": "` + good + `", "created": "2026-11-30T09:12:03Z"}]}`)
	f.Add(`{"version": 1, "keys": []}`)
	f.Add(`{"version": 1, "keys": null}`)
	f.Add(`{"version": 1, "keys": [{"name": "", "sha256": ""}]}`)
	f.Add("")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(dir, "keys.json")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		keys, err := identity.NewKeyStore(path).List()
		if err != nil {
			var se *identity.StoreError
			if !errors.As(err, &se) || se.Problem != identity.StoreCorrupt || !strings.Contains(err.Error(), path) {
				t.Fatalf("not a corrupt store's error: %v", err)
			}
			return
		}
		for _, k := range keys {
			if identity.CheckKeyName(k.Name) != nil || len(k.SHA256) != 64 {
				t.Fatalf("a malformed key read: %+v", k)
			}
		}
	})
}
