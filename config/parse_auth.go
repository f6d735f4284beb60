package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"
)

// This file reads the auth section: who may call toolmux serve
// (docs/identity.md).

var (
	authKeys = []string{"resource", "issuers", "claims", "clock_skew", "scopes", "admin_group", "approvers_group",
		"self_approval", "keys", "token_cache", "timeout", "jwks_refetch_interval", "page"}
	issuerKeys        = []string{"issuer", "jwks_url", "audiences", "introspection"}
	introspectionKeys = []string{"url", "client_id", "client_secret_env"}
	claimsKeys        = []string{"subject", "name", "groups"}
	tokenCacheKeys    = []string{"max_age", "max_entries"}
	pageKeys          = []string{"issuer", "client_id", "client_secret_env", "scopes", "claims", "session_max_age", "max_sessions", "login_timeout"}
)

// Bounds of the auth section: a clock off by more than an hour is a
// broken clock, not a skew, and a skew that long would accept tokens long
// expired; the cache's entries weigh some hundreds of bytes each.
const (
	maxClockSkew       = 60 * 60 // seconds
	maxTokenCache      = 1_000_000
	maxAuthIssuers     = 100
	maxAuthTimeoutSecs = 5 * 60
	// A session of the page lasts at most 30 days: a cookie stolen from a
	// browser is good for no longer, whatever the file says; a login at
	// the provider (a person typing a password, a second factor) takes
	// at most an hour.
	maxSessionAgeSecs   = 30 * 24 * 60 * 60
	maxLoginTimeoutSecs = 60 * 60
	maxPageSessions     = 1_000_000
)

// envNameRE is the name of an environment variable, as a shell writes it.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// auth reads the auth section.
func (p *parser) auth(n *yaml.Node, kp string) Auth {
	var a Auth
	p.fields(n, kp, authKeys, func(e entry, fp string) {
		switch e.key {
		case "resource":
			a.Resource = p.httpURL(e.v, fp, false)
		case "issuers":
			a.Issuers = p.issuers(e.v, fp)
		case "claims":
			a.Claims = p.claims(e.v, fp)
		case "clock_skew":
			if d, ok := p.duration(e.v, fp); ok {
				if d.Seconds() > maxClockSkew {
					p.errAt(e.v, fp, "must be at most 1h, got %s", quote(deref(e.v).Value))
				} else {
					a.ClockSkew = d
				}
			}
		case "scopes":
			a.Scopes = p.strList(e.v, fp, checkScope)
		case "admin_group":
			a.AdminGroup, _ = p.text(e.v, fp)
		case "approvers_group":
			a.ApproversGroup, _ = p.text(e.v, fp)
		case "self_approval":
			if b, ok := p.boolean(e.v, fp); ok {
				a.SelfApproval = &b
			}
		case "keys":
			if s, ok := p.text(e.v, fp); ok {
				if r, err := resolvePath(s, p.dir, p.lookup); err != nil {
					p.errAt(e.v, fp, "%v", err)
				} else {
					a.Keys = r
				}
			}
		case "token_cache":
			p.fields(e.v, fp, tokenCacheKeys, func(ce entry, cp string) {
				switch ce.key {
				case "max_age":
					p.setDuration(&a.TokenCache.MaxAge, ce.v, cp)
				case "max_entries":
					a.TokenCache.MaxEntries, _ = p.integer(ce.v, cp, 1, maxTokenCache)
				}
			})
		case "timeout":
			if d, ok := p.duration(e.v, fp); ok {
				if d.Seconds() > maxAuthTimeoutSecs {
					p.errAt(e.v, fp, "must be at most 5m, got %s", quote(deref(e.v).Value))
				} else {
					a.Timeout = d
				}
			}
		case "jwks_refetch_interval":
			p.setDuration(&a.JWKSRefetchInterval, e.v, fp)
		case "page":
			a.Page = p.page(e.v, fp)
		}
	})
	return a
}

// claims reads a claims section (auth.claims, auth.page.claims).
func (p *parser) claims(n *yaml.Node, kp string) Claims {
	var c Claims
	p.fields(n, kp, claimsKeys, func(ce entry, cp string) {
		s, _ := p.text(ce.v, cp)
		switch ce.key {
		case "subject":
			c.Subject = s
		case "name":
			c.Name = s
		case "groups":
			c.Groups = s
		}
	})
	return c
}

// page reads auth.page: the web page's login.
func (p *parser) page(n *yaml.Node, kp string) *Page {
	pg := &Page{}
	var issuer, id, env *yaml.Node
	ok := p.fields(n, kp, pageKeys, func(e entry, fp string) {
		switch e.key {
		case "issuer":
			issuer = e.v
			pg.Issuer = p.httpURL(e.v, fp, true)
		case "client_id":
			id = e.v
			pg.ClientID, _ = p.text(e.v, fp)
		case "client_secret_env":
			env = e.v
			pg.ClientSecretEnv = p.envName(e.v, fp)
		case "scopes":
			pg.Scopes = p.strList(e.v, fp, checkScope)
		case "claims":
			pg.Claims = p.claims(e.v, fp)
		case "session_max_age":
			pg.SessionMaxAge = p.boundedDuration(e.v, fp, maxSessionAgeSecs, "720h (30 days)")
		case "max_sessions":
			pg.MaxSessions, _ = p.integer(e.v, fp, 1, maxPageSessions)
		case "login_timeout":
			pg.LoginTimeout = p.boundedDuration(e.v, fp, maxLoginTimeoutSecs, "1h")
		}
	})
	if !ok {
		return nil
	}
	// The gateway is a confidential client: it authenticates itself when
	// it exchanges a code, so that a code that leaked is worth nothing to
	// whoever holds it.
	for _, need := range []struct {
		n    *yaml.Node
		key  string
		what string
	}{
		{issuer, "issuer", "the OpenID Connect provider's issuer identifier, such as https://idp.example.com"},
		{id, "client_id", "the gateway's client id at the provider"},
		{env, "client_secret_env", "the environment variable holding the gateway's client secret"},
	} {
		if need.n == nil {
			p.errAt(n, kp, "needs %s: %s", need.key, need.what)
		}
	}
	return pg
}

// envName reads the name of an environment variable holding a secret.
func (p *parser) envName(n *yaml.Node, kp string) string {
	// Not expanded, and not quoted back: what is written here by mistake
	// may be the secret itself.
	s, ok := p.str(n, kp)
	if !ok {
		return ""
	}
	if !envNameRE.MatchString(s) {
		p.errAt(n, kp, "must be the name of an environment variable (letters, digits and _), such as IDP_CLIENT_SECRET: not the secret itself, nor ${...}")
		return ""
	}
	return s
}

// boundedDuration reads a positive duration of at most maxSecs seconds
// (said as max).
func (p *parser) boundedDuration(n *yaml.Node, kp string, maxSecs float64, max string) time.Duration {
	d, ok := p.duration(n, kp)
	if !ok {
		return 0
	}
	if d.Seconds() > maxSecs {
		p.errAt(n, kp, "must be at most %s, got %s", max, quote(deref(n).Value))
		return 0
	}
	return d
}

// issuers reads auth.issuers: a list of issuers, each named once.
func (p *parser) issuers(n *yaml.Node, kp string) []Issuer {
	items := p.items(n, kp)
	if len(items) > maxAuthIssuers {
		p.errAt(n, kp, "at most %d issuers", maxAuthIssuers)
		return nil
	}
	var out []Issuer
	seen := map[string]*yaml.Node{}
	for i, it := range items {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		var is Issuer
		var name *yaml.Node
		ok := p.element(it, ip, issuerKeys, func(e entry, fp string) {
			switch e.key {
			case "issuer":
				name = e.v
				is.Issuer = p.httpURL(e.v, fp, true)
			case "jwks_url":
				is.JWKSURL = p.httpURL(e.v, fp, true)
			case "audiences":
				is.Audiences = p.nonEmptyStrings(e.v, fp, checkName)
			case "introspection":
				is.Introspection = p.introspection(e.v, fp)
			}
		})
		if !ok {
			continue
		}
		if name == nil {
			p.errAt(it, ip, "an issuer needs issuer: its issuer identifier (the iss of its tokens), such as https://idp.example.com")
			continue
		}
		if is.Issuer == "" {
			continue
		}
		if prev, dup := seen[is.Issuer]; dup {
			p.errAt(name, ip+".issuer", "issuer %s is already configured at line %d", quote(is.Issuer), prev.Line)
			continue
		}
		seen[is.Issuer] = name
		out = append(out, is)
	}
	return out
}

// introspection reads an issuer's introspection section.
func (p *parser) introspection(n *yaml.Node, kp string) *Introspection {
	in := &Introspection{}
	var id, env *yaml.Node
	p.fields(n, kp, introspectionKeys, func(e entry, fp string) {
		switch e.key {
		case "url":
			in.URL = p.httpURL(e.v, fp, true)
		case "client_id":
			id = e.v
			in.ClientID, _ = p.text(e.v, fp)
		case "client_secret_env":
			env = e.v
			in.ClientSecretEnv = p.envName(e.v, fp)
		}
	})
	switch {
	case id != nil && env == nil:
		p.errAt(id, kp+".client_id", "a client_id needs client_secret_env: the environment variable holding the client's secret")
	case env != nil && id == nil:
		p.errAt(env, kp+".client_secret_env", "client_secret_env needs a client_id")
	}
	return in
}

// checkScope checks a scope (RFC 6749 section 3.3: printable ASCII, no
// space, quote or backslash).
func checkScope(s string) string {
	if s == "" {
		return "a scope must not be empty"
	}
	for _, c := range []byte(s) {
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return fmt.Sprintf("%s is not a scope (printable characters without spaces, quotes or backslashes)", quote(s))
		}
	}
	return ""
}

// httpURL reads an absolute http(s) URL (checkHTTPURL); "" when it is
// not one, which is said.
func (p *parser) httpURL(n *yaml.Node, kp string, issuer bool) string {
	s, ok := p.text(n, kp)
	if !ok {
		return ""
	}
	if msg := checkHTTPURL(s, issuer); msg != "" {
		p.errAt(n, kp, "%s", msg)
		return ""
	}
	return s
}

// checkHTTPURL checks an absolute http(s) URL without a query or a
// fragment. With issuer, plain http is allowed on loopback only: tokens
// and keys fetched in the clear could be forged on the way.
func checkHTTPURL(s string, issuer bool) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Sprintf("%s is not an http(s) URL such as https://idp.example.com", quote(s))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Sprintf("%s must have no query or fragment", quote(s))
	}
	if issuer && u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return fmt.Sprintf("%s must use https (plain http only on loopback: localhost, 127.0.0.1, [::1])", quote(s))
	}
	return ""
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
