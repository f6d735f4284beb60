package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/jsvault"
)

// vaultEnv is the environment of a vault command: this process's, less
// what would name another vault or key, with the data under home.
func vaultEnv(home string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOOLMUX_VAULT_KEY") && !strings.HasPrefix(kv, "TOOLMUX_NATS=") {
			env = append(env, kv)
		}
	}
	return append(append(env, "XDG_DATA_HOME="+home), extra...)
}

// vaultCmd runs `toolmux vault ARGS` in dir (and its toolmux.yaml), its
// data under home.
func vaultCmd(t *testing.T, dir, home string, env []string, args ...string) result {
	t.Helper()
	return execToolmux(t, dir, "", vaultEnv(home, env...), append([]string{"vault"}, args...)...)
}

// vaultDir is the vault of the data directory under home.
func vaultDir(home string) string { return filepath.Join(home, "toolmux", "vault") }

// keyFile makes a key file in dir with `toolmux vault keygen` and returns
// its key.
func keyFile(t *testing.T, path string) *vault.Key {
	t.Helper()
	r := vaultCmd(t, t.TempDir(), t.TempDir(), nil, "keygen", path)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("keygen %s: exit %d %q %s", path, r.code, r.stdout, r.stderr)
	}
	ring, err := vault.Keys{Current: vault.KeySource{File: path}}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.stderr, ring.Current()) {
		t.Errorf("keygen does not say the key's id %s: %s", ring.Current(), r.stderr)
	}
	return ring.CurrentKey()
}

func ring(t *testing.T, current *vault.Key, previous ...*vault.Key) *vault.Keyring {
	t.Helper()
	r, err := vault.NewKeyring(current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// secretOf is the value of an entry in these tests, looked for where it
// must not be.
func secretOf(owner, name string) []byte { return fmt.Appendf(nil, "s3cr3t-%s-%s", owner, name) }

// seed puts the entries names of owners into v.
func seed(t *testing.T, v *vault.Vault, owners []string, names ...string) {
	t.Helper()
	for _, o := range owners {
		for _, n := range names {
			if err := v.Put(context.Background(), o, n, secretOf(o, n)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// owners returns n owners of the forms callers have.
func owners(n int) []string {
	out := make([]string, n)
	for i := range out {
		if i%2 == 0 {
			out[i] = fmt.Sprintf("key:user-%03d", i)
		} else {
			out[i] = fmt.Sprintf("https://idp.example.com subject-%03d", i)
		}
	}
	return out
}

type vaultStatus struct {
	Store    string         `json:"store"`
	Locked   bool           `json:"locked"`
	Current  string         `json:"current_key"`
	Owners   int            `json:"owners"`
	Entries  int            `json:"entries"`
	ByKey    map[string]int `json:"by_key"`
	ToRotate int            `json:"to_rotate"`
	Unopened int            `json:"unopened"`
	Checked  *int           `json:"checked"`
	Failed   []string       `json:"failed"`
}

func statusOf(t *testing.T, dir, home string, env []string, args ...string) (vaultStatus, result) {
	t.Helper()
	r := vaultCmd(t, dir, home, env, append([]string{"status", "--json"}, args...)...)
	var st vaultStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	return st, r
}

// The vault commands: keygen to a file and to stdout; status of a locked
// vault, and of one with a key from a file or a variable; --check naming
// an entry that does not open; keys that cannot be used, and a key
// written in the configuration, refused naming where; no value shown.
func TestVaultCommands(t *testing.T) {
	t.Parallel()
	home, keys := t.TempDir(), t.TempDir()
	var outputs strings.Builder
	run := func(dir string, env []string, args ...string) result {
		t.Helper()
		r := vaultCmd(t, dir, home, env, args...)
		outputs.WriteString(r.stdout + r.stderr)
		return r
	}

	// keygen: a file of mode 0600, never written over; or stdout.
	kpath := filepath.Join(keys, "vault.key")
	key := keyFile(t, kpath)
	if fi, err := os.Stat(kpath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v %v", fi, err)
	}
	if r := run(t.TempDir(), nil, "keygen", kpath); r.code != 1 || !strings.Contains(r.stderr, "exists already") {
		t.Errorf("keygen over a key: exit %d %s", r.code, r.stderr)
	}
	r := vaultCmd(t, t.TempDir(), home, nil, "keygen")
	envKey, err := vault.ParseKey(r.stdout)
	if r.code != 0 || err != nil || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stderr, envKey.ID()) ||
		strings.Contains(r.stderr, strings.TrimSpace(r.stdout)) {
		t.Fatalf("keygen to stdout: exit %d %q %s %v", r.code, r.stdout, r.stderr, err)
	}

	// Locked: no key configured, none in TOOLMUX_VAULT_KEY.
	none := workspace(t, "")
	r = run(none, nil, "status")
	if r.code != 0 || !strings.Contains(r.stdout, "the vault is locked") || !strings.Contains(r.stdout, vaultDir(home)) ||
		!strings.Contains(r.stdout, "0 owners, 0 entries") {
		t.Errorf("status, locked: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	if r := run(none, nil, "rotate"); r.code != 1 || !strings.Contains(r.stderr, "the vault is locked") {
		t.Errorf("rotate, locked: exit %d %s", r.code, r.stderr)
	}
	// The default variable.
	r = run(none, []string{"TOOLMUX_VAULT_KEY=" + strings.TrimSpace(vault.GenerateKey())}, "status")
	if r.code != 0 || !regexpMatch(`key: [0-9a-f]{16} \(environment variable TOOLMUX_VAULT_KEY\)`, r.stdout) {
		t.Errorf("status with TOOLMUX_VAULT_KEY: exit %d %s%s", r.code, r.stdout, r.stderr)
	}

	// Entries sealed with the key of the file, and one with a key lost.
	store := vault.NewFileStore(vaultDir(home))
	seed(t, vault.New(store, ring(t, key), vault.Options{}), owners(3), "server/fx/token", "server/fx/secret/API_KEY")
	lost, _ := vault.ParseKey(vault.GenerateKey())
	seed(t, vault.New(store, ring(t, lost), vault.Options{}), owners(1), "server/zz/token")

	ws := workspace(t, "vault:\n  key_file: "+kpath+"\n")
	r = run(ws, nil, "status")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("key: %s (key file %s)", key.ID(), kpath)) ||
		!strings.Contains(r.stdout, "3 owners, 7 entries") || !regexpMatch(key.ID()+`\s+6\s+current key`, r.stdout) ||
		!regexpMatch(lost.ID()+`\s+1\s+a key not configured`, r.stdout) {
		t.Errorf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	st, r := statusOf(t, ws, home, nil, "--check")
	if r.code != 1 || st.Entries != 7 || st.ByKey[key.ID()] != 6 || st.Unopened != 1 || st.Checked == nil || *st.Checked != 7 ||
		len(st.Failed) != 1 || !strings.Contains(st.Failed[0], "server/zz/token of key:user-000") ||
		!strings.Contains(r.stderr, "1 entry does not open") {
		t.Errorf("status --check: exit %d %+v %s", r.code, st, r.stderr)
	}
	if err := vault.New(store, ring(t, lost), vault.Options{}).Delete(context.Background(), "key:user-000", "server/zz/token"); err != nil {
		t.Fatal(err)
	}
	if r := run(ws, nil, "status", "--check"); r.code != 0 || !strings.Contains(r.stdout, "checked: 6 entries opened of 6") {
		t.Errorf("status --check: exit %d %s%s", r.code, r.stdout, r.stderr)
	}

	// Keys that cannot be used: exit 1, naming where.
	readable := filepath.Join(keys, "readable.key")
	if err := os.WriteFile(readable, []byte(vault.GenerateKey()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg, want string
	}{
		{"vault:\n  key_file: " + readable + "\n", "chmod 600 " + readable},
		{"vault:\n  key_file: " + filepath.Join(keys, "none.key") + "\n", "does not exist"},
		{"vault:\n  key_env: MY_VAULT_KEY\n", "environment variable MY_VAULT_KEY is not set"},
		{"vault:\n  key_file: " + kpath + "\n  previous_key_envs: [OLD_KEY]\n", "environment variable OLD_KEY is not set"},
	} {
		for _, cmd := range []string{"status", "rotate"} {
			if r := run(workspace(t, c.cfg), nil, cmd); r.code != 1 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s with %q: exit %d %s", cmd, c.cfg, r.code, r.stderr)
			}
		}
	}
	// The key in the configuration: a configuration error, the key not
	// quoted.
	keyText := strings.TrimSpace(vault.GenerateKey())
	for _, cfg := range []string{"vault:\n  key: " + keyText + "\n", "vault:\n  key_file: " + keyText + "\n", "vault:\n  key_env: " + keyText + "\n"} {
		r := run(workspace(t, cfg), nil, "status")
		if r.code != 2 || !(strings.Contains(r.stderr, "never written in the configuration") || strings.Contains(r.stderr, "not the key itself")) ||
			strings.Contains(r.stderr, keyText[:16]) {
			t.Errorf("%q: exit %d %s", cfg, r.code, r.stderr)
		}
	}
	// No value was shown, by any command.
	for _, o := range owners(3) {
		for _, n := range []string{"server/fx/token", "server/fx/secret/API_KEY"} {
			if strings.Contains(outputs.String(), string(secretOf(o, n))) || strings.Contains(outputs.String(), "s3cr3t") {
				t.Fatalf("a value was shown:\n%s", outputs.String())
			}
		}
	}
}

// docRotation reads the configurations of docs/vault.md's walk-through of
// a rotation (the blocks named toolmux.yaml), its keys in dir.
func docRotation(t *testing.T, dir string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "vault.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?ms)^ *```yaml toolmux.yaml\n(.*?)^ *```$").FindAllSubmatch(doc, -1) {
		lines := strings.Split(string(m[1]), "\n")
		indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
		for i, l := range lines {
			lines[i] = l[min(indent, len(l)-len(strings.TrimLeft(l, " "))):]
		}
		out = append(out, strings.ReplaceAll(strings.Join(lines, "\n"), "/etc/toolmux/", dir+"/"))
	}
	if len(out) != 2 {
		t.Fatalf("docs/vault.md's rotation has %d configurations, want 2", len(out))
	}
	return out
}

// docOutput is the text block that follows marker in docs/vault.md.
func docOutput(t *testing.T, marker string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "vault.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), marker+"\n```\n")
	block, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatalf("docs/vault.md has no example after %s", marker)
	}
	return block
}

// statusShape is status's text without what differs from one vault to
// another: key ids, paths, counts, and the spaces that align them.
func statusShape(s string) string {
	for _, r := range []struct{ re, by string }{{`\b[0-9a-f]{16}\b`, "ID"}, {`/\S*[^)\s]`, "PATH"}, {`\b\d+\b`, "N"}, {` +`, " "}} {
		s = regexp.MustCompile(r.re).ReplaceAllString(s, r.by)
	}
	return s
}

// The rotation of docs/vault.md, step by step: entries sealed with the
// old key are re-sealed with the new one; then the new key alone opens
// every entry, the old one none.
func TestVaultRotation(t *testing.T) {
	t.Parallel()
	home, keys := t.TempDir(), t.TempDir()
	old := keyFile(t, filepath.Join(keys, "vault.key"))
	store := vault.NewFileStore(vaultDir(home))
	names := []string{"server/fx/token", "server/fx/secret/API_KEY"}
	seed(t, vault.New(store, ring(t, old), vault.Options{}), owners(5), names...)
	total := 5 * len(names)

	// 1: a new key; 2: it is the current key, the old one a previous key;
	// 3: what uses the vault seals with the new key from then on.
	cur := keyFile(t, filepath.Join(keys, "vault-2026.key"))
	cfgs := docRotation(t, keys)
	during, after := workspace(t, cfgs[0]), workspace(t, cfgs[1])
	seed(t, vault.New(store, ring(t, cur, old), vault.Options{}), []string{"key:late"}, names[0])
	st, r := statusOf(t, during, home, nil, "--check")
	if r.code != 0 || st.Current != cur.ID() || st.ToRotate != total || st.ByKey[old.ID()] != total || st.ByKey[cur.ID()] != 1 ||
		*st.Checked != total+1 {
		t.Fatalf("before the rotation: exit %d %+v %s", r.code, st, r.stderr)
	}
	// What status says is what docs/vault.md shows.
	r = vaultCmd(t, during, home, nil, "status")
	if got, want := statusShape(r.stdout), statusShape(docOutput(t, "<!-- output: toolmux vault status -->")); got != want {
		t.Errorf("status says:\n%s\ndocs/vault.md shows:\n%s", got, want)
	}
	// 4: rotate.
	r = vaultCmd(t, during, home, nil, "rotate")
	if r.code != 0 || !strings.Contains(r.stderr, fmt.Sprintf("rotation done: %d entries re-sealed, 1 entry already sealed with key %s, of 6 owners", total, cur.ID())) ||
		!strings.Contains(r.stderr, "key:user-000: 2 entries re-sealed") || !strings.Contains(r.stderr, "the previous keys may be taken out") {
		t.Fatalf("rotate: exit %d %s", r.code, r.stderr)
	}
	// 5: every entry under the new key.
	st, r = statusOf(t, during, home, nil, "--check")
	if r.code != 0 || st.ToRotate != 0 || st.ByKey[cur.ID()] != total+1 || *st.Checked != total+1 {
		t.Fatalf("after the rotation: exit %d %+v %s", r.code, st, r.stderr)
	}
	// Again: nothing to do.
	if r := vaultCmd(t, during, home, nil, "rotate"); r.code != 0 || !strings.Contains(r.stderr, fmt.Sprintf("0 entries re-sealed, %d entries already", total+1)) {
		t.Fatalf("rotate again: exit %d %s", r.code, r.stderr)
	}
	// 6: the old key out; the new one alone opens everything.
	st, r = statusOf(t, after, home, nil, "--check")
	if r.code != 0 || len(st.ByKey) != 1 || *st.Checked != total+1 || len(st.Failed) != 0 {
		t.Fatalf("with the new key alone: exit %d %+v %s", r.code, st, r.stderr)
	}
	for _, o := range owners(5) {
		if _, err := vault.New(store, ring(t, old), vault.Options{}).Get(context.Background(), o, names[0]); vault.KindOf(err) != vault.KindWrongKey {
			t.Fatalf("the old key after the rotation: %v", err)
		}
	}
}

// rotateProc is a `toolmux vault rotate` running, its stderr read line
// by line.
type rotateProc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr strings.Builder
	done   chan struct{}
}

func startRotate(t *testing.T, dir, home string) *rotateProc {
	t.Helper()
	p := &rotateProc{lines: make(chan string, 10000), done: make(chan struct{})}
	p.cmd = exec.Command(binary, "vault", "rotate")
	p.cmd.Dir, p.cmd.Env = dir, vaultEnv(home)
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.stderr.WriteString(sc.Text() + "\n")
			p.lines <- sc.Text()
		}
	}()
	return p
}

// midway waits for the rotation to have re-sealed an owner's entries,
// then holds it between two entries: it takes the vault's lock, which
// the rotation needs for its next write. It returns the lock's release.
func (p *rotateProc) midway(t *testing.T, home string) (release func()) {
	t.Helper()
	for l := range p.lines {
		if strings.HasSuffix(l, "re-sealed") {
			break
		}
	}
	f, err := os.OpenFile(filepath.Join(vaultDir(home), ".lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { f.Close() }
}

func (p *rotateProc) wait(t *testing.T) int {
	t.Helper()
	err := p.cmd.Wait()
	<-p.done
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// A rotation interrupted (Ctrl-C) between two entries, and one killed,
// leave every entry readable with the keys configured, part re-sealed;
// run again, the rotation finishes.
func TestVaultRotateInterrupted(t *testing.T) {
	t.Parallel()
	home, keys := t.TempDir(), t.TempDir()
	old := keyFile(t, filepath.Join(keys, "vault.key"))
	cur := keyFile(t, filepath.Join(keys, "vault-2026.key"))
	const n = 150
	seed(t, vault.New(vault.NewFileStore(vaultDir(home)), ring(t, old), vault.Options{}), owners(n), "server/fx/token")
	ws := workspace(t, docRotation(t, keys)[0])

	// Ctrl-C: the entry being written is written, and the rotation stops.
	p := startRotate(t, ws, home)
	release := p.midway(t, home)
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	release()
	if code := p.wait(t); code != 130 || !strings.Contains(p.stderr.String(), "rotation interrupted after") ||
		!strings.Contains(p.stderr.String(), "run toolmux vault rotate again to finish it") {
		t.Fatalf("interrupted: exit %d %s", code, p.stderr.String())
	}
	st, r := statusOf(t, ws, home, nil, "--check")
	left := st.ToRotate
	if r.code != 0 || left == 0 || st.ByKey[cur.ID()] == 0 || st.ByKey[cur.ID()]+left != n || *st.Checked != n {
		t.Fatalf("after the interruption: exit %d %+v %s", r.code, st, r.stderr)
	}

	// kill -9, between two entries.
	p = startRotate(t, ws, home)
	release = p.midway(t, home)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != -int(syscall.SIGKILL) {
		t.Fatalf("killed: exit %d %s", code, p.stderr.String())
	}
	release()
	st, r = statusOf(t, ws, home, nil, "--check")
	if r.code != 0 || st.ToRotate == 0 || st.ToRotate >= left || st.ByKey[cur.ID()]+st.ToRotate != n || *st.Checked != n {
		t.Fatalf("after the kill: exit %d %+v (left before: %d) %s", r.code, st, left, r.stderr)
	}
	left = st.ToRotate

	// Run again: it re-seals what is left.
	r = vaultCmd(t, ws, home, nil, "rotate")
	if r.code != 0 || !strings.Contains(r.stderr, fmt.Sprintf("rotation done: %d entries re-sealed, %d entries already", left, n-left)) {
		t.Fatalf("run again: exit %d %s", r.code, r.stderr)
	}
	if st, r := statusOf(t, ws, home, nil, "--check"); r.code != 0 || st.ToRotate != 0 || st.ByKey[cur.ID()] != n {
		t.Fatalf("at the end: exit %d %+v %s", r.code, st, r.stderr)
	}
}

// The fleet's vault: status and rotate with --nats work on the fleet's
// bucket, with the keys of the machine they run on.
func TestVaultFleet(t *testing.T) {
	t.Parallel()
	srv := startNATS(t, t.TempDir(), 0)
	url := natsURL(srv)
	fl := connectFleet(t, url)
	ctx := context.Background()
	s, err := jsvault.Open(ctx, fl.JetStream(), jsvault.Config{Bucket: fl.VaultBucket()})
	if err != nil {
		t.Fatal(err)
	}
	keys := t.TempDir()
	old := keyFile(t, filepath.Join(keys, "vault.key"))
	cur := keyFile(t, filepath.Join(keys, "vault-2026.key"))
	names := []string{"server/fx/token", "server/fx/secret/API_KEY"}
	seed(t, vault.New(s, ring(t, old), vault.Options{}), owners(3), names...)
	ws := workspace(t, docRotation(t, keys)[0])
	home := t.TempDir()

	st, r := statusOf(t, ws, home, nil, "--nats", url)
	if r.code != 0 || !strings.HasPrefix(st.Store, "JetStream bucket TOOLMUX_VAULT at ") || st.Owners != 3 || st.ToRotate != 6 {
		t.Fatalf("status --nats: exit %d %+v %s", r.code, st, r.stderr)
	}
	if r := vaultCmd(t, ws, home, nil, "rotate", "--nats", url); r.code != 0 || !strings.Contains(r.stderr, "rotation done: 6 entries re-sealed") {
		t.Fatalf("rotate --nats: exit %d %s", r.code, r.stderr)
	}
	// The new key alone, in this process, opens every entry.
	v := vault.New(s, ring(t, cur), vault.Options{})
	for _, o := range owners(3) {
		for _, n := range names {
			if b, err := v.Get(ctx, o, n); err != nil || string(b) != string(secretOf(o, n)) {
				t.Fatalf("%s of %s: %q %v", n, o, b, err)
			}
		}
	}
	// The data directory's vault was not touched.
	if _, err := os.Stat(vaultDir(home)); !os.IsNotExist(err) {
		t.Errorf("the data directory has a vault: %v", err)
	}
}

// toolmux vault copy --nats: the data directory's entries copied sealed
// into the fleet's bucket, with no key configured; an entry the bucket
// has already is kept; run again, nothing more is copied. Without a fleet
// named, a usage error.
func TestVaultCopyToFleet(t *testing.T) {
	t.Parallel()
	url := natsURL(startNATS(t, t.TempDir(), 0))
	fl := connectFleet(t, url)
	ctx := context.Background()
	s, err := jsvault.Open(ctx, fl.JetStream(), jsvault.Config{Bucket: fl.VaultBucket()})
	if err != nil {
		t.Fatal(err)
	}
	k := keyFile(t, filepath.Join(t.TempDir(), "vault.key"))
	home := t.TempDir()
	names := []string{"server/fx/token", "server/fx/secret/API_KEY"}
	who := owners(2)
	seed(t, vault.New(vault.NewFileStore(vaultDir(home)), ring(t, k), vault.Options{}), who, names...)
	bucket := vault.New(s, ring(t, k), vault.Options{})
	if err := bucket.Put(ctx, who[0], names[0], []byte("newer")); err != nil {
		t.Fatal(err)
	}
	ws := workspace(t, "")
	if r := vaultCmd(t, ws, home, nil, "copy"); r.code != 2 || !strings.Contains(r.stderr, "--nats URL") {
		t.Errorf("copy without --nats: exit %d %s", r.code, r.stderr)
	}
	r := vaultCmd(t, ws, home, nil, "copy", "--nats", url)
	if r.code != 0 || !strings.Contains(r.stderr, "3 entries of 2 owners copied from "+vaultDir(home)+" to JetStream bucket TOOLMUX_VAULT at ") ||
		!strings.Contains(r.stderr, "1 entry kept") {
		t.Fatalf("copy: exit %d %s", r.code, r.stderr)
	}
	for _, o := range who {
		for _, n := range names {
			want := string(secretOf(o, n))
			if o == who[0] && n == names[0] {
				want = "newer"
			}
			if b, err := bucket.Get(ctx, o, n); err != nil || string(b) != want {
				t.Errorf("%s of %s in the bucket: %q %v", n, o, b, err)
			}
		}
	}
	if r := vaultCmd(t, ws, home, nil, "copy", "--nats", url); r.code != 0 || !strings.Contains(r.stderr, "0 entries of 2 owners copied") ||
		!strings.Contains(r.stderr, "4 entries kept") {
		t.Fatalf("copy again: exit %d %s", r.code, r.stderr)
	}
}
