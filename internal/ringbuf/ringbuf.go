// Package ringbuf keeps the last bytes written to it, for diagnostics such as
// a server's stderr, without ever growing past its size.
package ringbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer that keeps only the last Size bytes written. It is
// safe for concurrent use.
type Buffer struct {
	mu    sync.Mutex
	buf   []byte
	start int // index of the oldest byte once the buffer has wrapped
	full  bool
	total int64
}

// New returns a buffer keeping the last size bytes.
func New(size int) *Buffer {
	if size <= 0 {
		size = 1
	}
	return &Buffer{buf: make([]byte, 0, size)}
}

// Write keeps the tail of p. It never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	size := cap(b.buf)
	if len(p) >= size {
		b.buf = append(b.buf[:0], p[len(p)-size:]...)
		b.start, b.full = 0, true
		return n, nil
	}
	if !b.full {
		room := size - len(b.buf)
		if len(p) <= room {
			b.buf = append(b.buf, p...)
			return n, nil
		}
		b.buf = append(b.buf, p[:room]...)
		p = p[room:]
		b.full = true
		b.start = 0
	}
	for len(p) > 0 {
		c := copy(b.buf[b.start:], p)
		p = p[c:]
		b.start = (b.start + c) % size
	}
	return n, nil
}

// Bytes returns a copy of the kept bytes, oldest first.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytesLocked()
}

func (b *Buffer) bytesLocked() []byte {
	if !b.full {
		return bytes.Clone(b.buf)
	}
	out := make([]byte, 0, len(b.buf))
	out = append(out, b.buf[b.start:]...)
	return append(out, b.buf[:b.start]...)
}

// Total returns how many bytes were ever written.
func (b *Buffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Tail returns at most the last n lines of the kept bytes, without a partial
// first line when older bytes were dropped, trimmed of surrounding blank lines.
func (b *Buffer) Tail(n int) string {
	b.mu.Lock()
	data := b.bytesLocked()
	dropped := b.total > int64(cap(b.buf))
	b.mu.Unlock()
	if dropped {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	data = bytes.TrimSpace(data)
	if n > 0 {
		lines := 0
		for i := len(data) - 1; i >= 0; i-- {
			if data[i] == '\n' {
				lines++
				if lines == n {
					data = bytes.TrimLeft(data[i+1:], "\n")
					break
				}
			}
		}
	}
	return string(data)
}

// Reset forgets everything kept.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = b.buf[:0]
	b.start, b.full, b.total = 0, false, 0
}
