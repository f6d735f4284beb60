package mcpwire

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Requests are read as the go-sdk reads them; whatever is not one request
// with an id is left to it.
func TestReadRequest(t *testing.T) {
	r, err := ReadRequest([]byte(`{"jsonrpc":"2.0","id":"a\"b","method":"tools/call","params":{"name":"x"}}`))
	if err != nil || string(r.ID) != `"a\"b"` || r.Method != "tools/call" || string(r.Params) != `{"name":"x"}` {
		t.Fatalf("%v %+v", err, r)
	}
	for _, b := range []string{
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}`, // no id
		`{"jsonrpc":"2.0","id":1,"result":{}}`,                             // a response
		`{"jsonrpc":"1.0","id":1,"method":"tools/call"}`,                   // not 2.0
		`{"jsonrpc":"2.0","id":1.5,"method":"tools/call"}`,                 // not an integer
		`{"jsonrpc":"2.0","id":null,"method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":{},"method":"tools/call"}`,
	} {
		if _, err := ReadRequest([]byte(b)); !errors.Is(err, ErrNotARequest) {
			t.Errorf("%s: %v", b, err)
		}
	}
	if _, err := ReadRequest([]byte(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`)); err == nil {
		t.Error("a batch was read as a request")
	}
}

// Params keep the arguments raw; numbers in _meta read as the go-sdk
// reads them.
func TestReadCallParams(t *testing.T) {
	p, err := ReadCallParams(json.RawMessage(`{"name":"echo","arguments":{"n":12345678901234567890},"_meta":{"progressToken":7,"x":{"y":[1]}}}`))
	if err != nil || p.Name != "echo" || string(p.Arguments) != `{"n":12345678901234567890}` {
		t.Fatalf("%v %+v", err, p)
	}
	if p.Meta["progressToken"] != 7.0 || p.Meta["x"].(map[string]any)["y"].([]any)[0] != 1.0 {
		t.Errorf("meta %#v", p.Meta)
	}
	for _, bad := range []string{``, `null`, `5`, `[]`, `{"name":5}`, `{"name":"x","_meta":[]}`, `{"name":"x"`} {
		if _, err := ReadCallParams(json.RawMessage(bad)); err == nil {
			t.Errorf("params %s were accepted", bad)
		}
	}
	// The arguments are a slice of the params, not a copy.
	raw := json.RawMessage(`{"name":"x","arguments":{"data":"large"}}`)
	p, err = ReadCallParams(raw)
	if err != nil || &p.Arguments[0] != &raw[24] {
		t.Errorf("the arguments are not the params' own bytes: %v", err)
	}
}

// Every message written is JSON-RPC as the go-sdk decodes it.
func TestAppend(t *testing.T) {
	for _, b := range [][]byte{
		AppendResponse(nil, json.RawMessage(`"x"`), []byte(`{"content":[]}`)),
		AppendError(nil, json.RawMessage("4"), &Error{Code: -32602, Message: `unknown tool "a<b"`, Data: json.RawMessage(`{"kind":"k"}`)}),
		AppendRequest(nil, json.RawMessage(`"toolmux-1"`), "elicitation/create", []byte(`{"message":"?"}`)),
		AppendNotification(nil, "notifications/progress", []byte(`{"progressToken":1,"progress":0.5}`)),
		AppendNotification(nil, "notifications/initialized", nil),
	} {
		if _, err := jsonrpc.DecodeMessage(b); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
	if b := AppendError(nil, nil, &Error{Code: -32700, Message: "parse error"}); !json.Valid(b) || !strings.Contains(string(b), `"id":null`) {
		t.Errorf("%s", b)
	}
	m, _ := jsonrpc.DecodeMessage(AppendError(nil, json.RawMessage("3"), &Error{Code: -32602, Message: "no"}))
	if r, ok := m.(*jsonrpc.Response); !ok || r.Error == nil || !strings.Contains(r.Error.Error(), "no") {
		t.Errorf("%#v", m)
	}
}

// A response alone is JSON; once something went before it, the answer
// is an event stream whose last event is the response; nothing goes
// after it.
func TestResponder(t *testing.T) {
	w := httptest.NewRecorder()
	r := NewResponder(w)
	if err := r.Reply([]byte(`{"a":1}`)); err != nil || w.Header().Get("Content-Type") != "application/json" || w.Body.String() != `{"a":1}` {
		t.Fatalf("%v %q %q", err, w.Header().Get("Content-Type"), w.Body.String())
	}
	if r.Send([]byte(`{}`)) != ErrAnswered || r.Reply([]byte(`{}`)) != ErrAnswered {
		t.Error("written after the response")
	}
	w = httptest.NewRecorder()
	r = NewResponder(w)
	if err := r.Send([]byte(`{"n":1}`)); err != nil || !r.Streaming() {
		t.Fatal(err)
	}
	_ = r.Reply([]byte(`{"r":2}`))
	if w.Header().Get("Content-Type") != "text/event-stream" ||
		w.Body.String() != "event: message\ndata: {\"n\":1}\n\nevent: message\ndata: {\"r\":2}\n\n" {
		t.Fatalf("%q %q", w.Header().Get("Content-Type"), w.Body.String())
	}
}

// FuzzReadRequest reads what a client sends: never a panic, and a request
// read has a valid id and decodes as the go-sdk decodes it.
func FuzzReadRequest(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,{"b":null}]},"_meta":{"progressToken":"t"}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"\u0000","method":"","params":null}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ReadRequest(b)
		if err != nil {
			return
		}
		if !ValidID(r.ID) {
			t.Fatalf("id %q", r.ID)
		}
		if _, err := jsonrpc.DecodeMessage(AppendRequest(nil, r.ID, r.Method, r.Params)); err != nil && len(r.Params) == 0 {
			t.Fatalf("%s: re-encoded: %v", b, err)
		}
		_, _ = ReadCallParams(r.Params)
	})
}

// FuzzReadMeta: a request's _meta, read member by member, is what
// json.Unmarshal makes of it, and is refused when json.Unmarshal refuses
// it.
func FuzzReadMeta(f *testing.F) {
	f.Add([]byte(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":7}`))
	f.Add([]byte(`{"a\u00e9\"":"\t","b":[1e3,-0.5,true,null],"c":{"d":{}},"n":1e999}`))
	f.Add([]byte(`{"x":1,"x":"two"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var want map[string]any
		wantErr := json.Unmarshal(b, &want)
		got, err := readMeta(b)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%s: readMeta %v, json.Unmarshal %v", b, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: readMeta %#v, json.Unmarshal %#v", b, got, want)
		}
	})
}
