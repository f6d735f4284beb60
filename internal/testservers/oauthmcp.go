package testservers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// OAuthMCP is an MCP server over streamable HTTP that requires OAuth as
// the MCP authorization specification says, built with the go-sdk's
// server auth middleware: a request without a valid token of its
// HydraServer, issued for its resource, is answered 401 with a challenge
// naming its protected resource metadata (RFC 9728), which it serves.
// Tokens are checked by Hydra's introspection, so that a revoked one is
// refused at once. Its tool whoami answers the token's subject.
type OAuthMCP struct {
	// URL is its MCP endpoint, and its resource identifier.
	URL string
	// MetadataURL is where its protected resource metadata is served.
	MetadataURL string
	// Refused counts the requests it answered 401 or 403.
	Refused atomic.Int64
}

// StartOAuthMCP starts an OAuthMCP trusting h; it stops when the test ends.
func StartOAuthMCP(tb testing.TB, h *HydraServer) *OAuthMCP {
	tb.Helper()
	f := &OAuthMCP{}
	server := mcp.NewServer(&mcp.Implementation{Name: "oauth-fixture", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "whoami", Description: "The subject of the caller's token"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, struct{}, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: req.Extra.TokenInfo.UserID}}}, struct{}{}, nil
		})
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	tb.Cleanup(func() {
		srv.Close()
		// A session whose client could not end it (its DELETE refused
		// for want of a token, a revoked one) ends with the fixture.
		for ss := range server.Sessions() {
			ss.Close()
		}
	})
	f.URL = srv.URL + "/mcp"
	f.MetadataURL = srv.URL + "/.well-known/oauth-protected-resource/mcp"
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: f.URL, AuthorizationServers: []string{h.Issuer}, BearerMethodsSupported: []string{"header"},
	}))
	protected := auth.RequireBearerToken(f.verify(h), &auth.RequireBearerTokenOptions{ResourceMetadataURL: f.MetadataURL})(
		mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		protected.ServeHTTP(rec, r)
		if rec.status == http.StatusUnauthorized || rec.status == http.StatusForbidden {
			f.Refused.Add(1)
		}
	}))
	return f
}

// verify introspects a token at h (RFC 7662): active, and issued for f.
func (f *OAuthMCP) verify(h *HydraServer) auth.TokenVerifier {
	return func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.Admin+"/admin/oauth2/introspect",
			strings.NewReader(url.Values{"token": {token}}.Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var in struct {
			Active bool     `json:"active"`
			Sub    string   `json:"sub"`
			Aud    []string `json:"aud"`
			Exp    int64    `json:"exp"`
			Scope  string   `json:"scope"`
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("introspection: %s", resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(&in); err != nil {
			return nil, err
		}
		if !in.Active {
			return nil, fmt.Errorf("%w: not active", auth.ErrInvalidToken)
		}
		if !slices.Contains(in.Aud, f.URL) {
			return nil, fmt.Errorf("%w: not issued for %s", auth.ErrInvalidToken, f.URL)
		}
		return &auth.TokenInfo{UserID: in.Sub, Scopes: strings.Fields(in.Scope), Expiration: time.Unix(in.Exp, 0)}, nil
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Flush() {
	if fl, ok := r.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
