package upstreamauth

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolmux/toolmux/vault"
)

// Registration is the gateway's client at an upstream's authorization
// server, got by dynamic registration (RFC 7591). Its secret is a
// credential: it is kept in the vault, and shown by no String.
type Registration struct {
	// Issuer is the authorization server's: a registration is used only
	// with the server that made it.
	Issuer       string `json:"issuer"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret,omitempty"`
	// AuthMethod is its token_endpoint_auth_method.
	AuthMethod string `json:"token_endpoint_auth_method,omitempty"`
	// RedirectURL is the redirect URI it was registered with: another is
	// another registration.
	RedirectURL string `json:"redirect_uri"`
}

// String shows the registration without its secret.
func (r Registration) String() string {
	return fmt.Sprintf("Registration{issuer: %s, client_id: %s, secret: %s}", r.Issuer, r.ClientID, redacted(r.ClientSecret))
}

// GoString is String, for %#v.
func (r Registration) GoString() string { return r.String() }

// LogValue is String, for log/slog.
func (r Registration) LogValue() slog.Value { return slog.StringValue(r.String()) }

func redacted(s string) string {
	if s == "" {
		return "none"
	}
	return "[redacted]"
}

// Registrations keep the gateway's client registrations, one per
// upstream, so that it registers once and not at every start.
type Registrations interface {
	// Registration returns the registration kept for server; found is
	// false when there is none.
	Registration(ctx context.Context, server string) (r Registration, found bool, err error)
	// PutRegistration keeps r as server's registration.
	PutRegistration(ctx context.Context, server string, r Registration) error
}

// RegistrationsOwner is the vault owner of the gateway's registrations:
// not a caller's key (those are "key:NAME" or an issuer's URL and a
// subject), so no user's entries are mixed with them.
const RegistrationsOwner = "toolmux:upstream-clients"

// VaultRegistrations keeps registrations in v, sealed as users' tokens
// are, as the entries "oauth-client/SERVER" of RegistrationsOwner.
func VaultRegistrations(v *vault.Vault) Registrations { return vaultRegistrations{v} }

type vaultRegistrations struct{ v *vault.Vault }

func registrationName(server string) string { return "oauth-client/" + server }

func (s vaultRegistrations) Registration(ctx context.Context, server string) (Registration, bool, error) {
	var r Registration
	err := s.v.GetJSON(ctx, RegistrationsOwner, registrationName(server), &r)
	if vault.IsNotFound(err) {
		return Registration{}, false, nil
	}
	return r, err == nil, err
}

func (s vaultRegistrations) PutRegistration(ctx context.Context, server string, r Registration) error {
	return s.v.PutJSON(ctx, RegistrationsOwner, registrationName(server), r)
}

// clientDocument is a Client ID Metadata Document: the client's metadata
// (RFC 7591's names) and its client_id, the URL it is served at.
type clientDocument struct {
	ClientID string `json:"client_id"`
	*oauthex.ClientRegistrationMetadata
}

// MetadataDocument serves the gateway's Client ID Metadata Document, to be
// mounted at Options.ClientMetadataURL: an authorization server that
// supports such documents fetches it to learn the gateway's name and
// redirect URI, with no registration. The gateway is a public client
// there (token_endpoint_auth_method none): PKCE binds the code to it.
// It is 404 when no ClientMetadataURL is configured.
func (c *Client) MetadataDocument() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.opts.ClientMetadataURL == "" {
			http.NotFound(w, r)
			return
		}
		meta := c.clientMetadata(nil)
		meta.TokenEndpointAuthMethod = "none"
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=3600")
		_ = json.NewEncoder(w).Encode(clientDocument{ClientID: c.opts.ClientMetadataURL, ClientRegistrationMetadata: meta})
	})
}

// registered is what the gateway reads of a registration's answer (RFC
// 7591 §3.2.1).
type registered struct {
	ClientID                string `json:"client_id"`
	ClientSecret            string `json:"client_secret"`
	TokenEndpointAuthMethod string `json:"token_endpoint_auth_method"`
}

// maxRegistrationBytes bounds the answer to a registration: the client's
// metadata, some kilobytes.
const maxRegistrationBytes = 1 << 20

// registerClient registers the gateway at endpoint (RFC 7591). Not
// oauthex.RegisterClient: the go-sdk v1.8 decodes the answer's jwks as a
// string where RFC 7591 has a JSON object (ORY Hydra sends {}, and the
// registration fails), and its errors quote the answer, client secret and
// registration access token included. The request is its metadata type.
func (c *Client) registerClient(ctx context.Context, endpoint string, meta *oauthex.ClientRegistrationMetadata) (*registered, error) {
	body, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRegistrationBytes))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		// RFC 7591 §3.2.2: an error and its description, nothing else said.
		var e struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.Unmarshal(b, &e)
		return nil, fmt.Errorf("refused: %s %s %s", resp.Status, e.Error, e.Description)
	}
	var r registered
	if err := json.Unmarshal(b, &r); err != nil || r.ClientID == "" {
		return nil, fmt.Errorf("an answer without a client_id (%s)", resp.Header.Get("Content-Type"))
	}
	return &r, nil
}
