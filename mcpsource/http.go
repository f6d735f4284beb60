package mcpsource

import (
	"io"
	"mime"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmux/toolmux/internal/jsonscan"
)

// headerTransport adds configured headers to every request, and the
// trace context of the call a request belongs to (when tracing).
type headerTransport struct {
	base    http.RoundTripper
	headers http.Header
	prop    propagation.TextMapPropagator // nil: not tracing
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	traced := t.prop != nil && trace.SpanContextFromContext(req.Context()).IsValid()
	if len(t.headers) == 0 && !traced {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, vs := range t.headers {
		req.Header[k] = vs
	}
	if traced {
		t.prop.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	}
	return t.base.RoundTrip(req)
}

// maxIdleConnsPerHost is how many idle connections to a server are kept
// for reuse: about as many as the calls one session runs at once.
const maxIdleConnsPerHost = 64

// newHTTPClient returns the client for an HTTP server, and the transport to
// close on Close when the source created it.
func newHTTPClient(cfg Config) (*http.Client, *http.Transport) {
	h := make(http.Header)
	for k, v := range cfg.Headers {
		h.Set(k, v)
	}
	if cfg.BearerToken != "" {
		h.Set("Authorization", "Bearer "+cfg.BearerToken)
	}
	var (
		base http.RoundTripper
		own  *http.Transport
		hc   http.Client
	)
	if cfg.HTTPClient != nil {
		hc = *cfg.HTTPClient
		base = hc.Transport
	}
	if base == nil {
		own = http.DefaultTransport.(*http.Transport).Clone()
		// Every call of a shared session is its own POST: with Go's
		// default of 2 idle connections per host, concurrent calls would
		// close and reopen connections all the time (thousands left in
		// TIME_WAIT per 10 000 calls at 64 clients, BENCHMARKS.md §8).
		own.MaxIdleConnsPerHost = maxIdleConnsPerHost
		base = own
	}
	hc.Transport = &spillRoundTripper{base: &headerTransport{base: base, headers: h, prop: cfg.Propagator}, sp: newSpiller(cfg)}
	return &hc, own
}

// spillRoundTripper does for an HTTP server what the stdio transport does
// with its stdout: the answers it sends (a POST's JSON or event stream, the
// standing GET stream of SSE and streamable HTTP) are read through a
// spillReader, and each tools/call posted with a collector in its context
// is registered by its id, which the request body gives.
type spillRoundTripper struct {
	base http.RoundTripper
	sp   *spiller
}

// maxRegisterBody bounds the request body read to find a call's id; a
// larger request (arguments carrying a whole file) is not registered, and
// its answer is held whole as before.
const maxRegisterBody = 1 << 20

func (t *spillRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if col := collectorFrom(req.Context()); col != nil && req.Method == http.MethodPost && req.Body != nil &&
		req.ContentLength >= 0 && req.ContentLength <= maxRegisterBody && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, err := io.ReadAll(io.LimitReader(body, maxRegisterBody))
			body.Close()
			// Scanned, not decoded: only the id of a tools/call is needed.
			if m := jsonscan.Scan(b); err == nil && m.Closed && string(m.Method) == `"tools/call"` {
				if key := rawIDKey(m.ID); key != "" {
					t.sp.expectKey(key, col)
				}
			}
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		resp.Body = newSpillReader(resp.Body, t.sp)
	case "text/event-stream":
		r := newSpillReader(resp.Body, t.sp)
		r.sse = true
		resp.Body = r
	}
	return resp, nil
}
