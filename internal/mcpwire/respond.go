package mcpwire

import (
	"errors"
	"net/http"
	"sync"
)

// ErrAnswered is returned by a Responder's Send once the response was
// written (or writing failed): a notification sent after its request's
// answer has nowhere to go.
var ErrAnswered = errors.New("mcpwire: the request was answered already")

// A Responder answers one HTTP POST that carried one JSON-RPC request, as
// MCP's streamable HTTP transport allows: with the response alone as
// application/json when nothing has to go before it, as the go-sdk's
// clients (and every client) read most cheaply; as text/event-stream
// once something does (a progress notification, a question for the
// client), the response then being the stream's last event. Its methods
// may be called from any goroutine.
type Responder struct {
	w http.ResponseWriter

	mu   sync.Mutex
	sse  bool // the stream began
	done bool // the response was written, or a write failed
	buf  []byte
}

// NewResponder returns a responder writing to w.
func NewResponder(w http.ResponseWriter) *Responder { return &Responder{w: w} }

// Send writes a message that goes before the response: a notification,
// or a request of the server's.
func (r *Responder) Send(msg []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return ErrAnswered
	}
	if !r.sse {
		r.sse = true
		h := r.w.Header()
		h.Set("Cache-Control", "no-cache, no-transform")
		h.Set("Content-Type", "text/event-stream")
		h.Set("Connection", "keep-alive")
		r.w.WriteHeader(http.StatusOK)
	}
	return r.event(msg)
}

// Reply writes the response; only the first reply is written.
func (r *Responder) Reply(msg []byte) error { return r.ReplyStatus(http.StatusOK, msg) }

// ReplyStatus writes the response with an HTTP status, as 2026-07-28
// answers some errors (404 for a method not found, 400 for invalid
// params): when the answer is a stream already, its status was sent,
// and the response goes as its last event.
func (r *Responder) ReplyStatus(status int, msg []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return ErrAnswered
	}
	if r.sse {
		err := r.event(msg)
		r.done = true
		return err
	}
	r.done = true
	h := r.w.Header()
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Content-Type", "application/json")
	r.w.WriteHeader(status)
	_, err := r.w.Write(msg)
	return err
}

// Streaming reports whether the answer became an event stream.
func (r *Responder) Streaming() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sse
}

// event writes one SSE event and flushes it; r.mu is held.
func (r *Responder) event(msg []byte) error {
	r.buf = append(r.buf[:0], "event: message\ndata: "...)
	r.buf = append(r.buf, msg...)
	r.buf = append(r.buf, '\n', '\n')
	if _, err := r.w.Write(r.buf); err != nil {
		r.done = true
		return err
	}
	_ = http.NewResponseController(r.w).Flush()
	return nil
}
