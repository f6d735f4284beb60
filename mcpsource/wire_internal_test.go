package mcpsource

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolmux/toolmux/tool"
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
// An answer nested deeper than encoding/json decodes is refused, as
// encoding/json refuses it: the faster decoder, which recurses without a
// bound, would overflow the stack (a crash no recover stops).
func TestDecodeAnswerTooDeep(t *testing.T) {
	for _, n := range []int{maxAnswerDepth - 3, 1_000_000} {
		line := []byte(`{"jsonrpc":"2.0","id":"toolmux-1","result":{"content":[],"structuredContent":` +
			strings.Repeat("[", n) + strings.Repeat("]", n) + `}}`)
		_, err := decodeAnswer(line)
		if (err != nil) != (n > maxAnswerDepth) {
			t.Errorf("nested %d deep: %v", n, err)
		}
	}
}

func FuzzDecodeAnswer(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":"toolmux-1","result":{"content":[{"type":"text","text":"x"},{"type":"new","v":[1]}]}}`))
	f.Add([]byte(`{"id":"toolmux-1","error":{"code":1,"message":"m","data":{}}}`))
	f.Add([]byte(`{"result":{"content":[{"type":"image","data":"!!"}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeAnswer(b)
		if err == nil && r.Content == nil {
			t.Fatalf("%s: nil content", b)
		}
		// What encoding/json reads of the same line: the same values,
		// the same refusals.
		var m struct {
			Result *tool.Result   `json:"result"`
			Error  *jsonrpc.Error `json:"error"`
		}
		var wire *jsonrpc.Error
		switch stdErr := json.Unmarshal(b, &m); {
		case stdErr != nil:
			if err == nil {
				t.Fatalf("%s: read, though encoding/json refuses it: %v", b, stdErr)
			}
		case m.Error != nil:
			if !errors.As(err, &wire) || wire.Code != m.Error.Code || wire.Message != m.Error.Message || string(wire.Data) != string(m.Error.Data) {
				t.Fatalf("%s: the server's error read as %v, by encoding/json as %v", b, err, m.Error)
			}
		case m.Result == nil:
			if err == nil {
				t.Fatalf("%s: an answer without result or error was read", b)
			}
		case err != nil:
			t.Fatalf("%s: refused (%v), though encoding/json reads it", b, err)
		case !slices.ContainsFunc(m.Result.Content, func(c tool.Content) bool { return !knownContent(c.Type) }):
			if m.Result.Content == nil {
				m.Result.Content = []tool.Content{}
			}
			if !reflect.DeepEqual(r, m.Result) {
				t.Fatalf("%s: read as %#v, by encoding/json as %#v", b, r, m.Result)
			}
		}
		if err == nil {
			if _, err := json.Marshal(r); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
		}
	})
}
