package testservers

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Fixture builds the fixture command once per test binary and returns its
// path. The binary lives in a temporary directory removed at process exit by
// the OS's temp cleanup; tests must not delete it.
func Fixture(tb testing.TB) string {
	tb.Helper()
	return fixtureBin.get(tb, "fixture", "internal/testservers/fixture")
}

// EchoServer builds echoserver, the hand-written JSON-RPC echo (no SDK:
// the fastest server a benchmark can have), once per test binary, and
// returns its path.
func EchoServer(tb testing.TB) string {
	tb.Helper()
	return echoBin.get(tb, "echoserver", "internal/testservers/echoserver")
}

// CodeModeEngine builds toolmux-codemode, code mode's engine program, once
// per test binary, and returns its path.
func CodeModeEngine(tb testing.TB) string {
	tb.Helper()
	return engineBin.get(tb, "toolmux-codemode", "cmd/toolmux-codemode")
}

var fixtureBin, echoBin, engineBin built

// built is a command of this module built once.
type built struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// get builds the module's package pkg as name.
func (b *built) get(tb testing.TB, name, pkg string) string {
	tb.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "toolmux-"+name+"-")
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, name)
		if runtime.GOOS == "windows" {
			b.bin += ".exe"
		}
		cmd := exec.Command("go", "build", "-o", b.bin, "github.com/toolmux/toolmux/"+pkg)
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		tb.Fatalf("building %s: %v\n%s", name, b.err, b.out)
	}
	return b.bin
}
