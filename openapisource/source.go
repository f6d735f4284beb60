// Package openapisource is a toolmux source whose tools are the operations
// of a REST API described by an OpenAPI 3 document: each operation is a
// tool, named by its operationId, whose input schema gathers its path,
// query and header parameters and its JSON request body, and whose
// annotations follow its HTTP method. A call builds the request from the
// arguments, sends it to the API, and returns the response.
//
// The spec is parsed and validated by kin-openapi (which resolves its
// internal references and reports what breaks the specification, and
// where); references to other files or URLs are refused. It is read, from
// a file or a URL, when the tools are first listed and on every refresh,
// so an API whose spec cannot be had is a server that is down, retried as
// such, not an error that stops toolmux.
//
// docs/openapi.md describes it for users.
package openapisource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// Transport is how health reports name this kind of source.
const Transport = "openapi"

// Defaults.
const (
	DefaultTimeout          = 60 * time.Second
	DefaultSpecTimeout      = 30 * time.Second
	DefaultMaxSpecBytes     = 10 << 20
	DefaultMaxResponseBytes = 1 << 20
	DefaultMaxSchemaNodes   = 10000
)

// Config describes one API.
type Config struct {
	// Name is the server's name in toolmux (the "server" of server__tool).
	Name string
	// Spec is the OpenAPI 3 document: a file path or an http(s) URL.
	Spec string
	// BaseURL is where requests go; empty means the spec's first server
	// (its variables at their defaults; a relative one is relative to
	// the spec's URL).
	BaseURL string
	// Headers are sent with every request (and with the request that
	// fetches a spec URL); BearerToken, when set, is sent as
	// "Authorization: Bearer TOKEN" too.
	Headers     map[string]string
	BearerToken string
	// Credential, when set, gives each call its caller's own headers
	// (added to Headers, and winning over them): a caller without their
	// credential gets its error, and nothing is sent. The spec is read
	// without it. CredentialKind names it in call records
	// (tool.CredentialUserSecret, ...).
	Credential     func(ctx context.Context) (http.Header, error)
	CredentialKind string
	// Include and Exclude are path.Match globs over each operation's tool
	// name and its "METHOD /path": an operation is a tool when it matches
	// an include pattern (any, when there is none) and no exclude pattern.
	Include, Exclude []string
	// Timeout bounds one call; default 60 seconds. The caller's context
	// may end it sooner.
	Timeout time.Duration
	// SpecTimeout bounds reading the spec from a URL; default 30 seconds.
	SpecTimeout time.Duration
	// MaxSpecBytes bounds the spec's size; default 10 MiB.
	MaxSpecBytes int64
	// MaxResponseBytes bounds how much of a response is read; default 1
	// MiB. A longer one is cut there and said to be.
	MaxResponseBytes int64
	// MaxSchemaNodes bounds how many schema objects one tool's input
	// schema is written with, references inlined; default 10000. Past
	// it, a schema accepts anything (the API still checks what it gets).
	MaxSchemaNodes int
	// Transport sends the requests; nil means a clone of
	// http.DefaultTransport, closed with the source.
	Transport http.RoundTripper
	// Logger receives warnings (operations left out); nil discards them.
	Logger *slog.Logger
}

// Source is a toolmux source backed by an HTTP API. It is safe for
// concurrent use.
type Source struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	own    *http.Transport // the transport made here, closed by Close

	mu     sync.Mutex
	closed bool
	loaded bool
	base   *url.URL
	ops    map[string]*operation
	tools  []tool.Tool
}

// New checks cfg and returns a source. It reads nothing: the first Tools
// or Call reads the spec.
func New(cfg Config) (*Source, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("openapisource: API %q: "+format, append([]any{cfg.Name}, a...)...)
	}
	if strings.TrimSpace(cfg.Name) == "" {
		return nil, errors.New("openapisource: an API needs a name")
	}
	if strings.TrimSpace(cfg.Spec) == "" {
		return nil, fail("no spec given (a file path or an http(s) URL)")
	}
	if cfg.BaseURL != "" {
		if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fail("base_url %q is not an http(s) URL", cfg.BaseURL)
		}
	}
	for _, p := range slices.Concat(cfg.Include, cfg.Exclude) {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fail("pattern %q: %v", p, err)
		}
	}
	for k, v := range cfg.Headers {
		if strings.ContainsAny(k+v, "\r\n\x00") || k == "" {
			return nil, fail("header %q: a name must not be empty, and neither may contain a line break or NUL byte", k)
		}
	}
	if strings.ContainsAny(cfg.BearerToken, "\r\n\x00") {
		return nil, fail("the bearer token contains a line break or NUL byte")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"timeout", cfg.Timeout}, {"spec timeout", cfg.SpecTimeout}} {
		if d.v < 0 {
			return nil, fail("the %s is negative (%s)", d.name, d.v)
		}
	}
	if cfg.MaxSpecBytes < 0 || cfg.MaxResponseBytes < 0 || cfg.MaxSchemaNodes < 0 {
		return nil, fail("a size bound is negative")
	}
	cfg.Timeout = cmpOr(cfg.Timeout, DefaultTimeout)
	cfg.SpecTimeout = cmpOr(cfg.SpecTimeout, DefaultSpecTimeout)
	cfg.MaxSpecBytes = cmpOr(cfg.MaxSpecBytes, DefaultMaxSpecBytes)
	cfg.MaxResponseBytes = cmpOr(cfg.MaxResponseBytes, DefaultMaxResponseBytes)
	cfg.MaxSchemaNodes = cmpOr(cfg.MaxSchemaNodes, DefaultMaxSchemaNodes)
	cfg.Include, cfg.Exclude = slices.Clone(cfg.Include), slices.Clone(cfg.Exclude)
	s := &Source{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	rt := cfg.Transport
	if rt == nil {
		s.own = http.DefaultTransport.(*http.Transport).Clone()
		rt = s.own
	}
	s.client = &http.Client{Transport: s.headers(rt), CheckRedirect: sameOrigin}
	return s, nil
}

// sameOrigin follows a redirect only to the same scheme, host and port:
// the configured headers and bearer token are added to every request the
// client makes, and must not go to a host a response names.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if from := via[0].URL; req.URL.Scheme != from.Scheme || req.URL.Host != from.Host {
		return http.ErrUseLastResponse
	}
	return nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Name returns the server's name.
func (s *Source) Name() string { return s.cfg.Name }

// Transport returns "openapi".
func (s *Source) Transport() string { return Transport }

// Tools reads and validates the spec and returns a tool per operation,
// sorted by name. It reads the spec on every call: the manager calls
// Tools to list a server for the first time, on Refresh and to retry a
// failed listing, and caches the catalog in between. A spec that cannot
// be read or does not validate is a server_unavailable error whose cause
// is a *SpecError; the previous tools stay callable.
func (s *Source) Tools(ctx context.Context) ([]tool.Tool, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, s.closedError("")
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.SpecTimeout)
	defer cancel()
	doc, specURL, err := loadSpec(sctx, s.client, s.cfg.Spec, s.cfg.MaxSpecBytes)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &tool.Error{Kind: tool.KindServerUnavailable, Server: s.cfg.Name, Message: err.Error(), Err: err}
	}
	base, err := baseURL(s.cfg.BaseURL, doc, specURL)
	if err != nil {
		se := &SpecError{Spec: s.cfg.Spec, Step: "validate", Err: err}
		return nil, &tool.Error{Kind: tool.KindServerUnavailable, Server: s.cfg.Name, Message: se.Error(), Err: se}
	}
	ops, skips := operations(s.cfg.Name, doc, s.cfg.Include, s.cfg.Exclude, s.cfg.MaxSchemaNodes)
	for _, sk := range skips {
		s.log.Warn("openapi: operation left out", "server", s.cfg.Name, "operation", sk.op, "reason", sk.why)
	}
	tools := make([]tool.Tool, len(ops))
	byName := make(map[string]*operation, len(ops))
	for i, op := range ops {
		tools[i] = op.tool
		byName[op.tool.Name] = op
	}
	s.mu.Lock()
	s.loaded, s.base, s.ops, s.tools = true, base, byName, tools
	s.mu.Unlock()
	return slices.Clone(tools), nil
}

// headers wraps rt to add the configured headers and bearer token to
// every request, then the caller's own (withCallerHeaders), which win.
func (s *Source) headers(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		for k, v := range s.cfg.Headers {
			r.Header.Set(k, v)
		}
		if s.cfg.BearerToken != "" {
			r.Header.Set("Authorization", "Bearer "+s.cfg.BearerToken)
		}
		if h, _ := r.Context().Value(callerHeadersKey{}).(http.Header); h != nil {
			for k, vs := range h {
				r.Header[http.CanonicalHeaderKey(k)] = vs
			}
		}
		return rt.RoundTrip(r)
	})
}

type callerHeadersKey struct{}

// withCallerHeaders carries a caller's own headers to the transport,
// which adds them to the request and, on a redirect (to the same origin
// only), to the next.
func withCallerHeaders(ctx context.Context, h http.Header) context.Context {
	return context.WithValue(ctx, callerHeadersKey{}, h)
}

// Credential names the kind of the callers' own credential in call
// records; "" when the API takes none.
func (s *Source) Credential() string { return s.cfg.CredentialKind }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Call sends the operation's request, built from args, and returns the
// response: a 2xx response's body as text, and as structured content when
// it is a JSON object. Any other status is a tool_error quoting the
// status and the body (502, 503 and 504, a gateway or server that is
// down, are server_unavailable, which the manager retries for idempotent
// operations). An API that cannot be reached is server_unavailable too,
// marked as never sent when the connection was never made.
func (s *Source) Call(ctx context.Context, name string, args map[string]any) (*tool.Result, error) {
	s.mu.Lock()
	loaded, closed := s.loaded, s.closed
	s.mu.Unlock()
	if closed {
		return nil, s.closedError(name)
	}
	if !loaded {
		if _, err := s.Tools(ctx); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	op, base := s.ops[name], s.base
	names := make([]string, 0, len(s.tools))
	if op == nil {
		for _, t := range s.tools {
			names = append(names, t.Name)
		}
	}
	s.mu.Unlock()
	if op == nil {
		return nil, &tool.Error{Kind: tool.KindToolNotRegistered, Server: s.cfg.Name, Tool: name,
			Message:    fmt.Sprintf("API %s has no operation named %q", s.cfg.Name, name),
			Suggestion: tool.Closest(name, names)}
	}
	label := op.method + " " + op.path
	r, err := op.build(base.EscapedPath(), args)
	if err != nil {
		return nil, &tool.Error{Kind: tool.KindInvalidParams, Server: s.cfg.Name, Tool: name, Err: err,
			Message: fmt.Sprintf("%s: %v", label, err)}
	}
	u := *base
	u.RawPath = r.path
	u.Path, err = url.PathUnescape(r.path)
	if err != nil {
		return nil, &tool.Error{Kind: tool.KindInvalidParams, Server: s.cfg.Name, Tool: name, Err: err, Message: fmt.Sprintf("%s: %v", label, err)}
	}
	u.RawQuery = r.query

	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(cctx, op.method, u.String(), body)
	if err != nil {
		return nil, &tool.Error{Kind: tool.KindInvalidParams, Server: s.cfg.Name, Tool: name, Err: err, Message: fmt.Sprintf("%s: %v", label, err)}
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	if r.body != nil {
		req.Header.Set("Content-Type", op.body)
	}
	req.Header.Set("Accept", "application/json, */*;q=0.5")
	if s.cfg.Credential != nil {
		h, err := s.cfg.Credential(ctx)
		if err != nil {
			return nil, err
		}
		// Carried to the transport, which adds them after the
		// configured ones, so that they win.
		req = req.WithContext(withCallerHeaders(cctx, h))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, s.sendError(ctx, cctx, name, label, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxResponseBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		kind := tool.KindExecutionFailed
		if cctx.Err() != nil {
			kind = tool.KindTimeout
		}
		return nil, &tool.Error{Kind: kind, Server: s.cfg.Name, Tool: name, Err: err,
			Message: fmt.Sprintf("%s: reading the %s response failed: %v", label, resp.Status, err)}
	}
	cut := int64(len(data)) > s.cfg.MaxResponseBytes
	if cut {
		data = data[:s.cfg.MaxResponseBytes]
	}
	text := string(data)
	if cut {
		text += fmt.Sprintf("\n[toolmux: response cut at %d bytes, the bound of max_response_bytes]", s.cfg.MaxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		kind := tool.KindToolError
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			kind = tool.KindServerUnavailable
		}
		e := &tool.Error{Kind: kind, Server: s.cfg.Name, Tool: name, Detail: text,
			Message: fmt.Sprintf("%s answered %s", label, resp.Status),
			Err:     &StatusError{Code: resp.StatusCode, Status: resp.Status}}
		return nil, e
	}
	if len(data) == 0 {
		return tool.TextResult(fmt.Sprintf("%s answered %s with no body", label, resp.Status)), nil
	}
	res := tool.TextResult(text)
	if !cut && isJSON(resp.Header.Get("Content-Type")) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) == nil && obj != nil {
			// MCP requires structuredContent to be an object; an array
			// or a scalar stays in the text alone.
			res.Structured = obj
		}
	}
	return res, nil
}

// StatusError is the cause of a call whose response was not a success.
type StatusError struct {
	Code   int
	Status string
}

func (e *StatusError) Error() string { return "HTTP " + e.Status }

// isJSON reports whether a Content-Type is JSON (application/json, or a
// +json type such as application/problem+json).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// sendError classifies a request that got no response: the caller gave
// up (its own error), the call's time ran out (timeout), no connection
// could be made (server_unavailable, and never sent: safe to repeat), or
// the connection failed midway (server_unavailable).
func (s *Source) sendError(ctx, cctx context.Context, name, label string, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case cctx.Err() != nil:
		return &tool.Error{Kind: tool.KindTimeout, Server: s.cfg.Name, Tool: name, Err: err,
			Message: fmt.Sprintf("%s did not answer within %s", label, s.cfg.Timeout)}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		err = errors.Join(err, tool.ErrNotSent)
	}
	return &tool.Error{Kind: tool.KindServerUnavailable, Server: s.cfg.Name, Tool: name, Err: err,
		Message: fmt.Sprintf("%s could not be sent: %v", label, unwrapURLError(err))}
}

// unwrapURLError drops url.Error's "Post \"URL\":" prefix: the URL may
// carry a query with arguments, and the message names the operation.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func (s *Source) closedError(name string) error {
	return &tool.Error{Kind: tool.KindServerUnavailable, Server: s.cfg.Name, Tool: name,
		Message: fmt.Sprintf("API %s is closed", s.cfg.Name), Err: tool.ErrNotSent}
}

// Close stops the source: later calls fail, and idle connections are
// closed. Calls under way finish.
func (s *Source) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if s.own != nil {
		s.own.CloseIdleConnections()
	}
	return nil
}
