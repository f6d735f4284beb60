package upstreamauth_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/upstreamauth"
)

// The upstream_oauth section as options: the routes below the public
// URL, the defaults left to the package, and private networks reached
// only when allowed (a transport of its own dials them: the go-sdk's
// guard then steps aside).
func TestOptionsFromConfig(t *testing.T) {
	o := upstreamauth.OptionsFromConfig(config.UpstreamOAuth{}, "https://gw.example.com/")
	if o.RedirectURL != "https://gw.example.com/oauth/callback" || o.ClientMetadataURL != "" || o.HTTPClient != nil || o.Leeway != 0 {
		t.Errorf("the defaults: %+v", o)
	}
	o = upstreamauth.OptionsFromConfig(config.UpstreamOAuth{ClientMetadata: true, Timeout: 5 * time.Second, Leeway: time.Hour}, "https://gw.example.com")
	if o.ClientMetadataURL != "https://gw.example.com/oauth/client-metadata.json" || o.HTTPClient.Timeout != 5*time.Second ||
		o.HTTPClient.Transport != nil || o.Leeway != time.Hour {
		t.Errorf("set: %+v", o)
	}
	o = upstreamauth.OptionsFromConfig(config.UpstreamOAuth{AllowPrivateNetworks: true}, "https://gw.example.com")
	if tr, ok := o.HTTPClient.Transport.(*http.Transport); !ok || tr.DialContext == nil || o.HTTPClient.Timeout != upstreamauth.DefaultTimeout {
		t.Errorf("private networks allowed: %+v", o.HTTPClient)
	}
}
