package mcpsource

import (
	"net/http"
)

// headerTransport adds configured headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers http.Header
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) == 0 {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, vs := range t.headers {
		req.Header[k] = vs
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
	hc.Transport = &headerTransport{base: base, headers: h}
	return &hc, own
}
