package gateway

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// readAll reads every body whole, whatever its announced length says and
// however its reader splits it, into one buffer of the announced length
// when that length is within the limit.
func TestReadAll(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 10_000) // 100 000 bytes, past the first chunk
	for _, c := range []struct {
		name          string
		length, limit int64
		exact         bool // read into a buffer of the announced length
	}{
		{"announced", int64(len(body)), 1 << 20, true},
		{"unknown length", -1, 1 << 20, false},
		{"no limit known", int64(len(body)), 0, false},
		{"over the limit", int64(len(body)), 50_000, false},
		{"announced short", 40_000, 1 << 20, false},
		{"announced long", 200_000, 1 << 20, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, rd := range []io.Reader{bytes.NewReader(body), iotest.OneByteReader(bytes.NewReader(body)), iotest.DataErrReader(bytes.NewReader(body))} {
				got, err := readAll(rd, c.length, c.limit)
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("read %d bytes (%v), want the %d of the body", len(got), err, len(body))
				}
				if c.exact && cap(got) != len(body)+1 {
					t.Errorf("read into %d bytes of room, want the announced %d (+1)", cap(got), len(body))
				}
			}
		})
	}
	small := []byte(`{"jsonrpc":"2.0"}`)
	for _, length := range []int64{int64(len(small)), -1, 2, 100} {
		if got, err := readAll(bytes.NewReader(small), length, 1<<20); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("small body announced as %d bytes: %q, %v", length, got, err)
		}
	}
	// A small body announced is read into a buffer of its size.
	if got, _ := readAll(bytes.NewReader(small), int64(len(small)), 1<<20); cap(got) != len(small)+1 {
		t.Errorf("a %d-byte body read into %d bytes of room", len(small), cap(got))
	}
	boom := errors.New("boom")
	if _, err := readAll(io.MultiReader(bytes.NewReader(body), iotest.ErrReader(boom)), -1, 0); !errors.Is(err, boom) {
		t.Fatalf("a failing read: %v", err)
	}
}
