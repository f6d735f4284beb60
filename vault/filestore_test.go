package vault_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/vaulttest"
)

var bg = context.Background()

func newFileStore(t *testing.T) *vault.FileStore {
	return vault.NewFileStore(filepath.Join(t.TempDir(), "data", "vault"))
}

// The behaviours every store has, on the local one.
func TestFileStore(t *testing.T) {
	vaulttest.Run(t, func(t *testing.T) vault.Store { return newFileStore(t) })
}

// What is on disk holds no value, in any encoding, and is its owner's
// only; without the key, or with another, nothing opens.
func TestFileStoreOnDisk(t *testing.T) {
	s := newFileStore(t)
	key := vaulttest.NewKey(t)
	v := vault.New(s, vaulttest.Ring(t, key), vault.Options{})
	names := []string{"server/fx/token", "server/fx/secret/API_KEY"}
	vaulttest.Fill(t, v, names...)
	tok := vault.OAuthToken{AccessToken: "gho_access-token-of-ann-16b2", RefreshToken: "ghr_refresh-token-of-ann-a9e4"}
	if err := v.PutToken(bg, vaulttest.Owners[0], "github", tok); err != nil {
		t.Fatal(err)
	}

	fi, err := os.Stat(s.Dir())
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory's mode: %v %v", fi, err)
	}
	des, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	files := 0
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(s.Dir(), de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := de.Info()
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o", de.Name(), fi.Mode().Perm())
		}
		if strings.HasSuffix(de.Name(), ".json") {
			files++
		}
		all = append(all, b...)
	}
	if files != len(vaulttest.Owners) {
		t.Errorf("%d owner files for %d owners", files, len(vaulttest.Owners))
	}
	var secrets [][]byte
	for _, o := range vaulttest.Owners {
		for _, n := range names {
			secrets = append(secrets, vaulttest.Value(o, n))
		}
	}
	secrets = append(secrets, []byte(tok.AccessToken), []byte(tok.RefreshToken), []byte("secret-value-of"))
	for _, sec := range secrets {
		for _, form := range [][]byte{sec, []byte(base64.StdEncoding.EncodeToString(sec)), []byte(base64.StdEncoding.EncodeToString(sec)[:12]),
			[]byte(fmt.Sprintf("%x", sec))} {
			if bytes.Contains(all, form) {
				t.Fatalf("the vault's files hold %q", form)
			}
		}
	}
	// The owners and names are there, in the clear: they are listed
	// without the key.
	if !bytes.Contains(all, []byte(`"key:ann"`)) || !bytes.Contains(all, []byte(`"server/fx/token"`)) {
		t.Errorf("the files do not name their owners and entries:\n%s", all)
	}

	// Read without the key: locked; with another key: the wrong key.
	if _, err := vault.New(s, nil, vault.Options{}).Get(bg, vaulttest.Owners[0], names[0]); vault.KindOf(err) != vault.KindLocked {
		t.Fatalf("without the key: %v", err)
	}
	other := vault.New(s, vaulttest.Ring(t, vaulttest.NewKey(t)), vault.Options{})
	for _, o := range vaulttest.Owners {
		for _, n := range names {
			if b, err := other.Get(bg, o, n); vault.KindOf(err) != vault.KindWrongKey || b != nil {
				t.Fatalf("another key: %q %v", b, err)
			}
		}
	}
	// A key of the same id but other bytes cannot be: the id is the
	// key's hash; a file's sealed values opened by hand with another key
	// fail too (the GCM tag).
}

// A file others may read, another owner's file under this one's name, a
// file that is not a vault file: refused by every use, naming the file,
// and left as it was.
func TestFileStoreRefusesBadFiles(t *testing.T) {
	key := vaulttest.NewKey(t)
	setup := func(t *testing.T) (*vault.FileStore, *vault.Vault, string) {
		s := newFileStore(t)
		v := vault.New(s, vaulttest.Ring(t, key), vault.Options{})
		vaulttest.Fill(t, v, "server/fx/token")
		des, _ := os.ReadDir(s.Dir())
		for _, de := range des {
			if strings.HasSuffix(de.Name(), ".json") {
				b, _ := os.ReadFile(filepath.Join(s.Dir(), de.Name()))
				if bytes.Contains(b, []byte(`"key:ann"`)) {
					return s, v, filepath.Join(s.Dir(), de.Name())
				}
			}
		}
		t.Fatal("no file of key:ann")
		return nil, nil, ""
	}
	uses := func(t *testing.T, v *vault.Vault, path string, kind vault.Kind, want string) {
		t.Helper()
		before, _ := os.ReadFile(path)
		owner := vaulttest.Owners[0]
		_, err := v.Get(bg, owner, "server/fx/token")
		errs := map[string]error{"get": err}
		errs["put"] = v.Put(bg, owner, "server/gx/token", []byte("x"))
		errs["delete"] = v.Delete(bg, owner, "server/fx/token")
		_, errs["list"] = v.List(bg, owner)
		_, errs["status"] = v.Status(bg)
		_, errs["rotate"] = v.Rotate(bg, nil)
		for what, err := range errs {
			if vault.KindOf(err) != kind || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v", what, err)
			}
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Error("the file was changed")
		}
	}
	t.Run("readable by others", func(t *testing.T) {
		_, v, path := setup(t)
		if err := os.Chmod(path, 0o640); err != nil {
			t.Fatal(err)
		}
		uses(t, v, path, vault.KindStore, "chmod 600")
	})
	t.Run("another owner's", func(t *testing.T) {
		s, v, path := setup(t)
		des, _ := os.ReadDir(s.Dir())
		for _, de := range des {
			if p := filepath.Join(s.Dir(), de.Name()); strings.HasSuffix(p, ".json") && p != path {
				b, _ := os.ReadFile(p)
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		uses(t, v, path, vault.KindCorrupt, "another owner")
	})
	for name, content := range map[string]string{
		"empty":        "",
		"not json":     "entries: []",
		"truncated":    `{"version": 1, "owner": "key:ann", "entries": [`,
		"trailing":     `{"version": 1, "owner": "key:ann", "entries": []} {}`,
		"unknown":      `{"version": 1, "owner": "key:ann", "entries": [], "key": "x"}`,
		"version":      `{"version": 2, "owner": "key:ann", "entries": []}`,
		"no owner":     `{"version": 1, "entries": []}`,
		"bad name":     `{"version": 1, "owner": "key:ann", "entries": [{"name": "a//b", "sealed": "AQ=="}]}`,
		"twice":        `{"version": 1, "owner": "key:ann", "entries": [{"name": "a", "sealed": "AQ=="}, {"name": "a", "sealed": "AQ=="}]}`,
		"out of order": `{"version": 1, "owner": "key:ann", "entries": [{"name": "b", "sealed": "AQ=="}, {"name": "a", "sealed": "AQ=="}]}`,
		"not base64":   `{"version": 1, "owner": "key:ann", "entries": [{"name": "a", "sealed": "!!"}]}`,
		"no value":     `{"version": 1, "owner": "key:ann", "entries": [{"name": "a"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, v, path := setup(t)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			uses(t, v, path, vault.KindCorrupt, "is not one")
		})
	}
}

// The file of an owner whose last entry is deleted goes; the lock file
// and a write's leftover temporary file are no owners.
func TestFileStoreLeavesNoFile(t *testing.T) {
	s := newFileStore(t)
	v := vault.New(s, vaulttest.Ring(t, vaulttest.NewKey(t)), vault.Options{})
	if err := v.Put(bg, "key:ann", "server/fx/token", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), ".vault-123.tmp"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := v.Delete(bg, "key:ann", "server/fx/token"); err != nil {
		t.Fatal(err)
	}
	des, _ := os.ReadDir(s.Dir())
	for _, de := range des {
		if strings.HasSuffix(de.Name(), ".json") {
			t.Errorf("%s is left", de.Name())
		}
	}
	if owners, err := s.Owners(bg); err != nil || len(owners) != 0 {
		t.Fatalf("owners: %q %v", owners, err)
	}
	if owners, err := vault.NewFileStore(filepath.Join(t.TempDir(), "none")).Owners(bg); err != nil || len(owners) != 0 {
		t.Fatalf("no directory: %q %v", owners, err)
	}
}

// writerEnv makes the test binary a writer process of
// TestFileStoreWritersInProcesses (TestMain): "DIR KEY NAME N" puts N
// entries named NAME/i, each for two owners: one every writer writes, and
// one of its own.
const writerEnv = "TOOLMUX_TEST_VAULT_WRITER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(writerEnv); spec != "" {
		os.Exit(writerMain(spec))
	}
	goleak.VerifyTestMain(m)
}

func writerMain(spec string) int {
	f := strings.Fields(spec)
	k, err := vault.ParseKey(f[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	r, _ := vault.NewKeyring(k)
	v := vault.New(vault.NewFileStore(f[0]), r, vault.Options{})
	n, _ := strconv.Atoi(f[3])
	for i := range n {
		for _, owner := range []string{"key:shared", "key:" + f[2]} {
			if err := v.Put(bg, owner, fmt.Sprintf("%s/%d", f[2], i), []byte(f[2])); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	return 0
}

// Writers in processes of their own, at once, on the same owners: every
// entry each wrote is kept (each write reads the owner's file again under
// the lock, never one writer's file over another's).
func TestFileStoreWritersInProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vault")
	keyText := vault.GenerateKey()
	const writers, each = 2, 25
	var procs []*exec.Cmd
	var outs [writers]bytes.Buffer
	for w := range writers {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s w%d %d", writerEnv, dir, keyText, w, each))
		cmd.Stderr = &outs[w]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	for w, cmd := range procs {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer %d: %v %s", w, err, outs[w].String())
		}
	}
	k, _ := vault.ParseKey(keyText)
	v := vault.New(vault.NewFileStore(dir), vaulttest.Ring(t, k), vault.Options{})
	infos, err := v.List(bg, "key:shared")
	if err != nil || len(infos) != writers*each {
		t.Fatalf("%d entries of the shared owner, want %d: %v", len(infos), writers*each, err)
	}
	for w := range writers {
		w := fmt.Sprint("w", w)
		for i := range each {
			if b, err := v.Get(bg, "key:shared", fmt.Sprintf("%s/%d", w, i)); err != nil || string(b) != w {
				t.Fatalf("%s/%d: %q %v", w, i, b, err)
			}
		}
		if infos, err := v.List(bg, "key:"+w); err != nil || len(infos) != each {
			t.Fatalf("%s's own: %d %v", w, len(infos), err)
		}
	}
}

// Whatever an owner's file holds, reading it either refuses it as
// corrupt or gives entries that are well formed: never a panic.
func FuzzFileStoreFile(f *testing.F) {
	f.Add(`{"version": 1, "owner": "key:ann", "entries": [{"name": "server/fx/token", "sealed": "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMk", "updated": "2026-11-30T09:12:03Z"}]}`)
	f.Add(`{"version": 1, "owner": "key:ann", "entries": []}`)
	f.Add(`{"version": 1, "owner": "key:ann", "entries": null}`)
	f.Add("")
	dir := filepath.Join(f.TempDir(), "vault")
	s := vault.NewFileStore(dir)
	v := vault.New(s, vaulttest.Ring(f, vaulttest.NewKey(f)), vault.Options{})
	// The file of key:ann, whose name the store derives from the owner.
	if err := v.Put(bg, "key:ann", "x", []byte("x")); err != nil {
		f.Fatal(err)
	}
	des, _ := os.ReadDir(dir)
	var path string
	for _, de := range des {
		if strings.HasSuffix(de.Name(), ".json") {
			path = filepath.Join(dir, de.Name())
		}
	}
	f.Fuzz(func(t *testing.T, content string) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		infos, err := v.List(bg, "key:ann")
		if err != nil {
			if k := vault.KindOf(err); k != vault.KindCorrupt || !strings.Contains(err.Error(), path) {
				t.Fatalf("not a corrupt file's error: %v", err)
			}
			return
		}
		for i, in := range infos {
			if vault.CheckName(in.Name) != nil || i > 0 && infos[i-1].Name >= in.Name {
				t.Fatalf("a malformed entry read: %+v", infos)
			}
			if _, err := v.Get(bg, "key:ann", in.Name); err != nil && vault.KindOf(err) != vault.KindCorrupt && vault.KindOf(err) != vault.KindWrongKey {
				t.Fatalf("get %s: %v", in.Name, err)
			}
		}
		var of struct{ Owner string }
		if json.Unmarshal([]byte(content), &of) == nil && of.Owner != "key:ann" && len(infos) > 0 {
			t.Fatalf("the entries of %q read as key:ann's", of.Owner)
		}
	})
}

// Whatever bytes a store gives as a sealed value, opening them gives the
// value sealed for that entry, or an error of a kind: never a panic,
// never a value for bytes the key did not seal for the entry.
func FuzzOpen(f *testing.F) {
	key := vaulttest.NewKey(f)
	s := &memStore{}
	v := vault.New(s, vaulttest.Ring(f, key), vault.Options{})
	if err := v.Put(bg, "key:ann", "server/fx/token", []byte("the value")); err != nil {
		f.Fatal(err)
	}
	good := s.sealed
	f.Add(good)
	f.Add(good[:vault.SealOverhead])
	f.Add([]byte{1})
	f.Add([]byte{})
	f.Add(append([]byte{2}, good[1:]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		s.sealed = b
		got, err := v.Get(bg, "key:ann", "server/fx/token")
		switch vault.KindOf(err) {
		case "":
			if !bytes.Equal(b, good) || string(got) != "the value" {
				t.Fatalf("%x opened as %q", b, got)
			}
		case vault.KindCorrupt, vault.KindWrongKey:
			if got != nil {
				t.Fatalf("a value with an error: %q", got)
			}
			if vault.SealedKeyID(b) == "" && vault.KindOf(err) != vault.KindCorrupt {
				t.Fatalf("not a sealed value, yet %v", err)
			}
		default:
			t.Fatalf("%x: %v", b, err)
		}
	})
}

// memStore holds one sealed value, whatever the entry: FuzzOpen's store.
type memStore struct{ sealed []byte }

func (m *memStore) Get(_ context.Context, owner, name string) (vault.Entry, error) {
	if m.sealed == nil {
		return vault.Entry{}, vault.NotFound(owner, name)
	}
	return vault.Entry{Name: name, Sealed: m.sealed}, nil
}
func (m *memStore) List(context.Context, string) ([]vault.Entry, error) { return nil, nil }
func (m *memStore) Owners(context.Context) ([]string, error)            { return nil, nil }
func (m *memStore) Delete(context.Context, string, string) error        { return nil }
func (m *memStore) Update(_ context.Context, _, _ string, _ int, change func(*vault.Entry) ([]byte, error)) error {
	b, err := change(nil)
	if err == nil && b != nil {
		m.sealed = b
	}
	return err
}
