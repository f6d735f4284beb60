package fleet

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// A file of run requests (toolmux submit FILE) is JSONL: one Request as a
// JSON object per line, {"id", "task", "agent"?, "metadata"?}. Blank lines
// and lines starting with '#' are skipped.

// maxRequestLine bounds one line of a file of run requests.
const maxRequestLine = 16 << 20

// LineError is a line of a file of run requests that is not a run
// request.
type LineError struct {
	// Name names the file ("stdin" for standard input).
	Name string
	// Line is the line's number, from 1.
	Line int
	// Reason says what is wrong with it.
	Reason string
	// Err is the decoder's or reader's error, if any.
	Err error
}

func (e *LineError) Error() string {
	msg := fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the decoder's or reader's error.
func (e *LineError) Unwrap() error { return e.Err }

// DuplicateIDError is a run id on two lines of one file: the second would
// be dropped by the fleet's de-duplication, silently, so the file is
// refused instead.
type DuplicateIDError struct {
	Name string
	ID   string
	// Line is the second line with the id; First the first.
	Line, First int
}

func (e *DuplicateIDError) Error() string {
	return fmt.Sprintf("%s:%d: id %q is already on line %d", e.Name, e.Line, e.ID, e.First)
}

// EmptyFileError is a file of run requests without any.
type EmptyFileError struct{ Name string }

func (e *EmptyFileError) Error() string { return e.Name + " holds no run" }

// ReadRequests reads a JSONL file of run requests, named name in its
// errors. Every request has an id and a task, and the ids are distinct. A
// bad line is a *LineError, a repeated id a *DuplicateIDError, a file
// without requests an *EmptyFileError.
func ReadRequests(r io.Reader, name string) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxRequestLine)
	var out []Request
	seen := map[string]int{}
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		req, err := decodeRequest(line)
		if err != nil {
			return nil, &LineError{Name: name, Line: n, Reason: `not a run ({"id", "task", "agent"})`, Err: err}
		}
		switch {
		case strings.TrimSpace(req.ID) == "":
			return nil, &LineError{Name: name, Line: n, Reason: "the run has no id"}
		case strings.TrimSpace(req.Task) == "":
			return nil, &LineError{Name: name, Line: n, Reason: fmt.Sprintf("run %q has no task", req.ID)}
		}
		if first, ok := seen[req.ID]; ok {
			return nil, &DuplicateIDError{Name: name, ID: req.ID, Line: n, First: first}
		}
		seen[req.ID] = n
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		// The line that could not be read is the one after the last read.
		reason := "cannot be read"
		if errors.Is(err, bufio.ErrTooLong) {
			reason = fmt.Sprintf("longer than %d bytes", maxRequestLine)
		}
		return nil, &LineError{Name: name, Line: n + 1, Reason: reason, Err: err}
	}
	if len(out) == 0 {
		return nil, &EmptyFileError{Name: name}
	}
	return out, nil
}

// errTrailing is a line holding more than one JSON value.
var errTrailing = errors.New("more than one JSON value on the line")

// decodeRequest decodes one line: exactly one JSON object of a Request's
// fields, nothing after it (a second object on the line would otherwise
// be dropped without a word).
func decodeRequest(line []byte) (Request, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return Request{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Request{}, errTrailing
	}
	return req, nil
}
