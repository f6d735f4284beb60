package mcpsource

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolmux/toolmux/tool"
)

// chunked delivers src in pieces of n bytes, so that every token of the
// JSON, escape sequences included, is split somewhere.
type chunked struct {
	r io.Reader
	n int
}

func (c *chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }
func (c *chunked) Close() error               { return nil }

// readAll runs stream through a spillReader whose messages may hold hold
// bytes of result text, delivered n bytes at a time, and returns what the
// go-sdk would read and what was spilled for the call registered as id 1.
func readAll(t *testing.T, stream string, hold, n int) (string, []spilled) {
	t.Helper()
	sp := &spiller{dir: t.TempDir(), server: "srv", hold: hold, max: 64 << 20, waiting: map[string]*collector{}}
	col := &collector{}
	sp.waiting[idKey(int64(1))] = col
	r := newSpillReader(&chunked{strings.NewReader(stream), n}, sp)
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading (chunks of %d): %v", n, err)
	}
	return string(out), col.parts
}

// texts decodes the result.content texts of each message of out.
func texts(t *testing.T, out string) [][]string {
	t.Helper()
	var all [][]string
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var m struct {
			Result struct {
				Content []struct {
					Text     string
					Resource *struct{ Text string }
				}
			}
		}
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("the output is not JSON: %v\n%.300s", err, out)
		}
		var ts []string
		for _, c := range m.Result.Content {
			if c.Resource != nil {
				ts = append(ts, c.Resource.Text)
			} else {
				ts = append(ts, c.Text)
			}
		}
		all = append(all, ts)
	}
	return all
}

func message(t *testing.T, idFirst bool, parts ...any) string {
	t.Helper()
	res := map[string]any{"content": parts, "isError": false}
	var b []byte
	var err error
	if idFirst {
		b, err = json.Marshal(struct {
			JSONRPC string         `json:"jsonrpc"`
			ID      int            `json:"id"`
			Result  map[string]any `json:"result"`
		}{"2.0", 1, res})
	} else {
		// The order TypeScript servers write: result before id.
		b, err = json.Marshal(struct {
			Result  map[string]any `json:"result"`
			JSONRPC string         `json:"jsonrpc"`
			ID      int            `json:"id"`
		}{res, "2.0", 1})
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func textPart(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

// hard is text with everything a JSON string can hold: escapes of every
// kind, \u escapes (the encoder writes <, > and & so), multi-byte
// characters, and, escaped by hand below, a surrogate pair.
var hard = strings.Repeat("plain \"quoted\" back\\slash \t tab\n <a&b> é € 😀 \x01 ", 40)

func TestSpillReaderPassesSmallMessagesUnchanged(t *testing.T) {
	stream := message(t, true, textPart("hello"), map[string]any{"type": "image", "data": "AAAA", "mimeType": "image/png"}) +
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1,"message":"` + strings.Repeat("x", 5000) + `"}}` + "\n" +
		`[{"jsonrpc":"2.0","id":2,"result":{}}]` + "\r\n"
	for _, n := range []int{1, 3, 7, 4096} {
		out, parts := readAll(t, stream, 1<<20, n)
		if out != stream || len(parts) != 0 {
			t.Errorf("chunks of %d: changed:\n%q\nwant\n%q", n, out, stream)
		}
	}
}

func TestSpillReaderSpillsWhatWouldNotFit(t *testing.T) {
	long := strings.Repeat(hard, 20) // ≈ 40 KB
	for _, idFirst := range []bool{true, false} {
		stream := message(t, idFirst, textPart("short one"), textPart(long),
			map[string]any{"type": "resource", "resource": map[string]any{"uri": "mem://r", "text": long + "end"}}) +
			message(t, true, textPart("next message"))
		for _, n := range []int{1, 5, 17, 64 << 10} {
			out, parts := readAll(t, stream, 4096, n)
			got := texts(t, out)
			if len(got) != 2 || len(got[0]) != 3 || got[0][0] != "short one" || got[1][0] != "next message" {
				t.Fatalf("id first %v, chunks of %d: %q", idFirst, n, got)
			}
			if len(out) > 3*4096+600 {
				t.Errorf("id first %v, chunks of %d: the messages hold %d bytes, limit 4096 of text each", idFirst, n, len(out))
			}
			if len(parts) != 2 || parts[0].index != 1 || parts[0].resource || parts[1].index != 2 || !parts[1].resource {
				t.Fatalf("id first %v, chunks of %d: spilled %+v", idFirst, n, parts)
			}
			for i, want := range []string{long, long + "end"} {
				p := parts[i]
				b, err := os.ReadFile(p.spill.Path)
				if err != nil || string(b) != want {
					t.Fatalf("chunks of %d: part %d's file differs (%v): %d bytes, want %d", n, p.index, err, len(b), len(want))
				}
				if p.spill.Bytes != int64(len(want)) || p.spill.Chars != int64(len([]rune(want))) {
					t.Errorf("part %d: measured %d bytes %d chars", p.index, p.spill.Bytes, p.spill.Chars)
				}
				kept := got[0][p.index]
				if !strings.Contains(kept, p.spill.Path) || !strings.HasPrefix(want, kept[:strings.Index(kept, "\n\n[... toolmux cut")]) ||
					!strings.HasSuffix(want, kept[strings.Index(kept, "...]\n\n")+len("...]\n\n"):]) {
					t.Errorf("part %d keeps %q", p.index, kept)
				}
			}
		}
	}
}

func TestSpillReaderDecodesEveryEscape(t *testing.T) {
	// Written by hand: \u escapes of every kind, a surrogate pair, lone
	// surrogates (encoding/json makes them U+FFFD), escaped slashes.
	body := strings.Repeat(`a\"b\\c\/d\b\f\n\r\t\u00e9\u20ac\ud83d\ude00\ud800x\udc00\u003c `, 200)
	stream := `{"result":{"content":[{"type":"text","text":"` + body + `"}]},"jsonrpc":"2.0","id":1}` + "\n"
	var want string
	if err := json.Unmarshal([]byte(`"`+body+`"`), &want); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 3, 5, 6, 7, 11, 4096} {
		_, parts := readAll(t, stream, 1024, n)
		if len(parts) != 1 {
			t.Fatalf("chunks of %d: spilled %+v", n, parts)
		}
		b, _ := os.ReadFile(parts[0].spill.Path)
		if string(b) != want {
			t.Fatalf("chunks of %d: decoded differently from encoding/json:\n%q\nwant\n%q", n, b[:80], want[:80])
		}
	}
}

func TestSpillReaderLeavesOtherStringsAlone(t *testing.T) {
	long := strings.Repeat("y", 10000)
	// Long strings, but not result texts: an error, a resource read
	// (contents, not content), structured content, a request's params.
	stream := `{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"` + long + `"}}` + "\n" +
		`{"jsonrpc":"2.0","id":1,"result":{"contents":[{"uri":"u","text":"` + long + `"}]}}` + "\n" +
		`{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"text":"` + long + `"}}}` + "\n" +
		`{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage","params":{"content":[{"text":"` + long + `"}]}}` + "\n"
	out, parts := readAll(t, stream, 1024, 100)
	if out != stream || len(parts) != 0 {
		t.Errorf("changed: %d parts spilled, output equal: %v", len(parts), out == stream)
	}
}

func TestSpillReaderStepsAsideForGarbage(t *testing.T) {
	stream := "not json at all\n" + message(t, true, textPart(strings.Repeat("z", 9000)))
	out, _ := readAll(t, stream, 1024, 10)
	if out != stream {
		t.Errorf("garbage changed: %q", out[:40])
	}
}

func TestSpillReaderBoundsAMessage(t *testing.T) {
	sp := &spiller{dir: t.TempDir(), server: "srv", hold: 1024, max: 5000, waiting: map[string]*collector{}}
	stream := message(t, true, textPart(strings.Repeat("z", 9000)))
	_, err := io.ReadAll(newSpillReader(io.NopCloser(strings.NewReader(stream)), sp))
	if !errors.Is(err, errMessageTooLarge) {
		t.Errorf("got %v", err)
	}
	// A message cut short by the end of the stream is an unexpected end,
	// as the go-sdk's own decoder would say.
	_, err = io.ReadAll(newSpillReader(io.NopCloser(iotest.HalfReader(strings.NewReader(stream[:200]))), sp))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated stream: got %v", err)
	}
}

func TestCollectorMarksSpilledParts(t *testing.T) {
	c := &collector{parts: []spilled{
		{index: 0, spill: tool.Spill{Path: "/a", Bytes: 10, Chars: 9}},
		{index: 1, resource: true, spill: tool.Spill{Path: "/b"}},
		{index: 5, spill: tool.Spill{Path: "/nowhere"}},
	}}
	res := &tool.Result{Content: []tool.Content{
		{Type: tool.ContentText, Text: "kept"},
		{Type: tool.ContentResource, Resource: &tool.ResourceContents{URI: "u", Text: "kept"}},
	}}
	c.apply(res)
	if s := res.Content[0].Spill; s == nil || s.Path != "/a" || s.Chars != 9 {
		t.Errorf("text part: %+v", s)
	}
	if s := res.Content[1].Spill; s == nil || s.Path != "/b" {
		t.Errorf("resource part: %+v", s)
	}
}

func TestSpillerForgetsCallsThatReturned(t *testing.T) {
	sp := newSpiller(Config{Name: "s", SpillDir: t.TempDir(), MaxResultBytes: 10, MaxMessageBytes: 100})
	c := &collector{}
	id, err := jsonrpc.MakeID(float64(7))
	if err != nil {
		t.Fatal(err)
	}
	sp.expect(id, c)
	if len(sp.waiting) != 1 {
		t.Fatal("not registered")
	}
	c.done()
	if len(sp.waiting) != 0 {
		t.Error("still waiting after the call returned")
	}
}

// An event stream keeps its framing byte for byte; the messages on its
// data lines are read like stdio's.
func TestSpillReaderEventStream(t *testing.T) {
	long := strings.Repeat(hard, 20)
	msg := strings.TrimSuffix(message(t, false, textPart(long)), "\n")
	stream := ": comment\nevent: endpoint\ndata: /messages?x=1\n\nevent: message\nid: 7\ndata: " + msg + "\n\n" +
		"data:" + `{"jsonrpc":"2.0","method":"notifications/progress","params":{}}` + "\r\n\n"
	for _, n := range []int{1, 4, 9, 4096} {
		sp := &spiller{dir: t.TempDir(), server: "srv", hold: 4096, max: 64 << 20, waiting: map[string]*collector{}}
		col := &collector{}
		sp.waiting[idKey(int64(1))] = col
		r := newSpillReader(&chunked{strings.NewReader(stream), n}, sp)
		r.sse = true
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(out), "\n")
		want := strings.Split(stream, "\n")
		if len(lines) != len(want) {
			t.Fatalf("chunks of %d: %d lines, want %d", n, len(lines), len(want))
		}
		for i := range want {
			if strings.HasPrefix(want[i], "data: {\"result\"") {
				if !strings.HasPrefix(lines[i], "data: {\"result\"") || len(lines[i]) > 8000 {
					t.Errorf("chunks of %d: the message line: %.80q (%d bytes)", n, lines[i], len(lines[i]))
				}
				continue
			}
			if lines[i] != want[i] {
				t.Errorf("chunks of %d: line %d: %q, want %q", n, i, lines[i], want[i])
			}
		}
		if len(col.parts) != 1 {
			t.Fatalf("chunks of %d: spilled %+v", n, col.parts)
		}
		if b, _ := os.ReadFile(col.parts[0].spill.Path); string(b) != long {
			t.Errorf("chunks of %d: the file differs", n)
		}
	}
}
