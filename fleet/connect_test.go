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

// A member that waits (a worker) started before its server: each failed
// attempt is told, and once the server is up on that port the member
// connects and opens the fleet.
func TestConnectWithWaitsForServer(t *testing.T) {
	port := testservers.FreePort(t)
	retries := make(chan fleet.Retry, 100)
	w := &fleet.Wait{First: 50 * time.Millisecond, Most: 200 * time.Millisecond, OnRetry: func(r fleet.Retry) {
		select {
		case retries <- r:
		default:
		}
	}}
	type result struct {
		f   *fleet.Fleet
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := fleet.ConnectWith(bg, fmt.Sprintf("nats://127.0.0.1:%d", port), "waiting", fleet.Options{}, fleet.ConnectOptions{Wait: w})
		done <- result{f, err}
	}()
	for i := 1; i <= 2; i++ {
		var r fleet.Retry
		select {
		case r = <-retries:
		case res := <-done:
			t.Fatalf("did not wait: %v", res.err)
		}
		if r.What != fleet.WaitServer || r.Attempt != i || r.Err == nil {
			t.Errorf("retry %d: %+v", i, r)
		}
	}
	startNATS(t, t.TempDir(), port)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.f.Close()
	if _, err := res.f.Runs(bg); err != nil {
		t.Errorf("the fleet opened after the wait: %v", err)
	}
}

// A wait ends with its context: an *UnreachableError wrapping the
// context's error.
func TestConnectWithWaitEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	waiting := make(chan struct{}, 1)
	w := &fleet.Wait{First: 50 * time.Millisecond, OnRetry: func(fleet.Retry) {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := fleet.ConnectWith(ctx, fmt.Sprintf("nats://127.0.0.1:%d", testservers.FreePort(t)), "waiting", fleet.Options{}, fleet.ConnectOptions{Wait: w})
		done <- err
	}()
	<-waiting
	cancel()
	err := <-done
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
	retries := make(chan fleet.Retry, 100)
	w := &fleet.Wait{First: 50 * time.Millisecond, Most: 200 * time.Millisecond, OnRetry: func(r fleet.Retry) {
		select {
		case retries <- r:
		default:
		}
	}}
	type result struct {
		f   *fleet.Fleet
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := fleet.ConnectWith(bg, fmt.Sprintf("nats://127.0.0.1:%d", port), "waiting", fleet.Options{}, fleet.ConnectOptions{Wait: w})
		done <- result{f, err}
	}()
	var r fleet.Retry
	select {
	case r = <-retries:
	case res := <-done:
		t.Fatalf("did not wait: %v", res.err)
	}
	if r.What != fleet.WaitJetStream || r.Attempt != 1 || r.Next <= 0 || r.Next > 200*time.Millisecond {
		t.Errorf("the first retry: %+v", r)
	}
	plain.Shutdown()
	plain.WaitForShutdown()
	startNATS(t, t.TempDir(), port)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.f.Close()
	if _, err := res.f.Runs(bg); err != nil {
		t.Errorf("the fleet opened after the wait: %v", err)
	}
}
