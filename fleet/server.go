package fleet

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// ServerOptions configure an embedded NATS server (toolmux serve
// --nats-listen): a fleet's whole infrastructure inside the gateway.
type ServerOptions struct {
	// Listen is HOST:PORT to accept NATS clients on (port 0: any free).
	Listen string
	// StoreDir keeps the streams and buckets (required: a fleet's
	// state outlives the process).
	StoreDir string
	// Token, when set, is a credential of every permission
	// (nats://TOKEN@HOST:PORT): the fleet's admin's, and everyone's in a
	// fleet without members.
	Token string
	// Members are the fleet's members with nkeys of their own, each held
	// to its role's permissions (Permissions) on the fleet Fleet names;
	// SetMembers replaces them while the server runs.
	Members []Member
	// MembersOnly requires a credential even with no Token and no
	// Members yet: the server's own gateway's key (Admin), and the
	// members' SetMembers gives it later. Without Token, Members or
	// MembersOnly the server lets every client in (a test's).
	MembersOnly bool
	// Fleet names the fleet whose subjects the members' permissions name
	// (its Prefix and Journal; defaults applied).
	Fleet Options
	// MaxPayload bounds one message (default 8 MiB, so that a task-log
	// record of limits.max_record_bytes, 2 MiB by default, fits).
	MaxPayload int32
	// Name names the server (default "toolmux").
	Name string
}

// Server is an embedded NATS server with JetStream. Started with a
// Token, Members or MembersOnly, nothing connects to it without a
// credential: its own gateway's key (Admin), the token, or a member's key.
type Server struct {
	s *server.Server
	// o are the options it was started with; admin is its gateway's key.
	o     ServerOptions
	admin nkeys.KeyPair

	mu sync.Mutex // one SetMembers at a time
}

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
	// The gateway's own key is made for this start and kept in memory:
	// it is written nowhere, and no other process can hold it.
	admin, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("fleet: making the gateway's key: %w", err)
	}
	srv := &Server{o: o, admin: admin}
	srv.o.Listen = net.JoinHostPort(host, strconv.Itoa(port))
	opts, err := srv.options(o.Members)
	if err != nil {
		return nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("fleet: starting the NATS server: %w", err)
	}
	srv.s = s
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
	if port == server.RANDOM_PORT {
		// A reload must not move it.
		srv.o.Listen = s.Addr().String()
	}
	return srv, nil
}

// options are the server's options with members as its members.
func (s *Server) options(members []Member) (*server.Options, error) {
	host, portStr, _ := net.SplitHostPort(s.o.Listen)
	port, _ := strconv.Atoi(portStr)
	opts := &server.Options{
		ServerName: s.o.Name, Host: host, Port: port, JetStream: true, StoreDir: s.o.StoreDir,
		MaxPayload: s.o.MaxPayload, Authorization: s.o.Token, NoLog: true, NoSigs: true,
	}
	if s.o.Token == "" && len(s.o.Members) == 0 && !s.o.MembersOnly {
		if len(members) > 0 {
			return nil, &ConfigError{Field: "members", Reason: "a server started open to every client takes no members (start it with MembersOnly)"}
		}
		return opts, nil
	}
	adminKey, _ := s.admin.PublicKey()
	users := []*server.NkeyUser{{Nkey: adminKey, Permissions: Permissions(s.o.Fleet, Member{Role: RoleGateway})}}
	for _, m := range members {
		if err := CheckMember(m); err != nil {
			return nil, err
		}
		users = append(users, &server.NkeyUser{Nkey: m.NKey, Permissions: Permissions(s.o.Fleet, m)})
	}
	opts.Nkeys = users
	// The challenge every key signs is sent whether or not members
	// exist yet: the gateway's own key is always one.
	opts.AlwaysEnableNonce = true
	return opts, nil
}

// SetMembers replaces the members: a new member may connect at once; a
// member removed, or whose role changed, is disconnected (and refused,
// or held to its new role, when it connects again). The server is not
// restarted: its clients and streams go on.
func (s *Server) SetMembers(members []Member) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	opts, err := s.options(members)
	if err != nil {
		return err
	}
	if err := s.s.ReloadOptions(opts); err != nil {
		return fmt.Errorf("fleet: giving the NATS server its members: %w", err)
	}
	return nil
}

// Admin are the credentials of the server's own gateway: every
// permission, in this process's memory only.
func (s *Server) Admin() *Credentials { return keyCredentials(s.admin) }

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.s.Addr() }

// ClientURL is the URL this process connects with.
func (s *Server) ClientURL() string { return s.s.ClientURL() }

// Shutdown stops the server and waits until it has.
func (s *Server) Shutdown() {
	s.s.Shutdown()
	s.s.WaitForShutdown()
}
