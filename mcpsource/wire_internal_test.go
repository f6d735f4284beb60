package mcpsource

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// An answer is read as the go-sdk reads it: every content type, the
// server's error as a *jsonrpc.Error (so that it is classified as the
// server's answer), and a content type newer than toolmux kept as JSON.
func TestDecodeAnswer(t *testing.T) {
	r, err := decodeAnswer([]byte(`{"jsonrpc":"2.0","id":"toolmux-1","result":{"content":[` +
		`{"type":"text","text":"hi","annotations":{"audience":["user"],"priority":0.5}},` +
		`{"type":"image","data":"AAEC","mimeType":"image/png"},` +
		`{"type":"resource","resource":{"uri":"file:///a","text":"t"}},` +
		`{"type":"resource_link","uri":"file:///b","name":"b","size":3},` +
		`{"type":"hologram","depth":3}],` +
		`"structuredContent":{"n":1},"isError":true,"_meta":{"m":"v"}}}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := r.Content
	if len(c) != 5 || c[0].Text != "hi" || c[0].Annotations.Priority != 0.5 || c[0].Annotations.Audience[0] != "user" ||
		string(c[1].Data) != "\x00\x01\x02" || c[1].MIMEType != "image/png" || c[2].Resource.Text != "t" ||
		*c[3].Size != 3 || c[4].Type != "hologram" || c[4].Text != `{"type":"hologram","depth":3}` {
		t.Fatalf("%+v", c)
	}
	if !r.IsError || r.Structured.(map[string]any)["n"] != 1.0 || r.Meta["m"] != "v" {
		t.Fatalf("%+v", r)
	}
	if r, err := decodeAnswer([]byte(`{"jsonrpc":"2.0","id":"toolmux-2","result":{}}`)); err != nil || r.Content == nil {
		t.Fatalf("an empty result: %v %+v", err, r)
	}
	_, err = decodeAnswer([]byte(`{"jsonrpc":"2.0","id":"toolmux-3","error":{"code":-32602,"message":"bad"}}`))
	if wire, ok := err.(*jsonrpc.Error); !ok || wire.Code != -32602 {
		t.Fatalf("%T %v", err, err)
	}
	if _, err := decodeAnswer([]byte(`{"jsonrpc":"2.0","id":"toolmux-4"}`)); err == nil {
		t.Fatal("an answer with neither result nor error was read")
	}
}

// FuzzDecodeAnswer reads what a server answers: never a panic; a result
// has content and encodes again (the record and the client get it).
func FuzzDecodeAnswer(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":"toolmux-1","result":{"content":[{"type":"text","text":"x"},{"type":"new","v":[1]}]}}`))
	f.Add([]byte(`{"id":"toolmux-1","error":{"code":1,"message":"m","data":{}}}`))
	f.Add([]byte(`{"result":{"content":[{"type":"image","data":"!!"}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeAnswer(b)
		if err == nil && r.Content == nil {
			t.Fatalf("%s: nil content", b)
		}
		if err == nil {
			if _, err := json.Marshal(r); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
		}
	})
}
