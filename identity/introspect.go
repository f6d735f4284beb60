package identity

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
)

// Introspector verifies opaque access tokens by asking their issuers
// (RFC 7662): a POST of the token to an issuer's introspection endpoint,
// the gateway authenticated as a client (client_secret_basic), the answer
// kept until the token's expiry, at most the cache's max age, so that a
// token revoked at its issuer is refused within that age. An answer that
// the token is not active is kept as long, so that a token nobody issued
// is not asked about on every request. An issuer that cannot be reached
// makes the token unavailable (503), never invalid: the client should try
// again, not throw its token away.
type Introspector struct {
	opts    TokenOptions
	issuers []*issuer
	cache   *tokenCache
	// asking joins the requests that arrive together with one token into
	// one question to the issuers.
	asking singleflight.Group
}

// introspection is what is read of an introspection's answer besides the
// claims a caller is made of.
type introspection struct {
	Active bool     `json:"active"`
	Exp    *float64 `json:"exp"`
	Nbf    *float64 `json:"nbf"`
	Iss    string   `json:"iss"`
}

// Verify implements Verifier. Every token that reaches it is its: it is
// the last verifier, and an opaque token has no form to tell it by.
func (v *Introspector) Verify(ctx context.Context, token string) (*Caller, error) {
	key := tokenKey(token)
	if e, ok := v.cache.get(key, v.opts.Now()); ok {
		return e.caller, e.err
	}
	// The request's context must not end the question of the others
	// joined to it: it is bounded by the client's timeout instead.
	ch := v.asking.DoChan(hex.EncodeToString(key[:]), func() (any, error) {
		e := v.ask(context.WithoutCancel(ctx), token)
		if KindOf(e.err) != KindUnavailable {
			e.key = key
			v.cache.put(e)
		}
		return e, nil
	})
	select {
	case r := <-ch:
		e := r.Val.(*cached)
		return e.caller, e.err
	case <-ctx.Done():
		return nil, unavailable(ctx.Err())
	}
}

// ask puts token to the issuers that introspect, in order, and returns
// the first active answer's caller; else the token is invalid, or
// unavailable when an issuer could not be asked.
func (v *Introspector) ask(ctx context.Context, token string) *cached {
	now := v.opts.Now()
	var unreachable error
	for _, is := range v.issuers {
		m, in, err := v.post(ctx, is, token)
		if err != nil {
			unreachable = errors.Join(unreachable, err)
			continue
		}
		if !in.Active {
			continue
		}
		return v.callerOf(is, m, in, now)
	}
	if unreachable != nil {
		return &cached{err: unavailable(unreachable)}
	}
	return &cached{err: &Error{Kind: KindInvalid, Message: "the token is not active at any issuer that introspects (unknown, expired or revoked)"},
		until: now.Add(v.opts.CacheMaxAge)}
}

// callerOf makes the caller of an active answer, kept until the token's
// expiry, at most the cache's max age.
func (v *Introspector) callerOf(is *issuer, m map[string]any, in introspection, now time.Time) *cached {
	skew := v.opts.ClockSkew
	until := now.Add(v.opts.CacheMaxAge)
	var exp time.Time
	if in.Exp != nil {
		exp = time.Unix(int64(*in.Exp), 0)
		if now.Add(-skew).After(exp) {
			return &cached{err: &Error{Kind: KindExpired, Message: fmt.Sprintf("the token expired at %s (clock skew allowed: %s)", exp.UTC().Format(time.RFC3339), skew)},
				until: now.Add(v.opts.CacheMaxAge)}
		}
		until = earlier(until, exp.Add(skew))
	}
	if in.Nbf != nil && now.Add(skew).Before(time.Unix(int64(*in.Nbf), 0)) {
		// Not cached: it will be good soon.
		return &cached{err: &Error{Kind: KindExpired, Message: fmt.Sprintf("the token is not valid yet (nbf after now; clock skew allowed: %s)", skew)}}
	}
	if in.Iss != "" && in.Iss != is.cfg.URL {
		return &cached{err: &Error{Kind: KindIssuer, Message: fmt.Sprintf("the introspection endpoint of %s says the token's issuer is %s", is.cfg.URL, quoteClaim(in.Iss))},
			until: now.Add(v.opts.CacheMaxAge)}
	}
	c, err := callerOf(m, v.opts.Claims)
	if err != nil {
		return &cached{err: err, until: now.Add(v.opts.CacheMaxAge)}
	}
	c.Method, c.Issuer, c.Expires, c.Audience = MethodIntrospection, is.cfg.URL, exp, audienceOf(m)
	return &cached{caller: c, until: until}
}

// post asks is about token and returns its answer, as claims and as what
// is read of it besides.
func (v *Introspector) post(ctx context.Context, is *issuer, token string) (map[string]any, introspection, error) {
	endpoint, err := is.introspectionURL(ctx)
	if err != nil {
		return nil, introspection{}, err
	}
	fail := func(err error) (map[string]any, introspection, error) {
		return nil, introspection{}, &unavailableError{issuer: is.cfg.URL, what: "the introspection endpoint", err: err}
	}
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if c := is.cfg.Introspection; c.ClientID != "" {
		// RFC 6749 section 2.3.1: both form-encoded before Basic.
		req.SetBasicAuth(url.QueryEscape(c.ClientID), url.QueryEscape(c.ClientSecret))
	}
	resp, err := is.client.Do(req)
	if err != nil {
		// The error names the endpoint, never the token (it is in the
		// body, not the URL).
		return fail(err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fail(fmt.Errorf("%s answered %s: it does not accept the gateway's client credentials (introspection.client_id, client_secret_env)", endpoint, resp.Status))
	case resp.StatusCode != http.StatusOK:
		return fail(fmt.Errorf("%s answered %s", endpoint, resp.Status))
	}
	body, err := readBounded(resp.Body)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", endpoint, err))
	}
	var m map[string]any
	var in introspection
	if json.Unmarshal(body, &m) != nil || m == nil || json.Unmarshal(body, &in) != nil {
		return fail(fmt.Errorf("%s answered something that is not an introspection's JSON object (active a boolean, exp and nbf numbers)", endpoint))
	}
	return m, in, nil
}
