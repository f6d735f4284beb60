package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/internal/mcpwire"
)

// The gateway answers tools/call itself, on /mcp and on the passthrough
// routes, instead of through the go-sdk's streamable HTTP handler: that
// handler decodes a request four times (the body, the envelope, its
// _meta, its params), each through a decoder that allocates 32 KiB, and
// passes it between three goroutines before the tool handler sees it,
// then answers with an event stream even when the answer is a single
// message, which the client then parses as one (BENCHMARKS.md §12).
// Here the POST's own goroutine decodes the request once, makes the
// call, and writes the answer: as application/json when nothing goes
// before it, as an event stream once a progress notification or a
// question to the client (an approval by elicitation, a passthrough
// server's sampling) must.
//
// Only what the go-sdk would serve the same way comes here: a single
// tools/call of an initialized session of the route, with the headers of
// a legacy (pre-2026-07-28) request; everything else (initialize, every
// other method, batches, GETs, DELETEs, malformed requests, requests the
// go-sdk would refuse) goes to the go-sdk, which keeps the sessions. The
// gateway then also takes, before the go-sdk sees them, the client's
// messages about its own calls: notifications/cancelled naming one, and
// the answers to its questions (ids "toolmux-N", which the go-sdk's own
// requests, numbered, never have).

// leanFunc answers a POST of session sid itself, when it can, and reports
// whether it did; body is the whole request body, msg its scan.
type leanFunc func(w http.ResponseWriter, r *http.Request, sid string, body []byte, msg jsonscan.Message) bool

// sessionHeader names a streamable HTTP session.
const sessionHeader = "Mcp-Session-Id"

// Route names of the gateway's own endpoint.
const routeMCP = "/mcp"

// clientAnswer is the client's answer to a question the gateway put to it on
// the stream of a call it answers itself.
type clientAnswer struct {
	result json.RawMessage
	err    *jsonrpc.Error
}

// errCancelledByClient ends a call the client cancelled
// (notifications/cancelled).
var errCancelledByClient = errors.New("the client cancelled the request")

// askPrefix starts the ids of the gateway's own questions to clients.
const askPrefix = `"toolmux-`

// leanRequest reads a tools/call the gateway can answer itself: the
// request and its params as the go-sdk would hand them to a tool handler;
// ok is false for anything to leave to the go-sdk.
func leanRequest(r *http.Request, body []byte, msg jsonscan.Message) (req *mcpwire.Request, params *mcp.CallToolParamsRaw, ok bool) {
	if string(msg.Method) != `"`+mcpwire.MethodToolsCall+`"` || !leanHeaders(r.Header) {
		return nil, nil, false
	}
	req, err := mcpwire.ReadRequest(body)
	if err != nil || req.Method != mcpwire.MethodToolsCall {
		return nil, nil, false
	}
	p, err := req.CallParams()
	if err != nil || len(p.InputResponses) > 0 || len(p.RequestState) > 0 {
		return nil, nil, false
	}
	if _, ok := p.Meta["io.modelcontextprotocol/protocolVersion"]; ok {
		return nil, nil, false // the go-sdk's refusal of a 2026-07-28 request
	}
	return req, &mcp.CallToolParamsRaw{Meta: p.Meta, Name: p.Name, Arguments: p.Arguments}, true
}

// leanBare reads a session's request of method (tools/list, ping) whose
// params are at most its _meta, which the gateway answers itself as it
// answers a tools/call (leanRequest): a tools/list with a cursor, or
// anything else in its params, is the go-sdk's.
func leanBare(r *http.Request, body []byte, msg jsonscan.Message, method string) (*mcpwire.Request, bool) {
	if string(msg.Method) != `"`+method+`"` || !leanHeaders(r.Header) {
		return nil, false
	}
	req, err := mcpwire.ReadRequest(body)
	if err != nil || req.Method != method {
		return nil, false
	}
	if len(req.Params) == 0 {
		return req, true
	}
	if req.Params[0] != '{' {
		return nil, false
	}
	ok := true
	jsonscan.Members(req.Params, func(key, value []byte) bool {
		// A _meta of the new protocol is the go-sdk's to refuse.
		ok = string(key) == "_meta" && value[0] == '{' && !hasMember(value, metaProtocolVersion)
		return ok
	})
	return req, ok
}

// pingResult is the answer to a ping.
var pingResult = json.RawMessage(`{}`)

// leanHeaders reports whether the go-sdk would accept a POST with these
// headers without checking anything the gateway does not.
func leanHeaders(h http.Header) bool {
	if !jsonBody(h) {
		return false
	}
	if !acceptsBoth(h.Values("Accept")) {
		return false
	}
	if v := h.Get("Mcp-Protocol-Version"); v != "" && (v >= multiRoundTrip || !slices.Contains(mcp.SupportedProtocolVersions(), v)) {
		return false
	}
	// The standard headers of SEP-2243, which the go-sdk checks against
	// the message.
	for k := range h {
		if k == "Mcp-Method" || k == "Mcp-Name" || strings.HasPrefix(k, "Mcp-Param-") {
			return false
		}
	}
	return true
}

// acceptsBoth reports whether an Accept header takes both JSON and an
// event stream, as the go-sdk requires of a POST.
func acceptsBoth(values []string) bool {
	var jsonOK, streamOK bool
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(part, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK && streamOK
}

// serveLean serves one request of session rec the gateway answers
// itself: run makes it, with the call's context (ended when the client's
// HTTP request ends, the client cancels it, or the session ends) and the
// stream to reach the client on. It reports false, having written
// nothing, when the session has ended meanwhile (the go-sdk answers).
func (s *clients) serveLean(w http.ResponseWriter, r *http.Request, rec *tracked, id json.RawMessage,
	run func(ctx context.Context, st *leanStream) (any, error)) bool {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer cancel(nil)
	key := string(id)
	s.mu.Lock()
	if rec.ended {
		s.mu.Unlock()
		return false
	}
	if _, dup := rec.calls[key]; dup {
		s.mu.Unlock()
		writeRPCError(w, http.StatusBadRequest, id, codeInvalidRequest, "duplicate in-flight request ID "+key)
		return true
	}
	if rec.calls == nil {
		rec.calls = map[string]context.CancelCauseFunc{}
	}
	rec.calls[key] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(rec.calls, key)
		s.mu.Unlock()
	}()
	// The call ends with the HTTP request it came in (see bind).
	stop := context.AfterFunc(r.Context(), func() { cancel(errClientGone) })
	defer stop()

	st := &leanStream{resp: mcpwire.NewResponder(w), rec: rec, c: s}
	res, err := run(ctx, st)
	var out []byte
	if err == nil {
		var b []byte
		if b, err = mcpwire.Marshal(res); err == nil {
			out = mcpwire.AppendResponse(nil, id, b)
		}
	}
	if err != nil {
		out = mcpwire.AppendError(nil, id, wireError(err))
	}
	_ = st.resp.Reply(out)
	return true
}

// wireError is the error object the go-sdk would answer err with.
func wireError(err error) *mcpwire.Error {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		if wire == err {
			return &mcpwire.Error{Code: wire.Code, Message: wire.Message, Data: wire.Data}
		}
		return &mcpwire.Error{Code: wire.Code, Message: err.Error()}
	}
	return &mcpwire.Error{Message: err.Error()}
}

// intercept takes the client's messages that concern calls the gateway
// answers itself: a notifications/cancelled naming one (the call is
// cancelled), an answer to one of its questions (handed to the question).
// It reports whether it took the message, having answered 202 Accepted.
func (s *clients) intercept(w http.ResponseWriter, sid, route string, body []byte, msg jsonscan.Message) bool {
	switch {
	case msg.Method == nil && (msg.HasResult || msg.HasError) && strings.HasPrefix(string(msg.ID), askPrefix):
		var m struct {
			Result json.RawMessage `json:"result"`
			Error  *jsonrpc.Error  `json:"error"`
		}
		if json.Unmarshal(body, &m) != nil {
			return false
		}
		s.mu.Lock()
		rec := s.byID[sid]
		var ch chan clientAnswer
		if rec != nil && rec.Route == route {
			ch = rec.asks[string(msg.ID)]
			delete(rec.asks, string(msg.ID))
		}
		s.mu.Unlock()
		if ch == nil {
			return false
		}
		ch <- clientAnswer{result: m.Result, err: m.Error} // buffered, and taken once
	case string(msg.Method) == `"`+mcpwire.MethodCancelled+`"` && msg.ID == nil:
		var m struct {
			Params struct {
				RequestID json.RawMessage `json:"requestId"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &m) != nil || len(m.Params.RequestID) == 0 {
			return false
		}
		s.mu.Lock()
		rec := s.byID[sid]
		var cancel context.CancelCauseFunc
		if rec != nil && rec.Route == route {
			cancel = rec.calls[string(m.Params.RequestID)]
		}
		s.mu.Unlock()
		if cancel == nil {
			return false
		}
		cancel(errCancelledByClient)
	default:
		return false
	}
	w.WriteHeader(http.StatusAccepted)
	return true
}

// leanStream is the way back to the client of a call the gateway answers
// itself: the answer to its POST.
type leanStream struct {
	resp *mcpwire.Responder
	rec  *tracked
	c    *clients
}

type leanStreamKey struct{}

// withLeanStream puts st into ctx, for what a passthrough server sends
// during the call.
func withLeanStream(ctx context.Context, st *leanStream) context.Context {
	return context.WithValue(ctx, leanStreamKey{}, st)
}

func leanStreamFrom(ctx context.Context) *leanStream {
	st, _ := ctx.Value(leanStreamKey{}).(*leanStream)
	return st
}

// nextAsk numbers the gateway's questions to clients.
var nextAsk atomic.Uint64

// notify sends a notification to the client, before the answer.
func (st *leanStream) notify(method string, params any) error {
	var b []byte
	if params != nil {
		var err error
		if b, err = mcpwire.Marshal(params); err != nil {
			return err
		}
	}
	return st.resp.Send(mcpwire.AppendNotification(nil, method, b))
}

// progress sends a progress notification.
func (st *leanStream) progress(p *mcp.ProgressNotificationParams) {
	_ = st.notify(mcpwire.MethodProgress, p)
}

// request asks the client something (elicitation, sampling, roots) and
// waits for its answer, or for ctx to end; then the client is told the
// question is withdrawn.
func (st *leanStream) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	b, err := mcpwire.Marshal(params)
	if err != nil {
		return nil, err
	}
	id := askPrefix + strconv.FormatUint(nextAsk.Add(1), 10) + `"`
	ch := make(chan clientAnswer, 1)
	s := st.c
	s.mu.Lock()
	if st.rec.ended {
		s.mu.Unlock()
		return nil, errSessionEnded
	}
	if st.rec.asks == nil {
		st.rec.asks = map[string]chan clientAnswer{}
	}
	st.rec.asks[id] = ch
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(st.rec.asks, id)
		s.mu.Unlock()
	}
	if err := st.resp.Send(mcpwire.AppendRequest(nil, json.RawMessage(id), method, b)); err != nil {
		forget()
		return nil, fmt.Errorf("toolmux: cannot ask the client: %w", err)
	}
	select {
	case a := <-ch:
		if a.err != nil {
			return nil, a.err
		}
		return a.result, nil
	case <-ctx.Done():
		forget()
		_ = st.notify(mcpwire.MethodCancelled, map[string]any{"requestId": json.RawMessage(id), "reason": context.Cause(ctx).Error()})
		return nil, ctx.Err()
	}
}

// elicit asks the client's user, as ServerSession.Elicit would.
func (st *leanStream) elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	raw, err := st.request(ctx, "elicitation/create", p)
	if err != nil {
		return nil, err
	}
	var res mcp.ElicitResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("toolmux: the client's answer to elicitation/create: %w", err)
	}
	return &res, nil
}
