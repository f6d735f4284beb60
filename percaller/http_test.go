package percaller_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/percaller"
	"github.com/toolmux/toolmux/tool"
)

// An HTTP server gets each caller's own secret in a header, formatted;
// the header the configuration gives everyone is sent too.
func TestSecretsAsHeaders(t *testing.T) {
	srv := testservers.NewServer(testservers.Options{Whoami: true})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer hs.Close()
	v := newVault(t)
	for _, c := range []string{"ann", "bob"} {
		if err := v.PutSecret(context.Background(), identity.KeySubject(c), "web", "token", []byte(c+"-secret")); err != nil {
			t.Fatal(err)
		}
	}
	base := mcpsource.Config{Name: "web", Transport: mcpsource.StreamableHTTP, URL: hs.URL, Headers: map[string]string{"X-Team": "core"},
		ConnectTimeout: 10 * time.Second}
	cred := &percaller.Secrets{Server: "web", Vault: v, Secrets: []percaller.Secret{{Name: "token", Header: "Authorization", Format: "Bearer {value}"}}}
	s := percaller.New(base, cred, percaller.Options{})
	defer s.Close()
	ask := func(who, header string) string {
		t.Helper()
		res, err := s.Call(as(who), "whoami", map[string]any{"header": header})
		if err != nil {
			t.Fatal(err)
		}
		var w testservers.Whoami
		if err := json.Unmarshal([]byte(res.Text()), &w); err != nil {
			t.Fatal(err)
		}
		return w.Header
	}
	if got := ask("ann", "Authorization"); got != testservers.WhoamiSum("Bearer ann-secret") {
		t.Errorf("ann's header: %s", got)
	}
	if got := ask("bob", "Authorization"); got != testservers.WhoamiSum("Bearer bob-secret") {
		t.Errorf("bob's header: %s", got)
	}
	if got := ask("bob", "X-Team"); got != testservers.WhoamiSum("core") {
		t.Errorf("the configured header: %s", got)
	}
	if base.Headers["Authorization"] != "" {
		t.Error("the server's configuration was changed")
	}
	// A value with a line break cannot be a header: auth_required, saying so.
	if err := v.PutSecret(context.Background(), identity.KeySubject("eve"), "web", "token", []byte("a\r\nX-Evil: 1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Call(as("eve"), "whoami", nil); tool.KindOf(err) != tool.KindAuthRequired || !strings.Contains(err.Error(), "line break") {
		t.Errorf("a header with a line break: %v", err)
	}
}
