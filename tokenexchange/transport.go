package tokenexchange

import (
	"net/http"
)

// Transport returns an http.RoundTripper that sends each request through
// base (nil: http.DefaultTransport) with the upstream's token of the
// caller the request's context carries (Token) as its bearer credential,
// in place of any Authorization the request had. A request whose caller
// has no token to exchange, or whose exchange fails, is not sent: its
// error is the *Error of Token.
//
// It reads the caller from each request's context: the go-sdk's
// streamable client sends a call with the call's context, and the
// requests of the session itself (its event stream, the notifications
// after initialize, its end) with the context the session was connected
// with, which must then be the caller's (a caller's own connection
// opened with context.WithoutCancel of its request's context).
func (e *Exchanger) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{e: e, base: base}
}

type transport struct {
	e    *Exchanger
	base http.RoundTripper
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := t.e.Token(r.Context())
	if err != nil {
		// A RoundTripper must close the body, even on error.
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, err
	}
	// A RoundTripper must not modify the request it is given.
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	return t.base.RoundTrip(r2)
}
