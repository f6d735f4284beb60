package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/upstreamauth"
	"github.com/toolmux/toolmux/vault"
)

// Users' own connections to the servers that take each user's OAuth
// authorization (a server's auth section of kind oauth, docs/identity.md
// "Per-user OAuth"): each caller sees, starts and revokes their own, and
// only their own: the owner is always the caller of the request
// (identity.Caller.Key), so another's connection cannot even be named. A
// token is never shown.

// TokenVault is where the tokens are kept: a *vault.Vault.
type TokenVault interface {
	Token(ctx context.Context, owner, server string) (vault.OAuthToken, error)
	List(ctx context.Context, owner string) ([]vault.Info, error)
}

// Authorizer is the gateway as the OAuth client of its upstreams: an
// *upstreamauth.Client.
type Authorizer interface {
	// Authorize returns the URL at which owner authorizes the gateway to
	// call server on their behalf.
	Authorize(ctx context.Context, owner, server string) (string, error)
	// Revoke revokes owner's token for server at its authorization server
	// and deletes it.
	Revoke(ctx context.Context, owner, server string) error
}

// Connections is what the /api/connections routes need.
type Connections struct {
	Vault  TokenVault
	Client Authorizer
	// Servers returns the servers users connect to (read at every
	// request: a reload changes them).
	Servers func() []string
	// Changed is told when a caller disconnected from a server, so that
	// their connection to it is closed (nil: not).
	Changed func(owner, server string)
}

// ConnectionInfo is what GET /api/connections says of one server: never
// a token.
type ConnectionInfo struct {
	Server string `json:"server"`
	// Connected says whether the caller has a token for it; Updated is
	// when it was got or last refreshed, Expires when the access token
	// expires (refreshed before, when there is a refresh token).
	Connected bool      `json:"connected"`
	Updated   time.Time `json:"updated,omitzero"`
	Expires   time.Time `json:"expires,omitzero"`
	// Refreshable says whether it can be refreshed without the user.
	Refreshable bool `json:"refreshable,omitempty"`
}

func (s *server) connectionsRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/connections", s.listConnections)
	mux.HandleFunc("POST /api/connections/{server}", s.connect)
	mux.HandleFunc("DELETE /api/connections/{server}", s.disconnect)
}

// connectionOwner is the owner of the request's connections, or false
// after an answer saying why there is none.
func (s *server) connectionOwner(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.o.Connections == nil || s.o.Connections.Client == nil {
		writeError(w, http.StatusNotFound, "not_found", "this toolmux connects to no server on its users' behalf: no server has auth kind oauth, or there is no vault or callback route (docs/identity.md)")
		return "", false
	}
	c := identity.From(r.Context())
	if c == nil {
		writeError(w, http.StatusForbidden, "no_caller", "connections are each caller's own, and this request has no caller: configure authentication (auth: or API keys, docs/identity.md)")
		return "", false
	}
	return c.Key(), true
}

func (s *server) oauthServers() []string {
	if s.o.Connections.Servers == nil {
		return nil
	}
	return s.o.Connections.Servers()
}

// connectionOf is the owner and the server of a request on one server's
// connection, or false after an answer saying why there is none.
func (s *server) connectionOf(w http.ResponseWriter, r *http.Request) (owner, srv string, ok bool) {
	if owner, ok = s.connectionOwner(w, r); !ok {
		return "", "", false
	}
	srv = r.PathValue("server")
	if !slices.Contains(s.oauthServers(), srv) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("server %q takes no user's authorization (auth kind oauth; GET /api/connections lists those that do)", srv))
		return "", "", false
	}
	return owner, srv, true
}

func (s *server) listConnections(w http.ResponseWriter, r *http.Request) {
	owner, ok := s.connectionOwner(w, r)
	if !ok {
		return
	}
	infos, err := s.o.Connections.Vault.List(r.Context(), owner)
	if err != nil {
		writeVaultError(w, err)
		return
	}
	out := []ConnectionInfo{}
	for _, srv := range s.oauthServers() {
		ci := ConnectionInfo{Server: srv}
		i := slices.IndexFunc(infos, func(in vault.Info) bool { return in.Name == vault.TokenName(srv) })
		if i >= 0 {
			t, err := s.o.Connections.Vault.Token(r.Context(), owner, srv)
			switch {
			case vault.IsNotFound(err):
				// Deleted since listed.
			case err != nil:
				writeVaultError(w, err)
				return
			default:
				ci.Connected, ci.Updated, ci.Expires, ci.Refreshable = true, infos[i].Updated, t.Expiry, t.RefreshToken != ""
			}
		}
		out = append(out, ci)
	}
	writeJSON(w, http.StatusOK, map[string]any{"connections": out})
}

// connect answers the URL at which the caller authorizes the gateway to
// call the server on their behalf: the page opens it.
func (s *server) connect(w http.ResponseWriter, r *http.Request) {
	owner, srv, ok := s.connectionOf(w, r)
	if !ok {
		return
	}
	u, err := s.o.Connections.Client.Authorize(r.Context(), owner, srv)
	if err != nil {
		writeAuthorizeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"server": srv, "url": u})
}

// disconnect revokes the caller's token for the server and closes their
// connection to it; a caller without one is answered the same.
func (s *server) disconnect(w http.ResponseWriter, r *http.Request) {
	owner, srv, ok := s.connectionOf(w, r)
	if !ok {
		return
	}
	err := s.o.Connections.Client.Revoke(r.Context(), owner, srv)
	if s.o.Connections.Changed != nil {
		s.o.Connections.Changed(owner, srv)
	}
	if err != nil && upstreamauth.KindOf(err) != upstreamauth.KindExchange {
		writeAuthorizeError(w, err)
		return
	}
	// The authorization server could not be told (KindExchange): the
	// token is deleted all the same, which is what the caller asked.
	w.WriteHeader(http.StatusNoContent)
}

// writeAuthorizeError answers a failure of the OAuth client by its kind.
func writeAuthorizeError(w http.ResponseWriter, err error) {
	k := upstreamauth.KindOf(err)
	status := http.StatusBadGateway
	switch k {
	case upstreamauth.KindTooManyPending:
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "60")
	case upstreamauth.KindUnknownServer:
		status = http.StatusNotFound
	case upstreamauth.KindVault:
		writeVaultError(w, err)
		return
	case "":
		k = "internal"
		status = http.StatusInternalServerError
	}
	writeError(w, status, string(k), err.Error())
}
