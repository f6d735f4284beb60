package config

import (
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// A server's auth: section (docs/identity.md, "On whose behalf"): the
// credential each caller's own connection to the server is opened with.
// kind picks the credential; each kind reads its own keys in a parse
// function of its own, beside the keys every kind shares (the bounds of
// the per-caller connections).

// The kinds of credential a server's auth section may name.
const (
	// AuthUserSecrets: each user sets their own secrets (toolmux secrets
	// set), sent as environment variables of the user's own process
	// (stdio) or as headers (sse, http).
	AuthUserSecrets = "user_secrets"
	// AuthOAuth: toolmux is the OAuth client of the server on each
	// user's behalf (sse and http servers): each user authorizes it once
	// at the server's authorization server (package upstreamauth).
	AuthOAuth = "oauth"
	// AuthTokenExchange: the caller's token exchanged at its IdP for one
	// whose audience is the server (RFC 8693).
	AuthTokenExchange = "token_exchange"
)

// ServerAuth is a server's auth section: with one, every call to the
// server goes over a connection of the caller's own, opened with the
// caller's credential.
type ServerAuth struct {
	// Kind is AuthUserSecrets, AuthOAuth or AuthTokenExchange.
	Kind string
	// Secrets are the secrets each user sets for a user_secrets server,
	// by name, in the order the file gives them.
	Secrets []UserSecret
	// ClientID and ClientSecretEnv, for an oauth server, are a client an
	// operator registered for the gateway at the server's authorization
	// server (the secret read from the environment variable named, never
	// from the file); "": the gateway registers itself (a Client ID
	// Metadata Document, or dynamic registration).
	ClientID, ClientSecretEnv string
	// Scopes, for an oauth server, are asked for; nil: those the server
	// says it wants.
	Scopes []string
	// Exchange is a token_exchange section's own part.
	Exchange *TokenExchange
	// MaxConnections bounds the callers' connections (for stdio, their
	// processes) open at once; 0: the default of package percaller.
	MaxConnections int
	// IdleTimeout closes a caller's connection unused that long; 0: the
	// default of package percaller.
	IdleTimeout time.Duration
	// Line is where the section is, for errors found later.
	Line int
}

// UserSecret is one secret a user sets for a server, and where it goes:
// exactly one of Env (a stdio server's environment variable) and Header
// (an sse or http server's request header, its value Format with
// "{value}" replaced by the secret).
type UserSecret struct {
	Name   string
	Env    string
	Header string
	Format string
}

// SecretValue is what a secret's format has where the secret goes.
const SecretValue = "{value}"

// authKinds are the kinds available, as errors name them.
const authKinds = AuthUserSecrets + ", " + AuthOAuth + " or " + AuthTokenExchange

// maxAuthConnections bounds max_connections: each may be a process.
const maxAuthConnections = 10_000

var (
	// serverAuthKeys are the keys every kind of auth section has.
	serverAuthKeys = []string{"kind", "max_connections", "idle_timeout"}
	// serverAuthKindKeys are the keys of each kind besides serverAuthKeys.
	serverAuthKindKeys = map[string][]string{
		AuthUserSecrets:   {"secrets"},
		AuthOAuth:         {"client_id", "client_secret_env", "scopes"},
		AuthTokenExchange: tokenExchangeKeys,
	}
	userSecretKeys = []string{"env", "header", "format"}
)

// serverAuth reads a server's auth section; the server's transport is
// known.
func (p *parser) serverAuth(d *serverDecl, e *entry) *ServerAuth {
	kp := d.sp + ".auth"
	a := &ServerAuth{Line: e.k.Line}
	if d.commandServer() {
		p.errAt(e.k, kp, "applies only to MCP servers (stdio, sse, http), but this server has %s", d.has())
		return nil
	}
	es, ok := p.entries(e.v, kp)
	if !ok {
		return nil
	}
	var kindNode *yaml.Node
	for _, f := range es {
		if f.key == "kind" {
			kindNode = f.v
			a.Kind, _ = p.str(f.v, kp+".kind")
		}
	}
	switch {
	case kindNode == nil:
		p.errAt(e.k, kp, "needs kind (%s)", authKinds)
		return nil
	case serverAuthKindKeys[a.Kind] == nil:
		p.errAt(kindNode, kp+".kind", "unknown kind %s (expected %s)", quote(a.Kind), authKinds)
		return nil
	}
	known := append(slices.Clone(serverAuthKeys), serverAuthKindKeys[a.Kind]...)
	var secrets *entry
	for i, f := range es {
		fp := kp + "." + f.key
		if !slices.Contains(known, f.key) {
			p.errAt(f.k, fp, "%s", unknownKeyMsg(f.key, known, nil))
			continue
		}
		switch f.key {
		case "max_connections":
			if v, ok := p.integer(f.v, fp, 1, maxAuthConnections); ok {
				a.MaxConnections = v
			}
		case "idle_timeout":
			p.setDuration(&a.IdleTimeout, f.v, fp)
		case "secrets":
			secrets = &es[i]
		}
	}
	switch a.Kind {
	case AuthUserSecrets:
		p.userSecrets(d, e.k, secrets, kp, a)
	case AuthOAuth:
		p.serverOAuth(d, kindNode, es, kp, a)
	case AuthTokenExchange:
		p.tokenExchange(d, e.k, es, kp, a)
	}
	return a
}

// userSecrets reads the secrets of a user_secrets section: each named
// secret goes to an environment variable of a stdio server, or a header
// of an sse or http one.
func (p *parser) userSecrets(d *serverDecl, section *yaml.Node, secrets *entry, kp string, a *ServerAuth) {
	if secrets == nil {
		p.errAt(section, kp, "kind %s needs secrets (each secret's name and where it goes: env or header)", AuthUserSecrets)
		return
	}
	sp := kp + ".secrets"
	es, _ := p.entries(secrets.v, sp)
	if len(es) == 0 {
		p.errAt(secrets.k, sp, "must name at least one secret")
		return
	}
	stdio := d.s.Transport == Stdio
	for _, s := range es {
		fp := sp + "." + s.key
		if !validSecretName(s.key) {
			p.errAt(s.k, fp, "a secret's name is letters, digits, '_', '-' and '.' (at most 128), got %s", quote(s.key))
			continue
		}
		us := UserSecret{Name: s.key}
		var envN, headerN, formatN *yaml.Node
		ok := p.element(s.v, fp, userSecretKeys, func(f entry, ffp string) {
			v, ok := p.str(f.v, ffp)
			if !ok {
				return
			}
			switch f.key {
			case "env":
				envN, us.Env = f.k, v
				if !validEnvName(v) {
					p.errAt(f.v, ffp, "%s is not an environment variable name", quote(v))
				}
			case "header":
				headerN, us.Header = f.k, v
				if !validHeaderName(v) {
					p.errAt(f.v, ffp, "%s is not an HTTP header name", quote(v))
				}
			case "format":
				formatN, us.Format = f.k, v
				if strings.Count(v, SecretValue) != 1 {
					p.errAt(f.v, ffp, "must hold %s once, where the secret goes", SecretValue)
				}
			}
		})
		if !ok {
			continue
		}
		switch {
		case envN != nil && headerN != nil:
			p.errAt(headerN, fp+".header", "a secret goes to either env or header, not both")
		case envN == nil && headerN == nil && stdio:
			p.errAt(s.k, fp, "needs env (the environment variable of the user's process it goes in)")
		case envN == nil && headerN == nil:
			p.errAt(s.k, fp, "needs header (the request header it goes in)")
		case envN != nil && !stdio:
			p.errAt(envN, fp+".env", "applies only to stdio servers, but this server has %s (use header)", d.has())
		case headerN != nil && stdio:
			p.errAt(headerN, fp+".header", "applies only to sse and http servers, but this server has command (use env)")
		case formatN != nil && headerN == nil:
			p.errAt(formatN, fp+".format", "applies only to a secret sent as a header")
		}
		if i := slices.IndexFunc(a.Secrets, func(o UserSecret) bool {
			return o.Env != "" && o.Env == us.Env || o.Header != "" && strings.EqualFold(o.Header, us.Header)
		}); i >= 0 {
			p.errAt(s.k, fp, "goes where secret %s goes already", a.Secrets[i].Name)
			continue
		}
		a.Secrets = append(a.Secrets, us)
	}
}

// validSecretName: a secret's name is one segment of its vault entry's
// name and an argument of toolmux secrets set, so it is kept plain.
func validSecretName(s string) bool {
	return s != "" && len(s) <= 128 && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	}) < 0 && s != "." && s != ".."
}
