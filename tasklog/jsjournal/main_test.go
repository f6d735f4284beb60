package jsjournal_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/tasklog/jsjournal"
)

func TestMain(m *testing.M) {
	// TestServerKilled re-executes this binary as the NATS server it kills.
	if arg := os.Getenv(serverEnv); arg != "" {
		os.Exit(serverMain(arg))
	}
	goleak.VerifyTestMain(m)
}

// serverEnv makes the test binary a NATS server: "DIR PORT".
const serverEnv = "JSJOURNAL_TEST_SERVER"

func serverMain(arg string) int {
	var dir string
	var port int
	if _, err := fmt.Sscanf(arg, "%s %d", &dir, &port); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.Start()
	s.WaitForShutdown()
	return 0
}

var bg = context.Background()

// startServer starts an embedded JetStream server keeping its data in dir,
// on port (0: any free port), shut down at the end of the test.
func startServer(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true, ServerName: "journal-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("the embedded NATS server did not start")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func port(s *server.Server) int { return s.Addr().(*net.TCPAddr).Port }

// connect opens a connection (closed at the end of the test) that
// reconnects quickly and for ever, as a worker's would.
func connect(t testing.TB, s *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func openJournal(t testing.TB, js jetstream.JetStream, cfg jsjournal.Config) *jsjournal.Journal {
	t.Helper()
	j, err := jsjournal.Open(bg, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}
