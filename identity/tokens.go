package identity

import (
	"context"
	"crypto/sha256"
	"net/http"
	"time"
	"unsafe"
)

// Access tokens of identity providers (the issuers), checked as an OAuth
// 2.1 resource server checks them: a JWT locally, against its issuer's
// published keys (JWTVerifier, jwt.go), an opaque token by asking its
// issuer (Introspector, introspect.go, RFC 7662). Either way the caller is
// read from the token's claims (claims.go) and kept for the next request
// with the same token (cache.go), so that a client sending its token on
// every request has it checked once. The audience and the scopes a route
// needs are the gateway's to check (gateway.Auth), with Caller.Audience and
// Caller.Scopes.

// Defaults of the token verifiers, and of the groups of the `auth:`
// section.
const (
	DefaultClockSkew           = 60 * time.Second
	DefaultTokenCacheMaxAge    = 60 * time.Second
	DefaultTokenCacheEntries   = 10_000
	DefaultTimeout             = 10 * time.Second
	DefaultJWKSRefetchInterval = 5 * time.Second
	DefaultSubjectClaim        = "sub"
	DefaultGroupsClaim         = "groups"
	DefaultAdminGroup          = "admin"
	DefaultApproversGroup      = "approvers"
)

// maxDocumentBytes bounds what is read of an issuer's answer (a discovery
// document, a key set, an introspection answer): each is a few kilobytes.
const maxDocumentBytes = 1 << 20

// Issuer is an identity provider whose access tokens are accepted.
type Issuer struct {
	// URL is its issuer identifier: the iss of its tokens, and the base
	// of its discovery documents (OpenID Connect Discovery, else RFC 8414).
	URL string
	// JWKSURL is where its keys are; "" finds them by discovery
	// (jwks_uri).
	JWKSURL string
	// Introspection, when set, checks its opaque tokens.
	Introspection *IntrospectionClient
}

// IntrospectionClient is how the gateway asks an issuer about an opaque
// token (RFC 7662).
type IntrospectionClient struct {
	// URL is the introspection endpoint; "" finds it by discovery
	// (introspection_endpoint).
	URL string
	// ClientID and ClientSecret authenticate the gateway
	// (client_secret_basic); both empty: no client authentication.
	ClientID, ClientSecret string
}

// Claims names the claims a caller is read from. A name is a top-level
// claim, or, when the token has no claim of that name, a path of claims
// separated by dots ("realm_access.roles").
type Claims struct {
	// Subject is the claim of the caller's subject (default "sub").
	Subject string
	// Name is the claim of its display name; default "name", then
	// preferred_username, username and the subject.
	Name string
	// Groups is the claim of its groups (default "groups"): a list of
	// strings, or one string of names separated by spaces or commas.
	Groups string
}

// TokenOptions configure the token verifiers. Zero values mean the
// defaults.
type TokenOptions struct {
	Issuers []Issuer
	Claims  Claims
	// ClockSkew is how far exp, nbf and iat may be off this clock.
	ClockSkew time.Duration
	// CacheMaxAge is the longest a verified token, or an introspection's
	// answer, is kept (never past the token's exp).
	CacheMaxAge time.Duration
	// CacheMaxEntries bounds the tokens kept by each verifier; the oldest
	// goes first.
	CacheMaxEntries int
	// Timeout bounds one request to an issuer.
	Timeout time.Duration
	// JWKSRefetchInterval is the least time between two fetches of an
	// issuer's keys: a token signed by a key not held makes one, so that
	// a rotation is picked up at once, but tokens naming made-up keys
	// cannot make the gateway fetch on every request.
	JWKSRefetchInterval time.Duration
	// Transport makes the requests to issuers; nil: http.DefaultTransport.
	Transport http.RoundTripper
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

func (o TokenOptions) withDefaults() TokenOptions {
	if o.ClockSkew <= 0 {
		o.ClockSkew = DefaultClockSkew
	}
	if o.CacheMaxAge <= 0 {
		o.CacheMaxAge = DefaultTokenCacheMaxAge
	}
	if o.CacheMaxEntries <= 0 {
		o.CacheMaxEntries = DefaultTokenCacheEntries
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.JWKSRefetchInterval <= 0 {
		o.JWKSRefetchInterval = DefaultJWKSRefetchInterval
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Claims = o.Claims.withDefaults()
	return o
}

// withDefaults returns c, its claims not named the defaults.
func (c Claims) withDefaults() Claims {
	if c.Subject == "" {
		c.Subject = DefaultSubjectClaim
	}
	if c.Groups == "" {
		c.Groups = DefaultGroupsClaim
	}
	return c
}

// Tokens verifies the access tokens of the issuers: JWT (a JWT, checked
// locally) and Introspection (any other token, asked of the issuers that
// introspect; nil when none does).
type Tokens struct {
	JWT           *JWTVerifier
	Introspection *Introspector
	issuers       []*issuer
}

// NewTokens returns the verifiers of o's issuers. Nothing is fetched
// before the first token (or Check).
func NewTokens(o TokenOptions) *Tokens {
	o = o.withDefaults()
	t := &Tokens{}
	for _, is := range o.Issuers {
		t.issuers = append(t.issuers, newIssuer(is, o))
	}
	t.JWT = &JWTVerifier{opts: o, issuers: t.issuers, cache: newTokenCache(o.CacheMaxEntries)}
	var intro []*issuer
	for _, is := range t.issuers {
		if is.cfg.Introspection != nil {
			intro = append(intro, is)
		}
	}
	if len(intro) > 0 {
		t.Introspection = &Introspector{opts: o, issuers: intro, cache: newTokenCache(o.CacheMaxEntries)}
	}
	return t
}

// Verifiers returns the verifiers to try, in order: the JWT verifier,
// then introspection.
func (t *Tokens) Verifiers() Verifiers {
	vs := Verifiers{t.JWT}
	if t.Introspection != nil {
		vs = append(vs, t.Introspection)
	}
	return vs
}

// Check reaches every issuer now: its discovery document when one is
// needed, its keys, its introspection endpoint's address. It returns what
// failed, one error per issuer, so that a misconfigured or unreachable
// issuer is said at start rather than at its first token; its tokens are
// refused as unavailable meanwhile, and it is tried again then.
func (t *Tokens) Check(ctx context.Context) []error {
	var errs []error
	for _, is := range t.issuers {
		if err := is.check(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// tokenKey is what a verified token is cached by: never the token.
func tokenKey(token string) [sha256.Size]byte { return tokenHash(token) }

// tokenHash is the SHA-256 of token, read in place: converting a token of
// a kilobyte to bytes would allocate its copy on every request (crypto's
// assembly defeats escape analysis), and the hash only reads it.
func tokenHash(token string) [sha256.Size]byte {
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token)))
}
