package testservers

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
	buildOut  []byte
)

// Fixture builds the fixture command once per test binary and returns its
// path. The binary lives in a temporary directory removed at process exit by
// the OS's temp cleanup; tests must not delete it.
func Fixture(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "toolmux-fixture-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "fixture")
		if runtime.GOOS == "windows" {
			buildPath += ".exe"
		}
		cmd := exec.Command("go", "build", "-o", buildPath, "github.com/toolmux/toolmux/internal/testservers/fixture")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		tb.Fatalf("building fixture server: %v\n%s", buildErr, buildOut)
	}
	return buildPath
}
