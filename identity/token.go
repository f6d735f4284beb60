package identity

import (
	"context"
	"fmt"
	"log/slog"
)

// Token is the bearer token a caller authenticated with, when it was an
// access token of an issuer the gateway trusts and it verified (a JWT or
// an introspected token): what token exchange (RFC 8693, package
// tokenexchange) trades at the issuer for a token of an upstream server
// on the caller's behalf. The gateway never passes it on as it is.
//
// It lives in the request's context only (WithToken, TokenFrom): it is
// never stored, recorded or logged, and formatting it in any way (fmt's
// verbs, log/slog, encoding/json) shows "[redacted]", so that a Token
// caught by a log line or an error by mistake leaks nothing. Raw is the
// one way to its value.
type Token struct {
	raw string
}

// Raw returns the token itself, to be sent to its issuer and nowhere else.
func (t Token) Raw() string { return t.raw }

// IsZero reports whether t holds no token.
func (t Token) IsZero() bool { return t.raw == "" }

const redactedToken = "[redacted]"

// String shows no credential.
func (t Token) String() string { return redactedToken }

// GoString shows no credential, for %#v.
func (t Token) GoString() string { return "identity.Token{" + redactedToken + "}" }

// Format shows no credential whatever the verb (%x and %q included,
// which would read a string's bytes rather than call String).
func (t Token) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, t.GoString())
		return
	}
	fmt.Fprint(f, redactedToken)
}

// LogValue shows no credential, for log/slog.
func (t Token) LogValue() slog.Value { return slog.StringValue(redactedToken) }

// MarshalJSON shows no credential: a Token put in a record by mistake
// says it was redacted.
func (t Token) MarshalJSON() ([]byte, error) { return []byte(`"` + redactedToken + `"`), nil }

// MarshalText shows no credential (encoding of map keys, YAML, ...).
func (t Token) MarshalText() ([]byte, error) { return []byte(redactedToken), nil }

type callerTokenKey struct{}

// WithToken returns ctx carrying raw, the verified bearer token of the
// caller ctx carries (With). Only the gateway's authentication sets it,
// and only for an issuer's access token: an API key is no token an issuer
// could exchange.
func WithToken(ctx context.Context, raw string) context.Context {
	return context.WithValue(ctx, callerTokenKey{}, Token{raw: raw})
}

// TokenFrom returns the caller's verified bearer token ctx carries, and
// whether there is one: none when the caller used an API key or the web
// page's session, when no authentication is configured, or outside a
// request.
func TokenFrom(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(callerTokenKey{}).(Token)
	return t, ok && !t.IsZero()
}

// Carry returns dst carrying the caller src carries (With) and the
// caller's token, or none when src has none (whatever dst had): for a
// call made on a context apart from its request's (a task's call, which
// outlives its request), which is still the caller's and may need its
// token for as long as it runs.
func Carry(dst, src context.Context) context.Context {
	t, _ := TokenFrom(src)
	return context.WithValue(With(dst, From(src)), callerTokenKey{}, t)
}
