package fleet

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerOptions configure an embedded NATS server (toolmux serve
// --nats-listen): a fleet's whole infrastructure inside the gateway.
type ServerOptions struct {
	// Listen is HOST:PORT to accept NATS clients on (port 0: any free).
	Listen string
	// StoreDir keeps the streams and buckets (required: a fleet's
	// state outlives the process).
	StoreDir string
	// Token, when set, is required of every client (nats://TOKEN@HOST:PORT).
	Token string
	// MaxPayload bounds one message (default 8 MiB, so that a task-log
	// record of limits.max_record_bytes, 2 MiB by default, fits).
	MaxPayload int32
	// Name names the server (default "toolmux").
	Name string
}

// Server is an embedded NATS server with JetStream.
type Server struct{ s *server.Server }

// StartServer starts an embedded NATS server with JetStream and waits
// until it accepts connections.
func StartServer(o ServerOptions) (*Server, error) {
	if o.StoreDir == "" {
		return nil, &ConfigError{Field: "store_dir", Reason: "an embedded NATS server needs a directory for its streams"}
	}
	host, portStr, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, &ConfigError{Field: "listen", Reason: fmt.Sprintf("%q is not HOST:PORT: %v", o.Listen, err)}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, &ConfigError{Field: "listen", Reason: fmt.Sprintf("%q: bad port", o.Listen)}
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = 8 << 20
	}
	if o.Name == "" {
		o.Name = "toolmux"
	}
	s, err := server.NewServer(&server.Options{
		ServerName: o.Name, Host: host, Port: port, JetStream: true, StoreDir: o.StoreDir,
		MaxPayload: o.MaxPayload, Authorization: o.Token, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: starting the NATS server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("fleet: the NATS server on %s did not start within 10s", o.Listen)
	}
	return &Server{s: s}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.s.Addr() }

// ClientURL is the URL this process connects with.
func (s *Server) ClientURL() string { return s.s.ClientURL() }

// Shutdown stops the server and waits until it has.
func (s *Server) Shutdown() {
	s.s.Shutdown()
	s.s.WaitForShutdown()
}
