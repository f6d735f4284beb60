// Package identity says who is calling: the Caller a request was made by
// (a subject, a display name, groups), how a bearer credential is turned
// into one (a Verifier: an API key, a JWT of a trusted issuer, a token
// introspected at its issuer), and the context that carries it to every
// decision a call meets on its way (policy, limits, ownership, records).
//
// The gateway is an OAuth 2.1 resource server in the MCP authorization
// specification's sense: it validates the tokens it is sent and never
// passes them on. A request without a verified caller is refused before
// any route sees it, except where no authentication is configured at all
// (a gateway on loopback without keys or issuers), where there is no
// caller and everything behaves as for one trusted user.
package identity

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Caller is who made a request.
type Caller struct {
	// Subject identifies the caller at its issuer: a token's subject
	// claim, or "key:NAME" for an API key. Two callers are the same
	// caller when their Issuer and Subject are (Key).
	Subject string `json:"subject"`
	// Name is what people read: a token's name claim (else its subject),
	// or the key's name.
	Name string `json:"name"`
	// Groups are the caller's groups, from a token's groups claim or the
	// key's groups.
	Groups []string `json:"groups,omitempty"`
	// Method says how the caller proved it: MethodKey, MethodJWT,
	// MethodIntrospection, or MethodNKey for a fleet's submitter.
	Method string `json:"method"`
	// Issuer is the issuer of the caller's token; "" for a key.
	Issuer string `json:"issuer,omitempty"`
	// Scopes are the scopes the token grants (none for a key).
	Scopes []string `json:"scopes,omitempty"`
	// Expires is when the credential stops being valid; zero for a key.
	Expires time.Time `json:"expires,omitzero"`
	// Audience is the resources the token was issued for (its aud
	// claim); none for a key. What receives the token checks that it
	// names the resource asked for (RFC 8707).
	Audience []string `json:"-"`
}

// The ways a caller proves who it is.
const (
	MethodKey           = "key"
	MethodJWT           = "jwt"
	MethodIntrospection = "introspection"
	// MethodNKey: a run of a fleet, submitted by a member of the fleet
	// with its own nkey (package fleet); its subject is the API key's of
	// the member's name (KeySubject), so that the key of that name sees
	// the member's runs as its own.
	MethodNKey = "nkey"
)

// Key returns what identifies the caller across requests: the same
// person with two tokens of one issuer is one caller. Ownership (tasks,
// approvals, re-issued requests) is keyed by it, and records keep it, so
// it is printable: a key's subject ("key:NAME"), or the issuer and the
// subject with a space between (an issuer is a URL, which has none, and
// never begins with "key:").
func (c *Caller) Key() string {
	if c == nil {
		return ""
	}
	if c.Issuer == "" {
		return c.Subject
	}
	return c.Issuer + " " + c.Subject
}

// In reports whether the caller is in group. A nil caller (no
// authentication configured) is in none.
func (c *Caller) In(group string) bool {
	return c != nil && slices.Contains(c.Groups, group)
}

// InAny reports whether the caller is in one of groups.
func (c *Caller) InAny(groups []string) bool {
	return c != nil && slices.ContainsFunc(groups, c.In)
}

// String names the caller for people and logs: its name, and how it
// proved it. It holds no credential.
func (c *Caller) String() string {
	if c == nil {
		return "nobody"
	}
	return fmt.Sprintf("%s (%s)", c.Name, c.Method)
}

type callerKey struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// From returns the caller ctx carries; nil when none (no authentication
// is configured, or the request did not come through it).
func From(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// Verifier turns a bearer credential into its caller. It returns an
// *Error for a credential it refuses, and ErrNotMine for one it does not
// recognise (another verifier of a Verifiers may).
type Verifier interface {
	Verify(ctx context.Context, token string) (*Caller, error)
}

// ErrNotMine says a verifier does not know a credential of that form.
var ErrNotMine = errors.New("identity: not a credential this verifier knows")

// Verifiers tries each verifier in order, and answers with the first that
// does not say ErrNotMine; a credential none knows is invalid.
type Verifiers []Verifier

// Verify implements Verifier.
func (vs Verifiers) Verify(ctx context.Context, token string) (*Caller, error) {
	for _, v := range vs {
		c, err := v.Verify(ctx, token)
		if errors.Is(err, ErrNotMine) {
			continue
		}
		return c, err
	}
	return nil, &Error{Kind: KindInvalid, Message: "the credential is not an API key of this gateway nor a token of an issuer it trusts"}
}

// Kind says why a credential was refused.
type Kind string

// The kinds of refusal. Each maps to an HTTP status and an RFC 6750
// error code (Status, OAuthError).
const (
	// KindMissing: no bearer credential was sent.
	KindMissing Kind = "missing"
	// KindInvalid: the credential is malformed, unknown, revoked, or its
	// signature does not hold.
	KindInvalid Kind = "invalid"
	// KindExpired: the token's lifetime is over (or not begun).
	KindExpired Kind = "expired"
	// KindAudience: the token was issued for another resource (RFC 8707).
	KindAudience Kind = "audience"
	// KindIssuer: the token's issuer is not one the gateway trusts.
	KindIssuer Kind = "issuer"
	// KindScope: the token lacks a scope the gateway requires (Scope).
	KindScope Kind = "scope"
	// KindUnavailable: the credential could not be checked now (the
	// issuer's keys or its introspection endpoint are unreachable).
	KindUnavailable Kind = "unavailable"
)

// Error is a refused credential. Its message says what was wrong, never
// the credential.
type Error struct {
	Kind    Kind
	Message string
	// Scope is the scope needed, for KindScope.
	Scope string
	// Err is the cause, if any.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of err: an *Error's, KindInvalid for any other
// error, "" for nil.
func KindOf(err error) Kind {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	return KindInvalid
}

// Status is the HTTP status refusing a credential of kind k: 401 for a
// credential that is missing or not good (the client may get another),
// 403 for one without the scope, 503 when it could not be checked.
func (k Kind) Status() int {
	switch k {
	case KindScope:
		return 403
	case KindUnavailable:
		return 503
	}
	return 401
}

// OAuthError is the RFC 6750 error code of kind k, for the
// WWW-Authenticate challenge ("" for a missing credential, which RFC 6750
// answers without one).
func (k Kind) OAuthError() string {
	switch k {
	case KindMissing, KindUnavailable:
		return ""
	case KindScope:
		return "insufficient_scope"
	}
	return "invalid_token"
}
