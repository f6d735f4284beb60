package percaller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/vault"
)

// Secret is one secret each user sets for a server, and where it goes:
// Env, an environment variable of the user's own process (stdio), or
// Header, a request header (sse, http) whose value is Format with
// "{value}" replaced by the secret ("" Format: the secret as it is).
type Secret struct {
	Name   string
	Env    string
	Header string
	Format string
}

// SecretVault is where users' secrets are kept: a *vault.Vault.
type SecretVault interface {
	Secret(ctx context.Context, owner, server, secret string) ([]byte, error)
	List(ctx context.Context, owner string) ([]vault.Info, error)
	Store() vault.Store
}

// Secrets is the user_secrets credential: each user's own secrets, from
// the vault, sent as environment variables or headers.
type Secrets struct {
	// Server is the server's name (its entries in the vault are
	// vault.SecretName(Server, secret)).
	Server  string
	Secrets []Secret
	Vault   SecretVault
	// URL, when set, is where a user sets their secrets (the web page's
	// Secrets tab): the URL of the auth_required error of a caller who
	// has not set them all, where the gateway sends the caller's user.
	URL string
}

// SecretsFromConfig returns the secrets of a user_secrets auth section.
func SecretsFromConfig(server string, a config.ServerAuth, v SecretVault) *Secrets {
	s := &Secrets{Server: server, Vault: v}
	for _, us := range a.Secrets {
		s.Secrets = append(s.Secrets, Secret{Name: us.Name, Env: us.Env, Header: us.Header, Format: us.Format})
	}
	return s
}

// OptionsFromConfig returns the bounds of an auth section.
func OptionsFromConfig(a config.ServerAuth) Options {
	return Options{MaxConnections: a.MaxConnections, IdleTimeout: a.IdleTimeout}
}

// Kind is tool.CredentialUserSecret.
func (s *Secrets) Kind() string { return tool.CredentialUserSecret }

// Connect returns base with owner's secrets in its environment or
// headers; an owner without one of them gets auth_required naming the
// command that sets it.
func (s *Secrets) Connect(ctx context.Context, owner string, base mcpsource.Config) (mcpsource.Config, error) {
	if s.Vault == nil {
		return base, &tool.Error{Kind: tool.KindExecutionFailed, Server: s.Server, Err: tool.ErrNotSent,
			Message: fmt.Sprintf("server %s takes each user's own secrets, kept in a vault, and this toolmux has none: toolmux serve opens its data directory's or its fleet's, and a fleet's workers the fleet's; see docs/vault.md", s.Server)}
	}
	cfg := base
	cfg.Env, cfg.Headers = maps.Clone(base.Env), maps.Clone(base.Headers)
	var missing []string
	for _, sec := range s.Secrets {
		v, err := s.Vault.Secret(ctx, owner, s.Server, sec.Name)
		switch {
		case vault.IsNotFound(err):
			missing = append(missing, sec.Name)
			continue
		case err != nil:
			// A vault that is locked, or a value that does not open: the
			// operator's to fix, said without the value.
			return base, &tool.Error{Kind: tool.KindExecutionFailed, Server: s.Server, Err: tool.ErrNotSent,
				Message: fmt.Sprintf("server %s: your secret %s cannot be read: %v", s.Server, sec.Name, err)}
		}
		if sec.Env != "" {
			if cfg.Env == nil {
				cfg.Env = map[string]string{}
			}
			cfg.Env[sec.Env] = string(v)
			continue
		}
		if strings.ContainsAny(string(v), "\r\n\x00") {
			return base, &tool.Error{Kind: tool.KindAuthRequired, Server: s.Server, Err: tool.ErrNotSent,
				Message: fmt.Sprintf("server %s: your secret %s goes in a header, which cannot hold a line break or NUL: set it again with toolmux secrets set %s %s", s.Server, sec.Name, s.Server, sec.Name)}
		}
		if cfg.Headers == nil {
			cfg.Headers = map[string]string{}
		}
		f := sec.Format
		if f == "" {
			f = config.SecretValue
		}
		cfg.Headers[sec.Header] = strings.Replace(f, config.SecretValue, string(v), 1)
	}
	if len(missing) > 0 {
		ae := &AuthRequiredError{Server: s.Server, Missing: missing}
		return base, &tool.Error{Kind: tool.KindAuthRequired, Server: s.Server, Message: ae.Error(), URL: s.URL, Err: errors.Join(ae, tool.ErrNotSent)}
	}
	return cfg, nil
}

// Holders returns the owners who have set every secret of the server.
func (s *Secrets) Holders(ctx context.Context) ([]string, error) {
	return holders(ctx, s.Vault, func(infos []vault.Info) bool {
		has := map[string]bool{}
		for _, in := range infos {
			if srv, sec, ok := vault.ParseName(in.Name); ok && srv == s.Server && sec != "" {
				has[sec] = true
			}
		}
		for _, sec := range s.Secrets {
			if !has[sec.Name] {
				return false
			}
		}
		return true
	})
}

// holders returns the owners of v whose entries hold says hold the
// credential; none without a vault. An owner whose entries cannot be
// listed is left out.
func holders(ctx context.Context, v SecretVault, hold func([]vault.Info) bool) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	owners, err := v.Store().Owners(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range owners {
		if infos, err := v.List(ctx, o); err == nil && hold(infos) {
			out = append(out, o)
		}
	}
	return out, nil
}

// AuthRequiredError is the auth_required error of a caller who has not set
// every secret of a server (in a *tool.Error's chain).
type AuthRequiredError struct {
	Server  string
	Missing []string
}

func (e *AuthRequiredError) Error() string {
	cmds := make([]string, len(e.Missing))
	for i, m := range e.Missing {
		cmds[i] = fmt.Sprintf("toolmux secrets set %s %s", e.Server, m)
	}
	what := "your secret " + e.Missing[0]
	if len(e.Missing) > 1 {
		what = "your secrets " + strings.Join(e.Missing, ", ")
	}
	return fmt.Sprintf("server %s needs %s, which you have not set: set it with %s (the value is read from stdin, never shown again), or PUT /api/secrets/%s/NAME; then call again",
		e.Server, what, strings.Join(cmds, "; "), e.Server)
}
