package main_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
)

// subscriptions.max_listens in toolmux.yaml bounds a real serve's listen
// streams: one more is refused at once with a JSON-RPC error naming the
// key, the metrics count the streams and the refusal, and a stream taken
// again once the first closed.
func TestServeListenBounds(t *testing.T) {
	t.Parallel()
	p := startServeProc(t, workspace(t, "subscriptions:\n  max_listens: 1\n"), t.TempDir(), "--metrics")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listen := func() *http.Response {
		t.Helper()
		resp, err := testservers.Listen(ctx, p.url("/mcp"), 1, "listener", nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := listen()
	if first.StatusCode != http.StatusOK {
		t.Fatalf("a first listen: %s", first.Status)
	}
	refused := listen()
	answer, _ := io.ReadAll(refused.Body)
	refused.Body.Close()
	var msg struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(answer, &msg) != nil || refused.StatusCode != http.StatusServiceUnavailable || string(msg.ID) != "1" ||
		msg.Error.Code != -32031 || !strings.Contains(msg.Error.Message, "subscriptions.max_listens") {
		t.Fatalf("a second listen: %s %s", refused.Status, answer)
	}
	fams := scrape(t, p, "")
	wantSample(t, fams, "toolmux_listen_streams", nil, 1)
	wantSample(t, fams, "toolmux_listen_streams_max", nil, 1)
	wantSample(t, fams, "toolmux_listen_streams_refused_total", map[string]string{"limit": "gateway"}, 1)
	wantSample(t, fams, "toolmux_listen_streams_refused_total", map[string]string{"limit": "client"}, 0)

	first.Body.Close()
	if !testservers.Eventually(10*time.Second, func() bool {
		v, _ := sample(scrape(t, p, ""), "toolmux_listen_streams", nil)
		return v == 0
	}) {
		t.Fatal("the closed stream is still counted")
	}
	again := listen()
	again.Body.Close()
	if again.StatusCode != http.StatusOK {
		t.Fatalf("a listen after the first closed: %s", again.Status)
	}
}
