package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/testservers"
)

// waitingConnect connects, waiting (ConnectWith with a short Wait), to
// the server at port on loopback, in the background: the failed attempts
// come on retries, the outcome on done.
func waitingConnect(t *testing.T, ctx context.Context, port int) (retries <-chan fleet.Retry, done <-chan connected) {
	t.Helper()
	rc := make(chan fleet.Retry, 100)
	w := &fleet.Wait{First: 50 * time.Millisecond, Most: 200 * time.Millisecond, OnRetry: func(r fleet.Retry) {
		select {
		case rc <- r:
		default:
		}
	}}
	dc := make(chan connected, 1)
	go func() {
		f, err := fleet.ConnectWith(ctx, fmt.Sprintf("nats://127.0.0.1:%d", port), "waiting", fleet.Options{}, fleet.ConnectOptions{Wait: w})
		dc <- connected{f, err}
	}()
	return rc, dc
}

// connected is what a waiting connection came to.
type connected struct {
	f   *fleet.Fleet
	err error
}

// nextRetry is the next failed attempt told; a connection that ended
// instead fails the test.
func nextRetry(t *testing.T, retries <-chan fleet.Retry, done <-chan connected) fleet.Retry {
	t.Helper()
	select {
	case r := <-retries:
		return r
	case res := <-done:
		if res.f != nil {
			res.f.Close()
		}
		t.Fatalf("did not wait: %v", res.err)
	}
	return fleet.Retry{}
}

// opened checks that the waiting connection opened the fleet, and closes it.
func opened(t *testing.T, done <-chan connected) {
	t.Helper()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.f.Close()
	if _, err := res.f.Runs(bg); err != nil {
		t.Errorf("the fleet opened after the wait: %v", err)
	}
}

// A member that waits (a worker) started before its server: each failed
// attempt is told, and once the server is up on that port the member
// connects and opens the fleet.
func TestConnectWithWaitsForServer(t *testing.T) {
	port := testservers.FreePort(t)
	retries, done := waitingConnect(t, bg, port)
	for i := 1; i <= 2; i++ {
		if r := nextRetry(t, retries, done); r.What != fleet.WaitServer || r.Attempt != i || r.Err == nil {
			t.Errorf("retry %d: %+v", i, r)
		}
	}
	startNATS(t, t.TempDir(), port)
	opened(t, done)
}

// A wait ends with its context: an *UnreachableError wrapping the
// context's error.
func TestConnectWithWaitEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	retries, done := waitingConnect(t, ctx, testservers.FreePort(t))
	nextRetry(t, retries, done)
	cancel()
	err := (<-done).err
	var ue *fleet.UnreachableError
	if !errors.As(err, &ue) || !errors.Is(err, context.Canceled) {
		t.Errorf("a wait cancelled: %v", err)
	}
}

// An address in use is a *ListenError at once (not a server that never
// gets ready).
func TestStartServerAddressInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, err = fleet.StartServer(fleet.ServerOptions{Listen: held.Addr().String(), StoreDir: t.TempDir()})
	var le *fleet.ListenError
	if !errors.As(err, &le) || le.Addr != held.Addr().String() || !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("StartServer on an address in use: %v", err)
	}
}

// URLs are shown without their credentials.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                       "nats://127.0.0.1:4222",
		"nats://s3cret@127.0.0.1:4222":                "nats://xxxxx@127.0.0.1:4222",
		"nats://user:s3cret@h:4222":                   "nats://user:xxxxx@h:4222",
		"s3cret@h:4222":                               "xxxxx@h:4222",
		"nats://a:4222,nats://s3cret@b:4222":          "nats://a:4222,nats://xxxxx@b:4222",
		"nats://s3cret@h:4222/%zz":                    "xxxxx",
		"tls://user:s3cret@h:4222,tls://s3cret@k:422": "tls://user:xxxxx@h:4222,tls://xxxxx@k:422",
	} {
		if got := fleet.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
		if fleet.HasCredentials(in) != (in != "nats://127.0.0.1:4222") {
			t.Errorf("HasCredentials(%q) = %v", in, fleet.HasCredentials(in))
		}
	}
}

// Connected is not ready: a server without JetStream at first (a cluster
// electing its leader answers likewise) is waited for too, until a server
// with JetStream answers on the same port.
func TestConnectWithWaitsForJetStream(t *testing.T) {
	port := testservers.FreePort(t)
	plain, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	plain.Start()
	if !plain.ReadyForConnections(10 * time.Second) {
		t.Fatal("the server without JetStream did not start")
	}
	retries, done := waitingConnect(t, bg, port)
	if r := nextRetry(t, retries, done); r.What != fleet.WaitJetStream || r.Attempt != 1 || r.Next <= 0 || r.Next > 200*time.Millisecond {
		t.Errorf("the first retry: %+v", r)
	}
	plain.Shutdown()
	plain.WaitForShutdown()
	startNATS(t, t.TempDir(), port)
	opened(t, done)
}
