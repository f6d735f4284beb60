package testservers

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// unprivilegedEnv marks the child process RunUnprivileged starts: in it the
// test runs itself, and must not be root.
const unprivilegedEnv = "TOOLMUX_TEST_UNPRIVILEGED"

// The user the child runs as: nobody, whom file permissions bind.
const nobody = 65534

// RunUnprivileged lets a test whose assertions need file permissions to
// bind (a file mode 0 cannot be read) run as root too, as make test runs in
// CI: it reports whether the caller is to run the test's body here. When the
// process is not root it is (true). As root it runs the test again, alone,
// in a child process of the test binary as the user nobody, fails the test
// if the child's run fails (with its output) or did not pass, and reports
// false: the body ran in the child.
//
// The test binary is copied where nobody may run it (go test keeps it in a
// directory only root may enter), and the child's working directory, HOME
// and TMPDIR are a directory of its own: its test's t.TempDir is nobody's.
func RunUnprivileged(t *testing.T) bool {
	t.Helper()
	if os.Getenv(unprivilegedEnv) != "" {
		if os.Geteuid() == 0 {
			t.Fatalf("%s is set, yet the test runs as root: permissions would not bind", unprivilegedEnv)
		}
		return true
	}
	if os.Geteuid() != 0 {
		return true
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "toolmux-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	// 0755 lets nobody run the copy; a world-writable home (sticky, as
	// /tmp) lets it make its temporary directories there.
	for p, mode := range map[string]os.FileMode{dir: 0o755, home: 0o1777} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, filepath.Base(exe))
	if err := copyExecutable(exe, bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Dir = home
	cmd.Env = append(os.Environ(), unprivilegedEnv+"=1", "HOME="+home, "TMPDIR="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}},
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s as nobody (uid %d): %v\n%s", t.Name(), nobody, err, out)
	}
	// A run that matched no test, or skipped it, passes too: the child
	// must have passed this very test.
	if !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("%s as nobody (uid %d) did not pass:\n%s", t.Name(), nobody, out)
	}
	t.Logf("ran as nobody (uid %d) in a child process", nobody)
	return false
}

// copyExecutable copies the file src to dst, mode 0755.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
