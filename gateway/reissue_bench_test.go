package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/tool"
)

// BenchmarkReissueWindow measures what the window adds to a call of a
// non-idempotent tool over HTTP (the call itself aside: run answers at
// once): the key's hash is measured apart, in key.
func BenchmarkReissueWindow(b *testing.B) {
	b.Run("call", func(b *testing.B) {
		w := newReissue(Reissue{}, nil)
		defer w.close()
		res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "appended a line to the file"}}}
		run := func(context.Context) (*mcp.CallToolResult, error) { return res, nil }
		ctx := context.Background()
		b.ReportAllocs()
		var k reissueKey
		for i := 0; b.Loop(); i++ {
			binary.BigEndian.PutUint64(k[:], uint64(i))
			w.call(ctx, k, k, nil, Reissued{}, run)
		}
	})
	b.Run("key", func(b *testing.B) {
		g := New(nil, Options{})
		defer g.Close()
		o := &callOrigin{route: routeMCP, id: []byte(`"req-12345"`), auth: sha256.Sum256([]byte("Bearer 0123456789abcdef"))}
		in := callInput{params: &mcp.CallToolParamsRaw{Meta: mcp.Meta{reissueMetaVersion: "2026-07-28",
			reissueMetaClientInfo: map[string]any{"name": "agent", "version": "1.0"}}}}
		args := map[string]any{"path": "/tmp/notes.txt", "content": "a line of text to append", "mode": "append"}
		b.ReportAllocs()
		for b.Loop() {
			g.reissueKeyOf(o, tool.Tool{Server: "fx", Name: "append"}, in, args)
		}
	})
	b.Run("origin", func(b *testing.B) {
		r, _ := http.NewRequest(http.MethodPost, "http://localhost/mcp", nil)
		id := []byte(`7`)
		b.ReportAllocs()
		for b.Loop() {
			withOrigin(r, routeMCP, id)
		}
	})
}
