package mcpsource

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"

	"github.com/toolmux/toolmux/internal/jsonscan"
	"github.com/toolmux/toolmux/internal/mcpwire"
	"github.com/toolmux/toolmux/tool"
)

// stdioConn is the connection of a stdio session: the go-sdk's session
// runs over it (mcp.Connection), and tool calls are made on it directly
// (call), without the go-sdk's decoding. The go-sdk's own stdio
// connection decodes each message a server sends twice (as a batch, then
// as a message) and the client then the result and each content part
// again, every decode through a reader that allocates 32 KiB; here a
// line is scanned once (internal/jsonscan), an answer to a call made on
// the connection goes straight to that call, decoded once into a
// tool.Result, and every other message is decoded once for the go-sdk.
//
// Calls made here have ids "toolmux-N", which the go-sdk's own requests,
// numbered, never have.
type stdioConn struct {
	sp *spiller
	r  *bufio.Reader // the server's stdout, through the spill reader
	rc io.Closer
	w  io.WriteCloser // the server's stdin

	wmu sync.Mutex // one message written at a time

	incoming  chan sdkMessage // to the go-sdk's Read
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error

	readDone chan struct{} // closed when the reader has ended; readErr says why
	readErr  error

	next    atomic.Uint64
	mu      sync.Mutex
	calls   map[string]chan []byte // calls waiting for their answer line, by raw id
	closing bool                   // Close was called: no more notices
	wg      sync.WaitGroup         // cancellation notices being written
}

type sdkMessage struct {
	msg jsonrpc.Message
	err error
}

// callPrefix starts the ids of calls made on the connection.
const callPrefix = `"toolmux-`

func newStdioConn(sp *spiller, r io.ReadCloser, w io.WriteCloser) *stdioConn {
	c := &stdioConn{sp: sp, r: bufio.NewReaderSize(r, 32<<10), rc: r, w: w,
		incoming: make(chan sdkMessage), closed: make(chan struct{}), readDone: make(chan struct{}),
		calls: map[string]chan []byte{}}
	go c.read()
	return c
}

// read reads the server's messages until its stdout ends.
func (c *stdioConn) read() {
	var err error
	defer func() {
		c.mu.Lock()
		c.readErr = err
		c.calls = nil
		c.mu.Unlock()
		close(c.readDone)
		c.toSDK(sdkMessage{err: err})
	}()
	var line []byte
	for {
		line, err = c.line(line[:0])
		if err != nil {
			return
		}
		msg := jsonscan.Scan(line)
		if !msg.Object && !msg.Array {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
		}
		if msg.Object && msg.Method == nil && bytes.HasPrefix(msg.ID, []byte(callPrefix)) {
			c.mu.Lock()
			ch := c.calls[string(msg.ID)]
			delete(c.calls, string(msg.ID))
			c.mu.Unlock()
			if ch != nil {
				ch <- bytes.Clone(line) // buffered, taken once
			}
			continue
		}
		for _, m := range decodeLine(line, msg) {
			if !c.toSDK(m) {
				return
			}
			if m.err != nil {
				err = m.err
				return
			}
		}
	}
}

// line reads one line (a message and its line end).
func (c *stdioConn) line(buf []byte) ([]byte, error) {
	for {
		b, err := c.r.ReadSlice('\n')
		buf = append(buf, b...)
		if err == nil {
			return buf, nil
		}
		if err == bufio.ErrBufferFull {
			continue // the spill reader bounds a message
		}
		if err == io.EOF && len(bytes.TrimSpace(buf)) > 0 {
			return buf, nil // a last message without its line end
		}
		return nil, err
	}
}

// decodeLine decodes a message (or a batch) for the go-sdk.
func decodeLine(line []byte, scan jsonscan.Message) []sdkMessage {
	if !scan.Closed || !scan.Object && !scan.Array {
		// Not JSON: said as encoding/json says it ("invalid character
		// ..."), as the go-sdk's own stdio connection does.
		var raw json.RawMessage
		if err := json.Unmarshal(line, &raw); err != nil {
			return []sdkMessage{{err: err}}
		}
	}
	if !scan.Array {
		m, err := jsonrpc.DecodeMessage(line)
		return []sdkMessage{{msg: m, err: err}}
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(line, &raws); err != nil || len(raws) == 0 {
		return []sdkMessage{{err: fmt.Errorf("invalid batch from the server: %q", bytes.TrimSpace(line))}}
	}
	out := make([]sdkMessage, 0, len(raws))
	for _, raw := range raws {
		m, err := jsonrpc.DecodeMessage(raw)
		out = append(out, sdkMessage{msg: m, err: err})
		if err != nil {
			break
		}
	}
	return out
}

// toSDK hands a message to the go-sdk's Read; false once closed.
func (c *stdioConn) toSDK(m sdkMessage) bool {
	select {
	case c.incoming <- m:
		return true
	case <-c.closed:
		return false
	}
}

// Read implements mcp.Connection.
func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case m := <-c.incoming:
		if m.err != nil {
			return nil, m.err
		}
		return m.msg, nil
	case <-c.closed:
		return nil, io.EOF
	}
}

// Write implements mcp.Connection. A tools/call the go-sdk writes (for a
// session not made by a Source, such as the passthrough route's) is
// registered with the call's collector, so that what its answer spills
// reaches it.
func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.ID.IsValid() && req.Method == mcpwire.MethodToolsCall {
		if col := collectorFrom(ctx); col != nil {
			c.sp.expect(req.ID, col)
		}
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("marshaling message: %v", err)
	}
	return c.write(append(data, '\n'))
}

func (c *stdioConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(b)
	return err
}

// SessionID implements mcp.Connection.
func (c *stdioConn) SessionID() string { return "" }

// Close implements mcp.Connection: it closes the server's stdin and
// stdout.
func (c *stdioConn) Close() error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.closeOnce.Do(func() {
		c.closeErr = errors.Join(c.w.Close(), c.rc.Close())
		close(c.closed)
	})
	c.wg.Wait()
	return c.closeErr
}

// call makes a tools/call on the connection and decodes its answer. An
// error the server answered is a *jsonrpc.Error; a call cut short by ctx
// tells the server (notifications/cancelled), as the go-sdk does.
func (c *stdioConn) call(ctx context.Context, params *mcp.CallToolParams) (*tool.Result, error) {
	p, err := mcpwire.Marshal(params)
	if err != nil {
		return nil, err
	}
	id := callPrefix + strconv.FormatUint(c.next.Add(1), 10) + `"`
	ch := make(chan []byte, 1)
	c.mu.Lock()
	if c.calls == nil {
		err := c.readErr
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: calling %q: %v", mcp.ErrConnectionClosed, mcpwire.MethodToolsCall, err)
	}
	c.calls[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
	}
	if col := collectorFrom(ctx); col != nil {
		c.sp.expectKey(rawIDKey([]byte(id)), col)
	}
	if err := c.write(append(mcpwire.AppendRequest(nil, json.RawMessage(id), mcpwire.MethodToolsCall, p), '\n')); err != nil {
		forget()
		return nil, fmt.Errorf("%w: calling %q: %v", mcp.ErrConnectionClosed, mcpwire.MethodToolsCall, err)
	}
	select {
	case line := <-ch:
		return decodeAnswer(line)
	case <-c.readDone:
		forget()
		select {
		case line := <-ch: // answered just before the end
			return decodeAnswer(line)
		default:
		}
		return nil, fmt.Errorf("%w: calling %q: %v", mcp.ErrConnectionClosed, mcpwire.MethodToolsCall, c.readErr)
	case <-ctx.Done():
		forget()
		// Off the caller's way: a server that stopped reading blocks the
		// write until its stdin is closed.
		notice, _ := mcpwire.Marshal(map[string]any{"requestId": json.RawMessage(id), "reason": ctx.Err().Error()})
		c.mu.Lock()
		closing := c.closing
		if !closing {
			c.wg.Add(1)
		}
		c.mu.Unlock()
		if closing {
			return nil, ctx.Err()
		}
		go func() {
			defer c.wg.Done()
			_ = c.write(append(mcpwire.AppendNotification(nil, mcpwire.MethodCancelled, notice), '\n'))
		}()
		return nil, ctx.Err()
	}
}

// maxAnswerDepth is the deepest nesting of an answer decoded by
// segmentio's decoder: encoding/json's own limit.
const maxAnswerDepth = 10000

// decodeAnswer reads the answer to a tools/call: its result, as a
// tool.Result (whose JSON form is MCP's), or the server's error.
//
// The line is decoded once, straight into a tool.Result (whose JSON form
// is MCP's); only a part of a content type newer than this code, which
// tool.Content cannot hold, sends the decoder back to the line for that
// part's JSON. The decoder is segmentio's, which the go-sdk decodes every
// message with (so it costs the binary nothing): it reads what
// encoding/json reads into the same values (FuzzDecodeAnswer holds it to
// that) with a fraction of the allocations, which were most of a call's
// decoding cost. It recurses without a bound, though, where encoding/json
// stops at 10 000 levels: a line nested deeper (one scan, which allocates
// nothing, tells) goes to encoding/json, which refuses it, rather than
// overflow the stack.
func decodeAnswer(line []byte) (*tool.Result, error) {
	var m struct {
		Result *tool.Result   `json:"result"`
		Error  *jsonrpc.Error `json:"error"`
	}
	unmarshal := segjson.Unmarshal
	if jsonscan.Scan(line).Depth > maxAnswerDepth {
		unmarshal = json.Unmarshal
	}
	if err := unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("decoding the answer to %q: %w", mcpwire.MethodToolsCall, err)
	}
	if m.Error != nil {
		return nil, m.Error
	}
	if m.Result == nil {
		return nil, fmt.Errorf("the answer to %q has neither result nor error", mcpwire.MethodToolsCall)
	}
	r := m.Result
	if r.Content == nil {
		r.Content = []tool.Content{}
	}
	if slices.ContainsFunc(r.Content, func(c tool.Content) bool { return !knownContent(c.Type) }) {
		// A content type newer than this code: its JSON is kept rather
		// than dropped (convertContent does the same).
		var raw struct {
			Result struct {
				Content []json.RawMessage `json:"content"`
			} `json:"result"`
		}
		if err := json.Unmarshal(line, &raw); err != nil || len(raw.Result.Content) != len(r.Content) {
			return nil, fmt.Errorf("decoding the answer to %q: %v", mcpwire.MethodToolsCall, err)
		}
		for i, part := range raw.Result.Content {
			if !knownContent(r.Content[i].Type) {
				r.Content[i] = tool.Content{Type: r.Content[i].Type, Text: string(part)}
			}
		}
	}
	return r, nil
}

func knownContent(t string) bool {
	switch t {
	case tool.ContentText, tool.ContentImage, tool.ContentAudio, tool.ContentResource, tool.ContentResourceLink:
		return true
	}
	return false
}
