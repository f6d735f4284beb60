package identity

import (
	"fmt"
	"time"

	"github.com/toolmux/toolmux/config"
)

// Settings are what the `auth:` section says, defaults applied: the
// options of the token verifiers, and the groups and files the rest of
// toolmux reads.
type Settings struct {
	Tokens TokenOptions
	// AdminGroup is the group whose members see every caller's tasks,
	// approvals and listings.
	AdminGroup string
	// ApproversGroup is the group whose members answer approvals.
	ApproversGroup string
	// KeysFile is the file of the API keys; "" for the default in the
	// data directory.
	KeysFile string
	// Page, when set, is the web page's login (auth.page).
	Page *PageSettings
}

// PageSettings are what auth.page says: the login, and its sessions.
type PageSettings struct {
	Login    LoginOptions
	Sessions SessionOptions
	// LoginTimeout is how long a login may take at the provider; 0 means
	// DefaultLoginTimeout.
	LoginTimeout time.Duration
}

// FromConfig returns the settings of c, the clients' secrets read from
// the environment variables it names (getenv; one unset or empty is an
// error naming it, not a gateway that would fail every introspection).
func FromConfig(c config.Auth, getenv func(string) string) (Settings, error) {
	s := Settings{AdminGroup: c.AdminGroup, ApproversGroup: c.ApproversGroup, KeysFile: c.Keys}
	if s.AdminGroup == "" {
		s.AdminGroup = DefaultAdminGroup
	}
	if s.ApproversGroup == "" {
		s.ApproversGroup = DefaultApproversGroup
	}
	s.Tokens = TokenOptions{
		Claims:              Claims{Subject: c.Claims.Subject, Name: c.Claims.Name, Groups: c.Claims.Groups},
		ClockSkew:           c.ClockSkew,
		CacheMaxAge:         c.TokenCache.MaxAge,
		CacheMaxEntries:     c.TokenCache.MaxEntries,
		Timeout:             c.Timeout,
		JWKSRefetchInterval: c.JWKSRefetchInterval,
	}
	for _, ci := range c.Issuers {
		is := Issuer{URL: ci.Issuer, JWKSURL: ci.JWKSURL}
		if in := ci.Introspection; in != nil {
			is.Introspection = &IntrospectionClient{URL: in.URL, ClientID: in.ClientID}
			if in.ClientSecretEnv != "" {
				is.Introspection.ClientSecret = getenv(in.ClientSecretEnv)
				if is.Introspection.ClientSecret == "" {
					return Settings{}, fmt.Errorf("auth.issuers: the client secret of %s's introspection: environment variable %s is not set", ci.Issuer, in.ClientSecretEnv)
				}
			}
		}
		s.Tokens.Issuers = append(s.Tokens.Issuers, is)
	}
	if pg := c.Page; pg != nil {
		secret := getenv(pg.ClientSecretEnv)
		if secret == "" {
			return Settings{}, fmt.Errorf("auth.page: the client secret of the page's login at %s: environment variable %s is not set", pg.Issuer, pg.ClientSecretEnv)
		}
		// The ID token's claims are read as the access tokens' are, but
		// where auth.page.claims says otherwise (a provider may put a
		// claim in one and not in the other: Hydra puts an access token's
		// extra claims under ext).
		claims := s.Tokens.Claims
		for _, f := range []struct {
			dst *string
			v   string
		}{
			{&claims.Subject, pg.Claims.Subject}, {&claims.Name, pg.Claims.Name}, {&claims.Groups, pg.Claims.Groups},
		} {
			if f.v != "" {
				*f.dst = f.v
			}
		}
		s.Page = &PageSettings{
			Login: LoginOptions{Issuer: pg.Issuer, ClientID: pg.ClientID, ClientSecret: secret, Scopes: pg.Scopes,
				Claims: claims, Timeout: c.Timeout, RetryInterval: c.JWKSRefetchInterval},
			Sessions:     SessionOptions{MaxAge: pg.SessionMaxAge, MaxEntries: pg.MaxSessions},
			LoginTimeout: pg.LoginTimeout,
		}
	}
	return s, nil
}
