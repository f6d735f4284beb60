// Command exchangeidp is an identity provider for toolmux's tests of
// token exchange (RFC 8693), built on zitadel/oidc's OpenID provider: it
// issues JWT access tokens to test callers (the client credentials grant:
// each caller a client whose subject is its name, its tokens for the
// gateway's audience), serves discovery and its keys (JWKS), and
// exchanges a caller's token, for a client allowed to, for one whose
// audience is an upstream server it knows and whose subject is the
// caller's.
//
// It is a module of its own, built by the tests (testservers.ExchangeIdP)
// and never imported by toolmux, so that zitadel/oidc and what it needs
// stay out of toolmux's module and binary.
//
// It listens on 127.0.0.1 (-addr), and writes one line to stdout once it
// serves: "issuer URL". GET /stats answers how many token requests of
// each grant it has had ({"client_credentials": N, "token_exchange": N}),
// so that a test can tell a token exchanged from one kept.
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// list is a flag given several times.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var callers, exchangers, targets list
	addr := flag.String("addr", "127.0.0.1:0", "the address to listen on")
	audience := flag.String("audience", "", "the audience (aud) of the callers' tokens: the gateway")
	lifetime := flag.Duration("lifetime", 5*time.Minute, "how long a caller's token lasts")
	exchangeLifetime := flag.Duration("exchange-lifetime", 5*time.Minute, "how long an exchanged token lasts")
	flag.Var(&callers, "caller", "NAME:SECRET, a caller getting tokens by client credentials (repeated)")
	flag.Var(&exchangers, "exchanger", "ID:SECRET, a client allowed to exchange tokens (repeated)")
	flag.Var(&targets, "target", "an audience or resource tokens may be exchanged for (repeated)")
	flag.Parse()
	if *audience == "" || len(callers) == 0 || len(exchangers) == 0 || len(targets) == 0 {
		log.Fatal("exchangeidp: -audience, -caller, -exchanger and -target are required")
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		log.Fatal(err)
	}
	st := &storage{
		key:              key,
		keyID:            uuid.NewString(),
		clients:          map[string]*client{},
		audience:         *audience,
		targets:          targets,
		lifetime:         *lifetime,
		exchangeLifetime: *exchangeLifetime,
	}
	for _, c := range callers {
		id, secret, _ := strings.Cut(c, ":")
		st.clients[id] = &client{id: id, secret: secret, grant: oidc.GrantTypeClientCredentials}
	}
	for _, c := range exchangers {
		id, secret, _ := strings.Cut(c, ":")
		st.clients[id] = &client{id: id, secret: secret, grant: oidc.GrantTypeTokenExchange}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	var cryptoKey [32]byte
	if _, err := rand.Read(cryptoKey[:]); err != nil {
		log.Fatal(err)
	}
	provider, err := op.NewOpenIDProvider(issuer, &op.Config{CryptoKey: cryptoKey, AuthMethodPost: true}, st, op.WithAllowInsecure())
	if err != nil {
		log.Fatal(err)
	}
	oidcHandler := op.RegisterLegacyServer(&server{op.NewLegacyServer(provider, *op.DefaultEndpoints)}, op.AuthorizeCallbackHandler(provider))
	var counts struct{ clientCredentials, tokenExchange atomic.Int64 }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]int64{
			"client_credentials": counts.clientCredentials.Load(),
			"token_exchange":     counts.tokenExchange.Load(),
		})
	})
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/oauth/token" && r.ParseForm() == nil {
			switch oidc.GrantType(r.PostForm.Get("grant_type")) {
			case oidc.GrantTypeClientCredentials:
				counts.clientCredentials.Add(1)
			case oidc.GrantTypeTokenExchange:
				counts.tokenExchange.Add(1)
			}
		}
		oidcHandler.ServeHTTP(w, r)
	}))
	fmt.Fprintln(os.Stdout, "issuer", issuer)
	log.Fatal(http.Serve(ln, mux))
}

// server is zitadel's legacy server, whose token exchange names the
// resources asked for (RFC 8707) in the token's audience besides the
// audiences asked for: what a resource server checks is its own URL in
// aud. zitadel's request takes only audience into aud.
type server struct{ *op.LegacyServer }

func (s *server) TokenExchange(ctx context.Context, r *op.ClientRequest[oidc.TokenExchangeRequest]) (*op.Response, error) {
	for _, res := range r.Data.Resource {
		if !slices.Contains(r.Data.Audience, res) {
			r.Data.Audience = append(r.Data.Audience, res)
		}
	}
	return s.LegacyServer.TokenExchange(ctx, r)
}

// storage is the provider's state: its clients and its one signing key.
// Tokens are JWTs, verified by their signature; none is kept.
type storage struct {
	key              *rsa.PrivateKey
	keyID            string
	clients          map[string]*client
	audience         string
	targets          []string
	lifetime         time.Duration
	exchangeLifetime time.Duration
	mu               sync.Mutex
}

var errUnsupported = errors.New("exchangeidp: not supported")

func (s *storage) client(id, secret string) (*client, error) {
	c, ok := s.clients[id]
	if !ok || c.secret != secret {
		return nil, errors.New("unknown client or wrong secret")
	}
	return c, nil
}

// The client credentials grant: a caller's token, for the gateway.

func (s *storage) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	return s.client(id, secret)
}

func (s *storage) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	return &oidc.JWTTokenRequest{Subject: id, Audience: []string{s.audience}, Scopes: scopes}, nil
}

// Token exchange: the caller's token for one of a target.

func (s *storage) ValidateTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) error {
	if req.GetRequestedTokenType() == "" {
		req.SetRequestedTokenType(oidc.AccessTokenType)
	}
	if req.GetRequestedTokenType() != oidc.AccessTokenType {
		return oidc.ErrInvalidRequest().WithDescription("only access tokens are issued")
	}
	if len(req.GetAudience()) == 0 {
		return oidc.ErrInvalidTarget().WithDescription("name the upstream: audience or resource")
	}
	for _, aud := range req.GetAudience() {
		if !slices.Contains(s.targets, aud) {
			return oidc.ErrInvalidTarget().WithDescription("unknown audience %s", aud)
		}
	}
	return nil
}

func (s *storage) CreateTokenExchangeRequest(context.Context, op.TokenExchangeRequest) error {
	return nil
}

func (s *storage) GetPrivateClaimsFromTokenExchangeRequest(context.Context, op.TokenExchangeRequest) (map[string]any, error) {
	return nil, nil
}

func (s *storage) SetUserinfoFromTokenExchangeRequest(context.Context, *oidc.UserInfo, op.TokenExchangeRequest) error {
	return nil
}

func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	life := s.lifetime
	if _, ok := req.(op.TokenExchangeRequest); ok {
		life = s.exchangeLifetime
	}
	return uuid.NewString(), time.Now().Add(life), nil
}

// Keys.

type signingKey struct{ s *storage }

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.s.key }
func (k signingKey) ID() string                                  { return k.s.keyID }

type publicKey struct{ s *storage }

func (k publicKey) ID() string                         { return k.s.keyID }
func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.s.key.PublicKey }

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return signingKey{s}, nil }

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) { return []op.Key{publicKey{s}}, nil }

// Clients.

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, errors.New("unknown client")
	}
	return c, nil
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	_, err := s.client(id, secret)
	return err
}

func (s *storage) Health(context.Context) error { return nil }

// What this provider does not do: logins, refresh tokens, userinfo,
// introspection, revocation, JWT profile.

func (s *storage) CreateAuthRequest(context.Context, *oidc.AuthRequest, string) (op.AuthRequest, error) {
	return nil, errUnsupported
}
func (s *storage) AuthRequestByID(context.Context, string) (op.AuthRequest, error) {
	return nil, errUnsupported
}
func (s *storage) AuthRequestByCode(context.Context, string) (op.AuthRequest, error) {
	return nil, errUnsupported
}
func (s *storage) SaveAuthCode(context.Context, string, string) error { return errUnsupported }
func (s *storage) DeleteAuthRequest(context.Context, string) error    { return errUnsupported }
func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errUnsupported
}
func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}
func (s *storage) TerminateSession(context.Context, string, string) error { return errUnsupported }
func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	return oidc.ErrInvalidRequest().WithDescription("revocation is not supported")
}
func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}
func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}
func (s *storage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return errUnsupported
}
func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errUnsupported
}
func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}
func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errUnsupported
}
func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errUnsupported
}

// client is a client of the provider: a caller (client credentials) or
// one allowed to exchange tokens (toolmux).
type client struct {
	id, secret string
	grant      oidc.GrantType
}

func (c *client) GetID() string                       { return c.id }
func (c *client) RedirectURIs() []string              { return nil }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c *client) ResponseTypes() []oidc.ResponseType  { return nil }
func (c *client) GrantTypes() []oidc.GrantType        { return []oidc.GrantType{c.grant} }
func (c *client) LoginURL(string) string              { return "" }
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration      { return time.Hour }
func (c *client) DevMode() bool                       { return false }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) IsScopeAllowed(string) bool           { return true }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *client) ClockSkew() time.Duration             { return 0 }
