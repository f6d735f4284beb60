package fleet

import (
	"errors"
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

// ListenError is an address the server cannot listen on: in use
// (errors.Is syscall.EADDRINUSE), not this machine's, not allowed.
type ListenError struct {
	Addr string
	Err  error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("fleet: the NATS server cannot listen on %s: %v", e.Addr, e.Err)
}
func (e *ListenError) Unwrap() error { return e.Err }

// errListenLost is the server's own listen failing after the address
// was found free: taken meanwhile.
var errListenLost = errors.New("the address was taken while the server started")

// StartServer starts an embedded NATS server with JetStream and waits
// until it accepts connections. An address it cannot listen on is a
// *ListenError, said at once.
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
	} else {
		// The server says nothing of an address it cannot listen on (it
		// has no logger here): it would only not be ready, ten seconds
		// later. The address is tried first, for its error, before the
		// server recovers its streams.
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return nil, &ListenError{Addr: o.Listen, Err: err}
		}
		ln.Close()
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
	// Start listens before it returns: no address, no listener.
	s.Start()
	if s.Addr() == nil {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, &ListenError{Addr: o.Listen, Err: errListenLost}
	}
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
