package mcpsource

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/tool"
)

// A tool's result reaches toolmux as one JSON-RPC message, which the go-sdk
// would hold several times over while decoding it (the line, the raw
// result, the decoder's growing buffers, the decoded strings: about eight
// times a 20 MB text). So the bytes a server sends are read through a
// spillReader before the go-sdk sees them: it follows the JSON as it
// streams past, and the text of a result part (result.content[i].text, or
// result.content[i].resource.text) that would take the message past
// MaxResultBytes is decoded into a file as it arrives, the message keeping
// only its beginning and end around a marker naming the file. The go-sdk
// then decodes a message of bounded size. Everything else passes through
// byte for byte.
//
// Which call a spilled text belongs to is known only at the end of the
// message (servers may send "id" after "result"), so the reader names its
// files itself and hands what it spilled, by JSON-RPC id, to the call
// that registered that id when it wrote its request (spillConn.Write over
// stdio, spillRoundTripper over HTTP, with the call's collector in the
// context). Over HTTP the same reader follows the data lines of an event
// stream.

// errMessageTooLarge is the error of a message longer than MaxMessageBytes.
var errMessageTooLarge = errors.New("a message from the server exceeded the configured maximum size")

// spilled is one text the reader wrote to a file.
type spilled struct {
	index    int  // position of the part in result.content
	resource bool // the part's resource.text rather than its text
	spill    tool.Spill
}

// collector receives what was spilled of the answer to one call.
type collector struct {
	mu     sync.Mutex
	parts  []spilled
	forget []expected // the ids it was registered under
}

// expected is an id a collector was registered under, with a spiller.
type expected struct {
	sp  *spiller
	key string
}

type collectorKey struct{}

func withCollector(ctx context.Context, c *collector) context.Context {
	return context.WithValue(ctx, collectorKey{}, c)
}

func collectorFrom(ctx context.Context) *collector {
	c, _ := ctx.Value(collectorKey{}).(*collector)
	return c
}

func (c *collector) add(parts []spilled) {
	c.mu.Lock()
	c.parts = append(c.parts, parts...)
	c.mu.Unlock()
}

// done stops waiting for answers (the call returned).
func (c *collector) done() {
	c.mu.Lock()
	forget := c.forget
	c.forget = nil
	c.mu.Unlock()
	for _, f := range forget {
		f.sp.forget(f.key, c)
	}
}

// apply marks the parts of res whose text was spilled.
func (c *collector) apply(res *tool.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.parts {
		if p.index < 0 || p.index >= len(res.Content) {
			continue
		}
		part := &res.Content[p.index]
		if p.resource != (part.Type == tool.ContentResource) || p.resource && part.Resource == nil {
			continue
		}
		s := p.spill
		part.Spill = &s
	}
}

// spiller is the shared state of one connection's reader and writer: the
// calls waiting for answers, by JSON-RPC id.
type spiller struct {
	dir    string // where files go
	server string
	hold   int // result text held in memory per message
	max    int // bound on one message as sent

	mu      sync.Mutex
	waiting map[string]*collector
}

func newSpiller(cfg Config) *spiller {
	return &spiller{dir: cfg.SpillDir, server: cfg.Name, hold: cfg.MaxResultBytes, max: cfg.MaxMessageBytes,
		waiting: map[string]*collector{}}
}

// idKey is a JSON-RPC id as a map key: a number's digits or a string's
// content, told apart.
func idKey(v any) string {
	switch x := v.(type) {
	case int64:
		return "n" + strconv.FormatInt(x, 10)
	case float64:
		return "n" + strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		return "s" + x
	}
	return ""
}

// expect registers c for the answer to the request with the given id.
func (sp *spiller) expect(id jsonrpc.ID, c *collector) {
	if key := idKey(id.Raw()); key != "" {
		sp.expectKey(key, c)
	}
}

// expectKey registers c for the answer to the request whose id has the
// given key.
func (sp *spiller) expectKey(key string, c *collector) {
	sp.mu.Lock()
	sp.waiting[key] = c
	sp.mu.Unlock()
	c.mu.Lock()
	c.forget = append(c.forget, expected{sp, key})
	c.mu.Unlock()
}

// forget unregisters c from the answer to key, unless another call took
// the key since.
func (sp *spiller) forget(key string, c *collector) {
	sp.mu.Lock()
	if sp.waiting[key] == c {
		delete(sp.waiting, key)
	}
	sp.mu.Unlock()
}

// deliver hands what a message spilled to the call waiting for it.
func (sp *spiller) deliver(key string, parts []spilled) {
	sp.mu.Lock()
	c := sp.waiting[key]
	delete(sp.waiting, key)
	sp.mu.Unlock()
	if c != nil && len(parts) > 0 {
		c.add(parts)
	}
}

// spillTransport is the stdio transport: the server's stdout read
// through a spillReader, by a stdioConn (wire.go), which registers each
// tools/call it writes with the call's collector.
type spillTransport struct {
	stdin  io.WriteCloser
	stdout io.ReadCloser
	sp     *spiller

	mu   sync.Mutex
	conn *stdioConn
}

func newSpillTransport(cfg Config, stdin io.WriteCloser, stdout io.ReadCloser) *spillTransport {
	sp := newSpiller(cfg)
	return &spillTransport{sp: sp, stdin: stdin, stdout: newSpillReader(stdout, sp)}
}

// Connect implements mcp.Transport.
func (t *spillTransport) Connect(context.Context) (mcp.Connection, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn != nil {
		return nil, errors.New("mcpsource: the stdio transport is connected already")
	}
	t.conn = newStdioConn(t.sp, t.stdout, t.stdin)
	return t.conn, nil
}

// connection returns the connection, once Connect made it.
func (t *spillTransport) connection() *stdioConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conn
}

// frame is one open object or array of the message being read.
type frame struct {
	object    bool
	expectKey bool   // in an object, the next string is a key
	key       string // the current key, "" when unknown or too long
	index     int    // in an array, the current element
}

// maxKey is the longest key remembered: the paths that matter have short
// keys.
const maxKey = 32

// spillReader is the filter between what a server sends (a stdio server's
// stdout, an HTTP server's answer) and the go-sdk. Read returns whole
// messages (one JSON value and the line end after it; for an event stream,
// one line), rewritten as described above.
type spillReader struct {
	src  io.ReadCloser
	sp   *spiller
	buf  []byte
	r, w int
	err  error // of src, once it fails

	out  []byte // the message rewritten, not yet returned from out[op:]
	op   int
	raw  bool  // the stream is not JSON this reader follows: pass it through
	sse  bool  // the stream is Server-Sent Events, messages on data lines
	fail error // returned once out is consumed

	// The message being read.
	started bool // its value has begun
	stack   []frame
	size    int // bytes read of it
	held    int // bytes of result text kept in it
	id      []byte
	idNext  bool // the next value is the message's id
	spilled []spilled
}

// spillBufSize is the size of a spill reader's window on what the server
// sends.
const spillBufSize = 64 << 10

// spillBufs recycles the readers' windows: over HTTP every answer gets a
// reader of its own, and a new 64 KiB window each time is an allocation
// (and a clearing) per call.
var spillBufs = sync.Pool{New: func() any { b := make([]byte, spillBufSize); return &b }}

func newSpillReader(src io.ReadCloser, sp *spiller) *spillReader {
	return &spillReader{src: src, sp: sp, buf: *spillBufs.Get().(*[]byte)}
}

// release gives the window back once the source has ended and every byte
// of it was taken: nothing reads the window again (fill answers the
// source's error from then on). Only the goroutine that reads calls it,
// never Close, which may run while a Read is blocked.
func (s *spillReader) release() {
	if s.buf == nil || s.r != s.w {
		return
	}
	b := s.buf[:spillBufSize]
	s.buf, s.r, s.w = nil, 0, 0
	spillBufs.Put(&b)
}

// Close closes the source, which ends a Read blocked on it.
func (s *spillReader) Close() error { return s.src.Close() }

// Read implements io.Reader.
func (s *spillReader) Read(p []byte) (int, error) {
	for s.op >= len(s.out) {
		if s.fail != nil {
			return 0, s.fail
		}
		if cap(s.out) > s.sp.hold+len(s.buf) {
			// A large message that was not a result grew the buffer; it
			// is not kept for the life of the connection.
			s.out = nil
		}
		s.out, s.op = s.out[:0], 0
		if s.raw {
			if s.r == s.w {
				if err := s.fill(); err != nil {
					return 0, err
				}
			}
			n := copy(p, s.buf[s.r:s.w])
			s.r += n
			return n, nil
		}
		next := s.message
		if s.sse {
			next = s.event
		}
		if err := next(); err != nil {
			if errors.Is(err, io.EOF) && s.started {
				err = io.ErrUnexpectedEOF
			}
			s.fail = err
		}
	}
	n := copy(p, s.out[s.op:])
	s.op += n
	return n, nil
}

// fill reads more input into buf, moving what is unread to its start.
func (s *spillReader) fill() error {
	if s.err != nil {
		s.release()
		return s.err
	}
	if s.r > 0 {
		s.w = copy(s.buf, s.buf[s.r:s.w])
		s.r = 0
	}
	n, err := s.src.Read(s.buf[s.w:])
	s.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	s.err = err
	s.release()
	return err
}

// more makes at least one unread byte available.
func (s *spillReader) more() error {
	for s.r == s.w {
		if err := s.fill(); err != nil {
			return err
		}
	}
	return nil
}

// take consumes n unread bytes, counting them against the message bound.
func (s *spillReader) take(n int) ([]byte, error) {
	b := s.buf[s.r : s.r+n]
	s.r += n
	s.size += n
	if s.sp.max > 0 && s.size > s.sp.max {
		return nil, errMessageTooLarge
	}
	return b, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// message reads the next message into out.
func (s *spillReader) message() error {
	s.started, s.stack, s.size, s.held, s.id, s.idNext, s.spilled = false, s.stack[:0], 0, 0, s.id[:0], false, s.spilled[:0]
	// Leading white space, then the value.
	for {
		if err := s.more(); err != nil {
			return err
		}
		if !isSpace(s.buf[s.r]) {
			break
		}
		s.out = append(s.out, s.buf[s.r])
		s.r++
	}
	if c := s.buf[s.r]; c != '{' && c != '[' {
		// Not a JSON-RPC message: the go-sdk will say what is wrong with
		// it; this reader steps aside.
		s.raw = true
		return nil
	}
	return s.value()
}

// event reads the next line of a Server-Sent Events stream into out: a
// data line holding a JSON value is read as a message, every other line
// (event, id, retry, comments, the blank line ending an event) is copied.
func (s *spillReader) event() error {
	s.started, s.stack, s.size, s.held, s.id, s.idNext, s.spilled = false, s.stack[:0], 0, 0, s.id[:0], false, s.spilled[:0]
	for s.w-s.r < len("data: ") && bytes.IndexByte(s.buf[s.r:s.w], '\n') < 0 {
		if err := s.fill(); err != nil {
			if s.r == s.w {
				return err
			}
			break
		}
	}
	if bytes.HasPrefix(s.buf[s.r:s.w], []byte("data:")) {
		b, err := s.take(len("data:"))
		if err != nil {
			return err
		}
		s.out = append(s.out, b...)
		if err := s.more(); err != nil {
			return err
		}
		if s.buf[s.r] == ' ' {
			if err := s.copyByte(); err != nil {
				return err
			}
			if err := s.more(); err != nil {
				return err
			}
		}
		if c := s.buf[s.r]; c == '{' || c == '[' {
			return s.value()
		}
	}
	return s.line()
}

// line copies the rest of a line, its end included.
func (s *spillReader) line() error {
	for {
		if err := s.more(); err != nil {
			return err
		}
		i := bytes.IndexByte(s.buf[s.r:s.w], '\n')
		n := s.w - s.r
		if i >= 0 {
			n = i + 1
		}
		b, err := s.take(n)
		if err != nil {
			return err
		}
		s.out = append(s.out, b...)
		if i >= 0 {
			return nil
		}
	}
}

// value reads one JSON value, which starts at the next byte ('{' or '['),
// and the line end after it.
func (s *spillReader) value() error {
	s.started = true
	// Messages are one line each (MCP's stdio framing, an event stream's
	// data line): a whole line already in the window that is no longer
	// than the text a message may hold cannot carry a text to spill, and
	// goes through as it is, without being followed value by value —
	// nearly every message, at the cost of one search for its end.
	if i := bytes.IndexByte(s.buf[s.r:s.w], '\n'); i >= 0 && i < s.sp.hold {
		b, err := s.take(i + 1)
		if err != nil {
			return err
		}
		s.out = append(s.out, b...)
		return nil
	}
	for {
		if err := s.more(); err != nil {
			return err
		}
		c := s.buf[s.r]
		switch {
		case c == '{' || c == '[':
			s.idNext = false // a container is no id
			b, err := s.take(1)
			if err != nil {
				return err
			}
			s.out = append(s.out, b...)
			s.stack = append(s.stack, frame{object: c == '{', expectKey: c == '{'})
		case c == '}' || c == ']':
			if len(s.stack) == 0 || s.stack[len(s.stack)-1].object != (c == '}') {
				s.raw = true
				return nil
			}
			b, err := s.take(1)
			if err != nil {
				return err
			}
			s.out = append(s.out, b...)
			s.stack = s.stack[:len(s.stack)-1]
			if len(s.stack) == 0 {
				s.end()
				return nil
			}
		case c == ',':
			if f := s.top(); f != nil {
				if f.object {
					f.expectKey, f.key = true, ""
				} else {
					f.index++
				}
			}
			if err := s.copyByte(); err != nil {
				return err
			}
		case c == ':':
			if f := s.top(); f != nil && f.object {
				f.expectKey = false
				s.idNext = len(s.stack) == 1 && f.key == "id"
			}
			if err := s.copyByte(); err != nil {
				return err
			}
		case c == '"':
			if err := s.str(); err != nil {
				return err
			}
		case isSpace(c):
			if err := s.copyByte(); err != nil {
				return err
			}
		default:
			if err := s.scalar(); err != nil {
				return err
			}
		}
	}
}

func (s *spillReader) top() *frame {
	if len(s.stack) == 0 {
		return nil
	}
	return &s.stack[len(s.stack)-1]
}

func (s *spillReader) copyByte() error {
	b, err := s.take(1)
	if err != nil {
		return err
	}
	s.out = append(s.out, b...)
	return nil
}

// end finishes a message: the line end after it goes with it, and what it
// spilled goes to the call waiting for it.
func (s *spillReader) end() {
	for s.r < s.w && isSpace(s.buf[s.r]) {
		c := s.buf[s.r]
		s.out = append(s.out, c)
		s.r++
		if c == '\n' {
			break
		}
	}
	if len(s.spilled) > 0 {
		s.sp.deliver(s.idKey(), append([]spilled(nil), s.spilled...))
	}
}

// idKey is the message's id in the form idKey gives request ids.
func (s *spillReader) idKey() string { return rawIDKey(s.id) }

// rawIDKey is the key of an id as JSON gives it.
func rawIDKey(id []byte) string {
	id = bytes.TrimSpace(id)
	if len(id) > 0 && id[0] == '"' {
		var v string
		if json.Unmarshal(id, &v) != nil {
			return ""
		}
		return idKey(v)
	}
	if n, err := strconv.ParseInt(string(id), 10, 64); err == nil {
		return idKey(n)
	}
	return ""
}

// scalar copies a number or a literal.
func (s *spillReader) scalar() error {
	isID := s.idNext
	s.idNext = false
	for {
		if err := s.more(); err != nil {
			return err
		}
		i := s.r
		for i < s.w {
			c := s.buf[i]
			if c == ',' || c == '}' || c == ']' || isSpace(c) {
				break
			}
			i++
		}
		b, err := s.take(i - s.r)
		if err != nil {
			return err
		}
		s.out = append(s.out, b...)
		if isID && len(s.id) < 64 {
			s.id = append(s.id, b...)
		}
		if i < s.w {
			return nil
		}
	}
}

// candidate reports whether the string value about to be read is the text
// of a result part, and which.
func (s *spillReader) candidate() (index int, resource bool, ok bool) {
	st := s.stack
	if len(st) < 4 || !st[0].object || st[0].key != "result" || !st[1].object || st[1].key != "content" || st[2].object {
		return 0, false, false
	}
	switch {
	case len(st) == 4 && st[3].object && st[3].key == "text":
		return st[2].index, false, true
	case len(st) == 5 && st[3].object && st[3].key == "resource" && st[4].object && st[4].key == "text":
		return st[2].index, true, true
	}
	return 0, false, false
}

// str reads a string: a key (remembered when short), a result part's
// text (held, or spilled once the message would hold too much), or any
// other string (copied).
func (s *spillReader) str() (err error) {
	f := s.top()
	isKey := f != nil && f.object && f.expectKey
	isID := s.idNext
	s.idNext = false
	index, resource, cand := 0, false, false
	if !isKey {
		index, resource, cand = s.candidate()
	}
	start := len(s.out)
	if err := s.copyByte(); err != nil { // the opening quote
		return err
	}
	var sink *spillSink
	defer func() {
		if err != nil && sink != nil {
			sink.abort()
		}
	}()
	escaped := false
	for {
		if err := s.more(); err != nil {
			return err
		}
		// Find the closing quote, skipping escaped characters.
		i, closed := s.r, false
		for i < s.w {
			c := s.buf[i]
			if escaped {
				escaped = false
			} else if c == '\\' {
				escaped = true
			} else if c == '"' {
				closed = true
				break
			}
			i++
		}
		if closed {
			i++ // the quote
		}
		b, err := s.take(i - s.r)
		if err != nil {
			return err
		}
		if sink != nil {
			body := b
			if closed {
				body = b[:len(b)-1]
			}
			sink.write(body)
		} else {
			s.out = append(s.out, b...)
			if cand && len(s.out)-start > s.sp.hold-s.held {
				// This text would take the message past what may be
				// held: from here on it goes to a file.
				sink = s.spill(index, resource, s.out[start+1:])
				s.out = s.out[:start]
			}
		}
		if closed {
			break
		}
	}
	switch {
	case sink != nil:
		s.out = sink.finish(s.out)
		s.held += sink.kept
		s.spilled = append(s.spilled, spilled{index: index, resource: resource, spill: sink.result()})
	case isKey:
		if k := s.out[start:]; len(k) <= maxKey+2 {
			f.key = string(k[1 : len(k)-1])
		} else {
			f.key = ""
		}
	case cand:
		s.held += len(s.out) - start
	case isID && len(s.out)-start <= 64:
		s.id = append(s.id[:0], s.out[start:]...)
	}
	return nil
}

// spill starts writing a text to a file: raw is what arrived of it so
// far, still escaped, without its opening quote (possibly ending with its
// closing quote, which is dropped).
func (s *spillReader) spill(index int, resource bool, raw []byte) *spillSink {
	room := max(s.sp.hold-s.held, 0)
	keep := min(room, s.sp.hold/8)
	k := &spillSink{head: int(float64(keep) * 0.7)}
	k.tail = keep - k.head
	k.unescape.out = k.decoded
	k.unescape.hi = -1
	k.open(s.sp)
	if n := len(raw); n > 0 && raw[n-1] == '"' && !escapedAt(raw, n-1) {
		raw = raw[:n-1]
	}
	k.write(raw)
	return k
}

// escapedAt reports whether raw[i] is escaped by the backslashes before it.
func escapedAt(raw []byte, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && raw[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// spillSink receives one spilled text: the file, and the beginning and end
// the message keeps.
type spillSink struct {
	file     *os.File
	w        *bufio.Writer
	path     string
	err      error
	unescape unescaper

	head, tail   int // bytes kept of each
	headBuf      []byte
	tailBuf      []byte
	bytes, chars int64
	kept         int // bytes of the text the message keeps
}

func (k *spillSink) open(sp *spiller) {
	dir := filepath.Join(sp.dir, tool.Sanitize(sp.server))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		k.err = err
		return
	}
	k.path = filepath.Join(dir, tool.NewID()+".txt")
	f, err := os.OpenFile(k.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		k.err, k.path = err, ""
		return
	}
	k.file, k.w = f, bufio.NewWriterSize(f, 64<<10)
}

// write takes raw (escaped) text.
func (k *spillSink) write(raw []byte) { k.unescape.write(raw) }

// decoded takes decoded text.
func (k *spillSink) decoded(b []byte) {
	k.bytes += int64(len(b))
	for _, c := range b {
		if c&0xC0 != 0x80 {
			k.chars++
		}
	}
	if k.w != nil && k.err == nil {
		if _, err := k.w.Write(b); err != nil {
			k.err = err
		}
	}
	if n := k.head - len(k.headBuf); n > 0 {
		k.headBuf = append(k.headBuf, b[:min(n, len(b))]...)
	}
	if k.tail > 0 {
		if len(b) > k.tail {
			b = b[len(b)-k.tail:]
		}
		k.tailBuf = append(k.tailBuf, b...)
		if len(k.tailBuf) > 2*k.tail {
			k.tailBuf = append(k.tailBuf[:0], k.tailBuf[len(k.tailBuf)-k.tail:]...)
		}
	}
}

func (k *spillSink) abort() {
	if k.file != nil {
		k.file.Close()
	}
}

// finish closes the file and appends the text the message keeps, as a
// JSON string, to out.
func (k *spillSink) finish(out []byte) []byte {
	k.unescape.flush()
	if k.w != nil {
		if err := k.w.Flush(); err != nil && k.err == nil {
			k.err = err
		}
		if err := k.file.Close(); err != nil && k.err == nil {
			k.err = err
		}
	}
	head := k.headBuf
	for len(head) > 0 && !utf8.FullRune(head[lastRuneStart(head):]) {
		head = head[:lastRuneStart(head)]
	}
	tail := k.tailBuf
	if len(tail) > k.tail {
		tail = tail[len(tail)-k.tail:]
	}
	// A text shorter than what is kept of it (its escapes made it long):
	// the tail starts after the head.
	if overlap := int64(len(head)+len(tail)) - k.bytes; overlap > 0 {
		tail = tail[min(overlap, int64(len(tail))):]
	}
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	where := "the whole text is in " + k.path
	if k.err != nil {
		where = "the rest could not be saved: " + k.err.Error()
		if k.path != "" {
			where += " (partly written to " + k.path + ")"
		}
	}
	marker := fmt.Sprintf("\n\n[... toolmux cut %d of %d bytes here, too long to hold in memory; %s ...]\n\n",
		k.bytes-int64(len(head))-int64(len(tail)), k.bytes, where)
	text := string(head) + marker + string(tail)
	k.kept = len(text)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(text)
	return append(out, bytes.TrimRight(b.Bytes(), "\n")...)
}

func lastRuneStart(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return 0
}

func (k *spillSink) result() tool.Spill {
	s := tool.Spill{Path: k.path, Bytes: k.bytes, Chars: k.chars}
	if k.err != nil {
		s.Error = k.err.Error()
	}
	return s
}

// unescaper decodes the body of a JSON string arriving in pieces split
// anywhere, escape sequences included, as encoding/json would (a lone
// surrogate becomes U+FFFD).
type unescaper struct {
	out  func([]byte)
	pend []byte // an escape sequence not complete yet
	hi   rune   // a high surrogate waiting for its low half, or -1
	tmp  [8]byte
}

func (u *unescaper) write(raw []byte) {
	for len(raw) > 0 {
		if len(u.pend) > 0 {
			need := escapeLen(u.pend)
			for len(u.pend) < need && len(raw) > 0 {
				u.pend = append(u.pend, raw[0])
				raw = raw[1:]
				need = escapeLen(u.pend)
			}
			if len(u.pend) < need {
				return
			}
			u.escape(u.pend)
			u.pend = u.pend[:0]
			continue
		}
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			u.plain(raw)
			return
		}
		if i > 0 {
			u.plain(raw[:i])
		}
		u.pend = append(u.pend, '\\')
		raw = raw[i+1:]
	}
}

// escapeLen is the length of the escape sequence pend starts.
func escapeLen(pend []byte) int {
	if len(pend) >= 2 && pend[1] == 'u' {
		return 6
	}
	return 2
}

func (u *unescaper) plain(b []byte) {
	u.lone()
	u.out(b)
}

// lone writes a high surrogate that got no low half.
func (u *unescaper) lone() {
	if u.hi >= 0 {
		u.hi = -1
		u.rune(utf8.RuneError)
	}
}

func (u *unescaper) rune(r rune) {
	n := utf8.EncodeRune(u.tmp[:], r)
	u.out(u.tmp[:n])
}

func (u *unescaper) escape(seq []byte) {
	var r rune
	switch seq[1] {
	case '"', '\\', '/':
		r = rune(seq[1])
	case 'b':
		r = '\b'
	case 'f':
		r = '\f'
	case 'n':
		r = '\n'
	case 'r':
		r = '\r'
	case 't':
		r = '\t'
	case 'u':
		v, err := strconv.ParseUint(string(seq[2:6]), 16, 32)
		if err != nil {
			u.lone()
			u.out(seq)
			return
		}
		r = rune(v)
		switch {
		case r >= 0xD800 && r < 0xDC00:
			u.lone()
			u.hi = r
			return
		case r >= 0xDC00 && r < 0xE000:
			if u.hi >= 0 {
				r = 0x10000 + (u.hi-0xD800)<<10 + (r - 0xDC00)
				u.hi = -1
			} else {
				r = utf8.RuneError
			}
		}
	default:
		u.lone()
		u.out(seq)
		return
	}
	u.lone()
	u.rune(r)
}

// flush ends the string.
func (u *unescaper) flush() {
	if len(u.pend) > 0 {
		u.lone()
		u.out(u.pend)
		u.pend = u.pend[:0]
	}
	u.lone()
}
