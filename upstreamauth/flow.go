package upstreamauth

import (
	"context"
	"crypto/rand"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/oauth2"

	"github.com/toolmux/toolmux/vault"
)

// pending is an authorization started and not yet completed: what its
// callback needs, kept in memory only (a restart asks the user again).
type pending struct {
	owner, server string
	verifier      string // the PKCE code verifier
	url           string // the authorization URL, given again while it lasts
	expires       time.Time
}

// authRequired returns the error that sends owner to authorize server:
// the authorization URL of the authorization waiting for owner and server
// if there is one still usable, else of a new one. The state in the URL
// is random, single use, expiring, and bound to (owner, server). A client
// of Options.Elsewhere starts none: its error has no URL, and says where
// to authorize.
func (c *Client) authRequired(ctx context.Context, owner string, u *upstream, why string) error {
	if err := vault.CheckOwner(owner); err != nil {
		return err
	}
	if c.opts.Elsewhere != "" {
		return &Error{Kind: KindAuthRequired, Server: u.Name, Message: why + "; " + c.opts.Elsewhere}
	}
	cfg, err := c.setup(ctx, u)
	if err != nil {
		return err
	}
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	key := ownerServer{owner, u.Name}
	if st, ok := c.waiting[key]; ok {
		if p := c.pending[st]; p != nil && now.Before(p.expires) {
			return &Error{Kind: KindAuthRequired, Server: u.Name, URL: p.url, Message: why}
		}
	}
	c.sweep(now)
	if len(c.pending) >= c.opts.MaxPending {
		return &Error{Kind: KindTooManyPending, Server: u.Name,
			Message: fmt.Sprintf("%d authorizations are waiting for their callback already, the most the gateway allows", c.opts.MaxPending)}
	}
	state := rand.Text()
	verifier := oauth2.GenerateVerifier()
	p := &pending{owner: owner, server: u.Name, verifier: verifier, expires: now.Add(c.opts.StateTTL),
		url: cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", u.resource))}
	c.pending[state] = p
	c.waiting[key] = state
	return &Error{Kind: KindAuthRequired, Server: u.Name, URL: p.url, Message: why}
}

// sweep forgets the expired authorizations. c.mu is held.
func (c *Client) sweep(now time.Time) {
	for st, p := range c.pending {
		if !now.Before(p.expires) {
			c.forget(st, p)
		}
	}
}

// forget removes the authorization of state. c.mu is held.
func (c *Client) forget(state string, p *pending) {
	delete(c.pending, state)
	key := ownerServer{p.owner, p.server}
	if c.waiting[key] == state {
		delete(c.waiting, key)
	}
}

// Authorize returns the URL at which owner authorizes the gateway to call
// server on their behalf (the page's "Connect"): that of an authorization
// waiting already, or of a new one. It does not look at the token owner
// may have.
func (c *Client) Authorize(ctx context.Context, owner, server string) (string, error) {
	u, err := c.upstream(server)
	if err != nil {
		return "", err
	}
	err = c.authRequired(ctx, owner, u, "authorization asked")
	if url, ok := AuthorizationURL(err); ok {
		return url, nil
	}
	return "", err
}

// Complete completes the authorization a callback's query answers: the
// state taken (once: a second use of it is KindState), the code exchanged
// for a token with the PKCE verifier and the resource, the token kept in
// the vault for the owner who started it. session is the caller the
// callback came from, when the gateway knows it (a session of its page),
// "" when not: a callback in another caller's session is refused
// (KindWrongCaller), so that no one can have their authorization land in
// someone else's account.
func (c *Client) Complete(ctx context.Context, q url.Values, session string) (owner, server string, err error) {
	state := q.Get("state")
	c.mu.Lock()
	p := c.pending[state]
	if p != nil {
		c.forget(state, p)
	}
	c.mu.Unlock()
	if p == nil || state == "" {
		return "", "", &Error{Kind: KindState, Message: "the callback's state is unknown, or was used already: start the authorization again"}
	}
	if !c.opts.Now().Before(p.expires) {
		return "", "", &Error{Kind: KindState, Server: p.server, Message: "the authorization expired: start it again"}
	}
	if session != "" && session != p.owner {
		return "", "", &Error{Kind: KindWrongCaller, Server: p.server, Message: "the callback came in another caller's session than the one that started the authorization"}
	}
	if e := q.Get("error"); e != "" {
		msg := "the authorization server answered " + e
		if d := q.Get("error_description"); d != "" {
			msg += ": " + redact(d, state)
		}
		return "", "", &Error{Kind: KindDenied, Server: p.server, Message: msg}
	}
	code := q.Get("code")
	if code == "" {
		return "", "", &Error{Kind: KindDenied, Server: p.server, Message: "the callback holds no code"}
	}
	u, err := c.upstream(p.server)
	if err != nil {
		return "", "", err
	}
	cfg, err := c.setup(ctx, u)
	if err != nil {
		return "", "", err
	}
	// RFC 9207: the issuer of the response is the one the request went to.
	if iss := q.Get("iss"); (iss != "" || u.asm.AuthorizationResponseIssParameterSupported) && iss != u.asm.Issuer {
		return "", "", &Error{Kind: KindDenied, Server: p.server, Message: fmt.Sprintf("the callback's issuer is %q, not %q", iss, u.asm.Issuer)}
	}
	tok, err := cfg.Exchange(c.httpContext(ctx), code, oauth2.VerifierOption(p.verifier), oauth2.SetAuthURLParam("resource", u.resource))
	if err != nil {
		return "", "", &Error{Kind: KindExchange, Server: p.server, Message: "the authorization server refused the code", Err: safeError(err, code, p.verifier, cfg.ClientSecret)}
	}
	if err := c.vault.PutToken(ctx, p.owner, p.server, fromOAuth2(tok)); err != nil {
		return "", "", &Error{Kind: KindVault, Server: p.server, Message: "keeping the token", Err: err}
	}
	c.opts.Logger.Info("upstream authorized", "owner", p.owner, "server", p.server)
	if c.opts.Authorized != nil {
		c.opts.Authorized(p.owner, p.server)
	}
	return p.owner, p.server, nil
}

// Callback is the gateway's callback route (Options.RedirectURL): it
// completes an authorization (Complete) and says so to the person's
// browser. session says which caller the request comes from, "" when it
// is not known (nil: never known).
func (c *Client) Callback(session func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The URL holds a code: no cache keeps it, no link carries it on.
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "the callback is a GET", http.StatusMethodNotAllowed)
			return
		}
		who := ""
		if session != nil {
			who = session(r)
		}
		_, server, err := c.Complete(r.Context(), r.URL.Query(), who)
		if err != nil {
			status := http.StatusBadGateway
			switch KindOf(err) {
			case KindState, KindDenied:
				status = http.StatusBadRequest
			case KindWrongCaller:
				status = http.StatusForbidden
			}
			http.Error(w, err.Error(), status)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><title>Connected</title><p id=\"connected\">toolmux is connected to %s on your behalf: you may close this tab and return to your client.</p>\n", html.EscapeString(server))
	})
}
