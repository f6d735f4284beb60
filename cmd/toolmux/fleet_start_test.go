package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/testservers"
)

// waitJoined waits until the worker says it joined the fleet.
func (w *workerProc) waitJoined(t testing.TB) {
	t.Helper()
	if !testservers.Eventually(time.Minute, func() bool { return strings.Contains(w.stderr.String(), "joined the fleet") }) {
		t.Fatalf("the worker did not join the fleet:\n%s", w.stderr.String())
	}
}

// running reports whether the worker's process is still running.
func (w *workerProc) running() bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// A worker started while nothing listens at its NATS URL waits for the
// server, saying so once per attempt, and keeps trying; once a server is
// started there, it joins and takes a run to its end.
func TestFleetWorkerWaitsForNATS(t *testing.T) {
	t.Parallel()
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	port := testservers.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	w := spawnWorker(t, binary, dir, url, t.TempDir(), "--name", "early")
	// Two failed attempts said: it tried again after the first.
	waiting := "worker early is waiting for the NATS server at " + url
	if !testservers.Eventually(time.Minute, func() bool {
		return !w.running() || strings.Count(w.stderr.String(), waiting) >= 2
	}) || !w.running() {
		t.Fatalf("the worker did not wait for the server (running %v, %v):\n%s", w.running(), w.err, w.stderr.String())
	}
	if !strings.Contains(w.stderr.String(), "attempt 2") {
		t.Errorf("the attempts are not counted:\n%s", w.stderr.String())
	}
	startNATS(t, t.TempDir(), port)
	w.waitJoined(t)
	f := connectFleet(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "effects.txt")
	if _, _, err := f.Submit(ctx, fleet.Request{ID: "late", Task: "append waited to " + out + " sleeping 0"}); err != nil {
		t.Fatal(err)
	}
	run := waitRun(t, ctx, f, "late", w)
	if run.Status != fleet.StatusDone || run.Worker != "early" || run.Answer != "appended waited | tool said: appended waited" {
		t.Errorf("run: %+v\n%s", run, w.stderr.String())
	}
	// Stopped while the server is up (its cleanup runs first).
	w.cmd.Process.Signal(syscall.SIGTERM)
	<-w.exited
}

// A worker waiting for its server is stopped by SIGTERM at once, and
// cleanly (exit 0, saying it never joined); with --connect-timeout it
// gives up by itself (exit 1, naming the server and the flag).
func TestFleetWorkerWaitEnds(t *testing.T) {
	t.Parallel()
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	url := fmt.Sprintf("nats://127.0.0.1:%d", testservers.FreePort(t))
	w := spawnWorker(t, binary, dir, url, t.TempDir(), "--name", "patient")
	if !testservers.Eventually(time.Minute, func() bool {
		return !w.running() || strings.Contains(w.stderr.String(), "is waiting for the NATS server")
	}) || !w.running() {
		t.Fatalf("the worker did not wait:\n%s", w.stderr.String())
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-w.exited
	if w.err != nil || !strings.Contains(w.stderr.String(), "worker patient stopped before it joined the fleet at "+url) {
		t.Errorf("stopped while waiting: %v\n%s", w.err, w.stderr.String())
	}

	r := execToolmux(t, dir, "", modelFreeEnv(), "worker", "--nats", url, "--connect-timeout", "1s")
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the NATS server at "+url) || !strings.Contains(r.stderr, "--connect-timeout 1s") {
		t.Errorf("--connect-timeout: exit %d, want 1 and a message naming the server and the flag\n%s", r.code, r.stderr)
	}
	r = execToolmux(t, dir, "", modelFreeEnv(), "worker", "--nats", url, "--connect-timeout", "-1s")
	if r.code != 2 || !strings.Contains(r.stderr, "--connect-timeout") {
		t.Errorf("a negative --connect-timeout: exit %d, want 2\n%s", r.code, r.stderr)
	}
}

// serve --nats-listen on an address in use exits 2 at once, naming the
// flag and the address, as --addr does: the process has exited while the
// port is still held here.
func TestServeNATSListenInUse(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	dir := workspace(t, "")
	env := append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir())
	r := execToolmux(t, dir, "", env, "serve", "--addr", "127.0.0.1:0", "--nats-listen", addr)
	if r.code != 2 || !strings.Contains(r.stderr, addr+" is already in use") || !strings.Contains(r.stderr, "choose another address with --nats-listen") {
		t.Errorf("--nats-listen in use: exit %d, want 2 and a message naming the flag and %s\n%s", r.code, addr, r.stderr)
	}
	// The same words as --addr's.
	r = execToolmux(t, dir, "", env, "serve", "--addr", addr)
	if r.code != 2 || !strings.Contains(r.stderr, addr+" is already in use") || !strings.Contains(r.stderr, "choose another address with --addr") {
		t.Errorf("--addr in use: exit %d\n%s", r.code, r.stderr)
	}
}

// readNATSTokenFile reads the token serve --nats-listen keeps under
// dataHome, checking that only its owner may read it.
func readNATSTokenFile(t testing.TB, dataHome string) string {
	t.Helper()
	path := filepath.Join(dataHome, "toolmux", "nats", "token.json")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct{ Addr, Token string }
	if err := json.Unmarshal(b, &tf); err != nil || len(tf.Token) < 16 {
		t.Fatalf("%s: %v %q", path, err, b)
	}
	return tf.Token
}

// natsListenURL is the URL, with its token, of the embedded NATS server
// that serve --nats-listen addr keeps under dataHome: how a worker joins
// from another machine.
func natsListenURL(t testing.TB, dataHome, addr string) string {
	t.Helper()
	return "nats://" + readNATSTokenFile(t, dataHome) + "@" + addr
}

// startFleetGateway starts serve --nats-listen natsAddr, its data under
// dataHome, and waits until its NATS server is up.
func startFleetGateway(t *testing.T, dir, dataHome, natsAddr string, args ...string) *serveProc {
	t.Helper()
	return startFleetGatewayEnv(t, dir, dataHome, natsAddr, nil, args...)
}

// startFleetGatewayEnv is startFleetGateway with further environment
// variables.
func startFleetGatewayEnv(t *testing.T, dir, dataHome, natsAddr string, env []string, args ...string) *serveProc {
	t.Helper()
	p := startServeEnv(t, binary, dir, dataHome, env, append([]string{"--nats-listen", natsAddr}, args...)...)
	if !testservers.Eventually(30*time.Second, func() bool { return strings.Contains(p.stderr.String(), "workers join with") }) {
		t.Fatalf("serve did not start its NATS server:\n%s", p.stderr.String())
	}
	return p
}

// serve --nats-listen on loopback without --token does not open the
// fleet to every local user: its NATS server requires a token it
// generated, kept in a file only the user can read, that never shows on
// stderr. A client without it, or with another, is refused; the fleet
// commands of the same user (same data directory) send it by themselves;
// those of another are refused with a hint. A restarted gateway keeps the
// token, and the worker that outlived it goes on.
func TestFleetServeNATSListenToken(t *testing.T) {
	t.Parallel()
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	data := t.TempDir()
	natsAddr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	url := "nats://" + natsAddr
	p := startFleetGateway(t, dir, data, natsAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for what, u := range map[string]string{"no token": url, "another token": "nats://not-the-token@" + natsAddr} {
		if f, err := fleet.Connect(ctx, u, "stranger", fleet.Options{}); err == nil {
			f.Close()
			t.Errorf("a client with %s was let in", what)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("a client with %s: %v, want an authorization violation", what, err)
		}
	}

	token := readNATSTokenFile(t, data)
	if !strings.Contains(p.stderr.String(), filepath.Join(data, "toolmux", "nats", "token.json")) {
		t.Errorf("serve does not say where the token is:\n%s", p.stderr.String())
	}

	// The same user's commands, with no flag but the URL.
	w := spawnWorker(t, binary, dir, url, data, "--name", "local")
	w.waitJoined(t)
	out := filepath.Join(t.TempDir(), "effects.txt")
	runs := fmt.Sprintf(`{"id": "tok-1", "task": "append local to %s sleeping 0"}`+"\n", out)
	if err := os.WriteFile(filepath.Join(dir, "runs.jsonl"), []byte(runs), 0o644); err != nil {
		t.Fatal(err)
	}
	mine := append(modelFreeEnv(), "XDG_DATA_HOME="+data)
	r := execToolmux(t, dir, "", mine, "submit", "--nats", url, "--lease", "2s", "--wait", "runs.jsonl")
	if r.code != 0 || !strings.Contains(r.stdout, `"status":"done"`) {
		t.Fatalf("submit: exit %d\n%s\n%s\nworker: %s", r.code, r.stdout, r.stderr, w.stderr.String())
	}
	lr := execToolmux(t, dir, "", mine, "runs", "--nats", url, "--workers")
	if lr.code != 0 || !strings.Contains(lr.stdout, "tok-1") || !strings.Contains(lr.stdout, "worker local") {
		t.Errorf("runs: exit %d\n%s\n%s", lr.code, lr.stdout, lr.stderr)
	}
	// Another user's (another data directory): refused, with a hint.
	theirs := append(modelFreeEnv(), "XDG_DATA_HOME="+t.TempDir())
	tr := execToolmux(t, dir, "", theirs, "runs", "--nats", url)
	if tr.code != 1 || !strings.Contains(tr.stderr, "nats://TOKEN@HOST:PORT") {
		t.Errorf("runs of another user: exit %d, want 1 and the hint\n%s\n%s", tr.code, tr.stdout, tr.stderr)
	}

	// The gateway restarted: the same token, and the worker goes on.
	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr.String())
	}
	p2 := startFleetGateway(t, dir, data, natsAddr)
	if again := readNATSTokenFile(t, data); again != token {
		t.Errorf("the restarted gateway made a new token")
	}
	runs = fmt.Sprintf(`{"id": "tok-2", "task": "append again to %s sleeping 0"}`+"\n", out)
	if err := os.WriteFile(filepath.Join(dir, "runs.jsonl"), []byte(runs), 0o644); err != nil {
		t.Fatal(err)
	}
	r2 := execToolmux(t, dir, "", mine, "submit", "--nats", url, "--lease", "2s", "--wait", "runs.jsonl")
	if r2.code != 0 || !strings.Contains(r2.stdout, `"worker":"local"`) {
		t.Errorf("submit after the restart: exit %d\n%s\n%s\nworker: %s", r2.code, r2.stdout, r2.stderr, w.stderr.String())
	}

	for what, text := range map[string]string{"serve": p.stderr.String() + p2.stderr.String(), "the worker": w.stderr.String(),
		"submit": r.stderr + r2.stderr, "runs": lr.stderr + tr.stderr} {
		if strings.Contains(text, token) {
			t.Errorf("%s showed the token", what)
		}
	}
	w.cmd.Process.Signal(syscall.SIGTERM)
	<-w.exited
}
