package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/jsonscan"
)

// Stdio returns the transport of /mcp's catalog over a client's stdin
// (in) and stdout (out), for Server().Run: the go-sdk's newline-delimited
// JSON-RPC, with the bounds of the HTTP routes. A line longer than
// maxLine bytes (0: DefaultMaxRequestBytes, as Security's bound on a
// body; negative: no bound) is refused and skipped, and so is a
// message over the bounds of what the gateway decodes (weigh, bounds.go),
// each with a JSON-RPC error written to out, before the go-sdk reads it:
// without this the go-sdk would hold a line of any length, and end the
// session at one longer than its own bound.
func (g *Gateway) Stdio(in io.Reader, out io.Writer, maxLine int64) mcp.Transport {
	if maxLine == 0 {
		maxLine = DefaultMaxRequestBytes
	}
	w := &lockedWriter{w: out}
	return &mcp.IOTransport{
		Reader: io.NopCloser(&stdioEdge{g: g, in: bufio.NewReaderSize(in, 1<<20), out: w, max: maxLine}),
		Writer: w,
		// The lines that reach the go-sdk were bounded here.
		MaxLineLength: -1,
	}
}

// lockedWriter serializes the writes of the go-sdk (one per message) and
// of the edge's refusals on one stdout.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) Close() error { return nil }

// stdioEdge reads a client's messages a line at a time, and hands the go-sdk
// those within the bounds.
type stdioEdge struct {
	g       *Gateway
	in      *bufio.Reader
	out     *lockedWriter
	max     int64
	pending []byte // what is left of the line the go-sdk is reading
	// initialized is set once an initialize request has reached the
	// go-sdk, which handles it before it reads the next line.
	initialized bool
}

func (e *stdioEdge) Read(p []byte) (int, error) {
	for len(e.pending) == 0 {
		line, err := e.line()
		if len(line) > 0 {
			e.pending = e.admit(line)
		}
		if err != nil && len(e.pending) == 0 {
			return 0, err
		}
	}
	n := copy(p, e.pending)
	e.pending = e.pending[n:]
	return n, nil
}

// errLineTooLong marks a line over the bound, skipped.
var errLineTooLong = errors.New("line too long")

// line reads the next line, its newline included; a line over the bound
// is read to its end, dropped, and refused. A line is gathered in the
// chunks the reader hands over, then copied once into a buffer of its
// size: a buffer grown as it fills would hold up to twice and a half the
// line while it grows.
func (e *stdioEdge) line() ([]byte, error) {
	var chunks [][]byte
	n := 0
	for {
		chunk, err := e.in.ReadSlice('\n')
		if e.max >= 0 && int64(n+len(chunk)) > e.max+1 { // +1: the newline
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = e.in.ReadSlice('\n')
			}
			e.refuse(rpcError(nil, codeInvalidRequest, fmt.Sprintf(
				"toolmux: the message is longer than %d bytes, the most the gateway reads (--max-request-bytes)", e.max)))
			if e.g.large != nil && n >= LargeBodyBytes {
				e.g.large()
			}
			if err != nil {
				return nil, err
			}
			chunks, n = nil, 0
			continue
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if chunks == nil {
				return bytes.Clone(chunk), err // the line in one piece: one copy
			}
			line := make([]byte, 0, n+len(chunk))
			for _, c := range chunks {
				line = append(line, c...)
			}
			return append(line, chunk...), err
		}
		chunks = append(chunks, bytes.Clone(chunk)) // the reader's buffer is reused
		n += len(chunk)
	}
}

// admit returns line for the go-sdk, or nil when it is refused.
func (e *stdioEdge) admit(line []byte) []byte {
	body := bytes.TrimRight(line, "\r\n")
	if len(bytes.TrimSpace(body)) == 0 {
		return line
	}
	msg := jsonscan.Scan(body)
	if _, refusal := e.g.weigh(body, msg, false, e.g.main.toolName); refusal != nil {
		e.refuse(refusal)
		e.g.answered(body)
		return nil
	}
	if !e.initialized {
		// Before initialize, a request of the 2025-11-25 protocol is
		// told to initialize (nosession.go), not the go-sdk's error of
		// code 0.
		if isMethod(msg.Method, "initialize") {
			e.initialized = true
		} else if needsSession(msg) && !newEra(nil, body) {
			e.refuse(rpcError(rpcID(msg.ID), codeInvalidRequest, msgNotInitialized))
			e.g.answered(body)
			return nil
		}
	}
	return line
}

func (e *stdioEdge) refuse(msg []byte) {
	_, _ = e.out.Write(append(msg, '\n'))
}
