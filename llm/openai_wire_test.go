package llm_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/toolmux/toolmux/llm"
)

// The provider reads the SSE framing itself (no SDK under it): these are
// the shapes servers send besides one "data: JSON" line per event.

func TestOpenAIStreamFraming(t *testing.T) {
	body := ": OPENROUTER PROCESSING\r\n\r\n" + // a comment, CRLF line ends
		"event: message\r\n" + // an event name, ignored
		"data: " + oaiText("Hel") + "\r\n\r\n" +
		"data:" + oaiText("lo") + "\n\n" + // no space after the colon
		"data: {\"model\":\"split-model\",\n" + // one event's data over two lines
		"data: \"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"}}]}\n\n" +
		"id: 7\nretry: 100\n\n" + // other fields, no data: no event
		"data: " + oaiFinish("stop") + "\n\n" +
		"data: [DONE]\n\n" +
		"data: " + oaiText(" after the end") + "\n\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	m, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "m", HTTPClient: srv.Client(), Retry: llm.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var d oaiDeltas
	resp, err := m.Complete(context.Background(), oaiHi, d.add)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, x := range d.got {
		texts = append(texts, x.Content)
	}
	if want := []string{"Hel", "lo", "!"}; !reflect.DeepEqual(texts, want) {
		t.Errorf("deltas %q, want %q", texts, want)
	}
	if resp.Message.Content != "Hello!" || resp.StopReason != llm.StopEnd || resp.Model != "served-model" {
		t.Errorf("response %q %q %q", resp.Message.Content, resp.StopReason, resp.Model)
	}
}

// Extra's fields go at the top of the body and win over the mapped ones
// of the same name.
func TestOpenAIExtraOverridesMappedFields(t *testing.T) {
	s := oaiServe(t, oaiStep{Body: oaiCompletion(map[string]any{"content": "ok"}, "stop")})
	m := oaiModel(t, s, llm.OpenAIConfig{MaxTokens: 100, Extra: map[string]any{"max_tokens": 7, "user": "u1"}})
	if _, err := m.Complete(context.Background(), oaiHi, nil); err != nil {
		t.Fatal(err)
	}
	oaiSame(t, "body", s.requests()[0].Body, `{"model":"test-model","messages":[{"role":"user","content":"hi"}],"max_tokens":7,"user":"u1"}`)
}

// An Extra value that has no JSON form (possible from Go, not from a
// configuration file) is the request's fault, and nothing is sent.
func TestOpenAIExtraNotJSON(t *testing.T) {
	s := oaiServe(t)
	m := oaiModel(t, s, llm.OpenAIConfig{Extra: map[string]any{"bad": func() {}}})
	_, err := m.Complete(context.Background(), oaiHi, nil)
	if e := oaiErr(t, err); e.Kind != llm.KindBadRequest {
		t.Errorf("kind %q (%v), want %q", e.Kind, err, llm.KindBadRequest)
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// An answer whose content is an array of content parts (Mistral's
// servers, some vLLM versions), whole or streamed, is read as the text of
// its text parts; a content of another type is an invalid response.
func TestOpenAIContentParts(t *testing.T) {
	parts := []any{map[string]any{"type": "text", "text": "Hel"}, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "x"}},
		map[string]any{"type": "text", "text": "lo"}}
	s := oaiServe(t, oaiStep{Body: oaiCompletion(map[string]any{"content": parts}, "stop")})
	resp, err := oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, nil)
	if err != nil || resp.Message.Content != "Hello" {
		t.Fatalf("%v %+v", err, resp)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"model":"m","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"Hi"}]}}]}`+"\n\n"+
			"data: "+oaiFinish("stop")+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	m, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "m", HTTPClient: srv.Client(), Retry: llm.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var d oaiDeltas
	if resp, err := m.Complete(context.Background(), oaiHi, d.add); err != nil || resp.Message.Content != "Hi" {
		t.Fatalf("streamed: %v %+v", err, resp)
	}
	s = oaiServe(t, oaiStep{Body: oaiCompletion(map[string]any{"content": 42}, "stop")})
	_, err = oaiModel(t, s, llm.OpenAIConfig{}).Complete(context.Background(), oaiHi, nil)
	if llm.KindOf(err) != llm.KindInvalidResponse {
		t.Fatalf("a number as content: %v", err)
	}
}
