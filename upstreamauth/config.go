package upstreamauth

import (
	"net/http"
	"strings"

	"github.com/toolmux/toolmux/config"
)

// The routes the gateway serves for its Client, below its public URL.
const (
	// CallbackPath is the callback route (Options.RedirectURL).
	CallbackPath = "/oauth/callback"
	// MetadataPath is where the Client ID Metadata Document is served
	// (Options.ClientMetadataURL).
	MetadataPath = "/oauth/client-metadata.json"
)

// OptionsFromConfig returns the options of the upstream_oauth section c,
// for a gateway whose URL as users' browsers reach it is publicURL
// (upstream_oauth.public_url, else auth.resource, else the address it
// listens on): the callback and the metadata document below it. Zero
// values of c are the defaults of Options.
func OptionsFromConfig(c config.UpstreamOAuth, publicURL string) Options {
	base := strings.TrimSuffix(publicURL, "/")
	o := Options{RedirectURL: base + CallbackPath, ClientName: c.ClientName, Leeway: c.Leeway, MaxPending: c.MaxPending, StateTTL: c.StateTTL}
	if c.ClientMetadata {
		o.ClientMetadataURL = base + MetadataPath
	}
	if c.Timeout > 0 || c.AllowPrivateNetworks {
		o.HTTPClient = &http.Client{Timeout: c.Timeout}
		if o.HTTPClient.Timeout <= 0 {
			o.HTTPClient.Timeout = DefaultTimeout
		}
	}
	if c.AllowPrivateNetworks {
		// A transport that dials as it likes: the go-sdk's discovery then
		// leaves the addresses to it.
		o.HTTPClient.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	return o
}
