package identity

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// JWTVerifier verifies JWT access tokens locally: signed by a key its
// issuer publishes (a configured issuer, named by its iss), with an
// algorithm of public-key signatures only, within its lifetime. A token
// that is not a JWT is not its (ErrNotMine): an opaque token is for
// introspection, an API key for the keys.
type JWTVerifier struct {
	opts    TokenOptions
	issuers []*issuer
	cache   *tokenCache
}

// allowedAlgs are the signature algorithms accepted: public-key ones only.
// Never "none", and never HMAC (HS256...), whose key would be the issuer's
// public key, known to everyone, in a verifier that took the alg on trust.
var allowedAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512,
	jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512,
	jose.EdDSA,
}

// Verify implements Verifier.
func (v *JWTVerifier) Verify(ctx context.Context, token string) (*Caller, error) {
	now := v.opts.Now()
	key := tokenKey(token)
	if e, ok := v.cache.get(key, now); ok {
		return e.caller, nil
	}
	if !looksLikeJWT(token) {
		return nil, ErrNotMine
	}
	jws, err := jose.ParseSignedCompact(token, allowedAlgs)
	if err != nil {
		return nil, &Error{Kind: KindInvalid, Message: "the token is a malformed JWT, or signed with an algorithm not accepted (only RS, PS, ES and EdDSA)"}
	}
	// The issuer is chosen by the iss the token claims; it is checked
	// again once the signature holds.
	var claimed struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &claimed); err != nil {
		return nil, &Error{Kind: KindInvalid, Message: "the token's payload is not a JSON object"}
	}
	is := v.issuer(claimed.Issuer)
	if is == nil {
		return nil, &Error{Kind: KindIssuer, Message: fmt.Sprintf("the token's issuer %s is not one this gateway trusts (auth.issuers)", quoteClaim(claimed.Issuer))}
	}
	ks, err := is.keySet(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	payload, err := ks.VerifySignature(ctx, token)
	if err != nil {
		if _, ok := errors.AsType[*unavailableError](err); ok || ctx.Err() != nil {
			return nil, unavailable(err)
		}
		return nil, &Error{Kind: KindInvalid, Message: fmt.Sprintf("the token's signature does not verify with any key of its issuer %s", is.cfg.URL)}
	}
	var std jwt.Claims
	var m map[string]any
	if json.Unmarshal(payload, &std) != nil || json.Unmarshal(payload, &m) != nil {
		return nil, &Error{Kind: KindInvalid, Message: "the token's claims do not decode (exp, nbf and iat must be numbers, aud a string or a list of strings)"}
	}
	if std.Issuer != is.cfg.URL {
		return nil, &Error{Kind: KindIssuer, Message: fmt.Sprintf("the token's issuer %s is not one this gateway trusts (auth.issuers)", quoteClaim(std.Issuer))}
	}
	if std.Expiry == nil {
		return nil, &Error{Kind: KindInvalid, Message: "the token has no expiry (exp)"}
	}
	if err := lifetime(std.ValidateWithLeeway(jwt.Expected{Time: now}, v.opts.ClockSkew), std.Expiry.Time(), v.opts.ClockSkew); err != nil {
		return nil, err
	}
	c, err := callerOf(m, v.opts.Claims)
	if err != nil {
		return nil, err
	}
	c.Method, c.Issuer, c.Expires, c.Audience = MethodJWT, is.cfg.URL, std.Expiry.Time(), []string(std.Audience)
	until := earlier(c.Expires.Add(v.opts.ClockSkew), now.Add(v.opts.CacheMaxAge))
	v.cache.put(&cached{key: key, caller: c, until: until})
	return c, nil
}

// lifetime turns go-jose's verdict on a token's times into a refusal.
func lifetime(err error, exp time.Time, skew time.Duration) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jwt.ErrExpired):
		return &Error{Kind: KindExpired, Message: fmt.Sprintf("the token expired at %s (clock skew allowed: %s)", exp.UTC().Format(time.RFC3339), skew)}
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return &Error{Kind: KindExpired, Message: fmt.Sprintf("the token is not valid yet (nbf or iat after now; clock skew allowed: %s)", skew)}
	}
	return &Error{Kind: KindInvalid, Message: "the token's lifetime claims do not hold", Err: err}
}

// issuer returns the configured issuer iss names; nil for none.
func (v *JWTVerifier) issuer(iss string) *issuer {
	for _, is := range v.issuers {
		if is.cfg.URL == iss {
			return is
		}
	}
	return nil
}

// looksLikeJWT reports whether token has the form of a JWS in compact
// serialization: three base64url parts, the first a JSON object naming
// an algorithm. Anything else (an opaque token, an API key, a JWE) is not
// this verifier's to refuse.
func looksLikeJWT(token string) bool {
	head, rest, ok := strings.Cut(token, ".")
	if !ok || strings.Count(rest, ".") != 1 || len(head) > 4096 {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return false
	}
	var h struct {
		Alg *string `json:"alg"`
	}
	return json.Unmarshal(b, &h) == nil && h.Alg != nil
}

// quoteClaim quotes a claim's value for a message, shortened: it comes
// from whoever sent the token.
func quoteClaim(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return fmt.Sprintf("%q", s)
}
