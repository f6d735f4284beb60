package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/mcpsource"
)

// Route is an MCP server served on a passthrough route, with the bounds of
// its sessions.
type Route struct {
	// Server is the server and the transport settings its sessions are
	// opened with; its Name is the route's name.
	Server mcpsource.Config
	// MaxSessions is how many client sessions the route serves at once,
	// each with an upstream session of its own (for a stdio server, a
	// process); a client session beyond it is refused (CodeSessionLimit).
	// 0 means DefaultMaxSessions.
	MaxSessions int
	// IdleTimeout ends a client session that has made no request for this
	// long, and its upstream session (and process) with it. A request in
	// progress (a long call) keeps the session alive. 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxParked bounds the calls of 2026-07-28 clients parked at once on
	// the route: calls whose server (on an older protocol) asked a
	// question, put to the client as input_required, the call waiting for
	// the client's retry with the answer. One more is refused (and
	// cancelled upstream). 0 means DefaultMaxParked.
	MaxParked int
	// ParkTimeout is how long a parked call waits for the client's retry;
	// then it is withdrawn and cancelled upstream. 0 means
	// DefaultParkTimeout.
	ParkTimeout time.Duration
	// Groups, when set, are the only groups whose members (and the admin
	// group's) may use the route: for anyone else it does not exist (404,
	// as a server without a route). Without authentication everyone may.
	Groups []string
}

// Defaults of a Route. Every session of a stdio server is a process (tens
// of megabytes for a Node server), so a few per server, for a few clients
// and their reconnections, is what a laptop affords; a client that leaves
// without ending its session holds a place for the idle timeout.
const (
	DefaultMaxSessions = 8
	DefaultIdleTimeout = 5 * time.Minute
	DefaultMaxParked   = 16
	DefaultParkTimeout = 2 * time.Minute
)

// CodeSessionLimit is the JSON-RPC error code of a client session refused
// because its route serves MaxSessions sessions already. It is in the
// range JSON-RPC leaves to implementations and used by no MCP SDK.
const CodeSessionLimit = -32030

// retryAfter is what a refusal suggests in Retry-After: sessions end when
// their clients end them or idle out, which no one can predict, so a
// client is told to come back in a while rather than at once.
const retryAfter = 30 * time.Second

// RouteSessions describes the sessions of one passthrough route.
type RouteSessions struct {
	// Server names the route.
	Server string `json:"server"`
	// Open counts the upstream sessions held: connected, or connecting
	// for a client's first request.
	Open int `json:"open"`
	// Max and IdleTimeout are the route's bounds, defaults applied.
	Max         int           `json:"max_sessions"`
	IdleTimeout time.Duration `json:"idle_timeout"`
	// Refused counts the client sessions refused for the limit since the
	// gateway started.
	Refused int64 `json:"refused"`
}

// PassthroughSessions returns the sessions of every passthrough route,
// sorted by server name.
func (g *Gateway) PassthroughSessions() []RouteSessions {
	var out []RouteSessions
	for _, name := range g.PassthroughNames() {
		out = append(out, g.routes[name].sessions())
	}
	return out
}

func (r *route) sessions() RouteSessions {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RouteSessions{Server: r.cfg.Name, Open: r.used, Max: r.max, IdleTimeout: r.idle, Refused: r.refused}
}

// A slot is one of a route's MaxSessions places for an upstream session.
// It is taken for a client's initialize request before the go-sdk sees it,
// so that a full route answers with an HTTP status; the link opened for
// the session claims it, and gives it back when it has ended. A slot
// nobody claimed is given back when its request has been served. The
// state changes by compare-and-swap, so a slot is given back exactly once.
type slot struct {
	r     *route
	state atomic.Int32
}

const (
	slotTaken   int32 = iota // taken for a request, not yet claimed
	slotClaimed              // held by a link
	slotFree                 // given back
)

// claim makes a taken slot the link's; it fails for a nil slot or one
// claimed or given back already.
func (s *slot) claim() bool {
	return s != nil && s.state.CompareAndSwap(slotTaken, slotClaimed)
}

// releaseTaken gives the slot back unless a link claimed it.
func (s *slot) releaseTaken() {
	if s.state.CompareAndSwap(slotTaken, slotFree) {
		s.r.giveBack()
	}
}

// release gives a claimed slot back, once whoever calls it.
func (s *slot) release() {
	if s.state.CompareAndSwap(slotClaimed, slotFree) {
		s.r.giveBack()
	}
}

type slotKey struct{}

// slotFrom returns the slot taken for the request that created the session
// whose handler runs with ctx: the go-sdk runs a session's handlers in the
// context of the HTTP request that created it, values kept.
func slotFrom(ctx context.Context) *slot {
	s, _ := ctx.Value(slotKey{}).(*slot)
	return s
}

// take takes a slot, or returns why it cannot: the route is closed, or
// full (counted, and reported).
func (r *route) take() (*slot, *jsonrpc.Error) {
	r.mu.Lock()
	s, refusal, report := r.takeLocked()
	r.mu.Unlock()
	if report {
		r.reportRefusal()
	}
	return s, refusal
}

// takeLocked is take with r.mu held; the caller reports the refusal when
// told to, once r.mu is released.
func (r *route) takeLocked() (s *slot, refusal *jsonrpc.Error, report bool) {
	if r.closed {
		return nil, errRouteClosed, false
	}
	if r.used >= r.max {
		r.refused++
		// At most once a second per route, with the count so far, so that
		// a client retrying in a loop cannot flood the log.
		now := time.Now()
		if report = now.Sub(r.reported) >= time.Second; report {
			r.reported = now
		}
		return nil, r.limitError(), report
	}
	r.used++
	s = &slot{r: r}
	s.state.Store(slotTaken)
	return s, nil, false
}

func (r *route) giveBack() {
	r.mu.Lock()
	r.used--
	r.mu.Unlock()
}

// reportRefusal tells Options.OnSessionRefused of refusals, or else logs
// them.
func (r *route) reportRefusal() {
	rs := r.sessions()
	if r.g.onRefused != nil {
		r.g.onRefused(rs)
		return
	}
	r.g.log.Warn("passthrough session refused: the server has its limit of sessions open",
		"server", rs.Server, "max_sessions", rs.Max, "refused", rs.Refused)
}

// limitError is the answer to a client session beyond the limit: what
// happened, and the two ways out.
func (r *route) limitError() *jsonrpc.Error {
	name := r.cfg.Name
	data, _ := json.Marshal(map[string]any{"server": name, "max_sessions": r.max})
	return &jsonrpc.Error{
		Code: CodeSessionLimit,
		Message: fmt.Sprintf("toolmux: server %s has its limit of %d passthrough sessions open; end one "+
			"(idle sessions end after %s) or raise servers.%s.passthrough.max_sessions "+
			"(passthrough.max_sessions for every server) in the configuration",
			name, r.max, shortDuration(r.idle), name),
		Data: data,
	}
}

// shortDuration writes d as configured: "5m" rather than "5m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// serveHTTP serves the route. An initialize request, which creates a
// session, gets a slot first, or is refused.
func (r *route) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if modernRequest(req) {
		// Sessionless: no session to create, no place to take here (the
		// identity's link takes one, passthrough_modern.go).
		r.modernHandler.ServeHTTP(w, req)
		return
	}
	if req.Method != http.MethodPost || req.Header.Get("Mcp-Session-Id") != "" {
		r.handler.ServeHTTP(w, req)
		return
	}
	// The go-sdk reads the whole body too; it gets it, or the error that
	// stopped the reading (a body over the limit), as it was.
	body, err := io.ReadAll(req.Body)
	req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
	if err != nil || !initializes(body) {
		r.handler.ServeHTTP(w, req)
		return
	}
	s, refusal := r.takeRoom(req.Context())
	if refusal != nil {
		refuse(w, body, refusal)
		return
	}
	defer s.releaseTaken()
	r.handler.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), slotKey{}, s)))
}

// errReader returns err, or EOF for none.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err == nil {
		return 0, io.EOF
	}
	return 0, e.err
}

// initializes reports whether body holds an initialize request, alone or
// in a batch; what is not JSON-RPC is left to the go-sdk to refuse.
func initializes(body []byte) bool {
	msg := jsonscan.Scan(body)
	if !msg.Array {
		return string(msg.Method) == `"`+methodInitialize+`"`
	}
	type message struct {
		Method string `json:"method"`
	}
	var batch []message
	_ = json.Unmarshal(body, &batch)
	return slices.ContainsFunc(batch, func(m message) bool { return m.Method == methodInitialize })
}

// refuse answers a request with 503 and Retry-After, and a JSON-RPC error
// with the request's id in the body, which MCP clients show.
func refuse(w http.ResponseWriter, body []byte, e *jsonrpc.Error) {
	var id jsonrpc.ID
	if msg, err := jsonrpc.DecodeMessage(body); err == nil {
		if call, ok := msg.(*jsonrpc.Request); ok {
			id = call.ID
		}
	}
	out, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: e})
	if err != nil {
		writeRPCError(w, http.StatusServiceUnavailable, nil, int(e.Code), e.Message)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(out)
}
