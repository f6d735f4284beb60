package fleet_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/fleet"
)

func TestReadRequests(t *testing.T) {
	reqs, err := fleet.ReadRequests(strings.NewReader(`# a comment
{"id": "a", "task": "first"}

  {"id": "b", "task": "second", "agent": "helper", "metadata": {"k": 1}}`+"\r\n"), "runs.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].ID != "a" || reqs[0].Task != "first" || reqs[1].Agent != "helper" || reqs[1].Metadata["k"] != 1.0 {
		t.Errorf("requests %+v", reqs)
	}

	for _, c := range []struct {
		name, in string
		line     int
	}{
		{"not JSON", "{\"id\": \"a\", \"task\": \"x\"}\n\nnot json\n", 3},
		{"unknown field", `{"id": "a", "task": "x", "prompt": "y"}`, 1},
		{"no id", "# c\n" + `{"task": "x"}`, 2},
		{"blank id", `{"id": "  ", "task": "x"}`, 1},
		{"no task", `{"id": "a"}`, 1},
		{"an array", `[{"id": "a", "task": "x"}]`, 1},
		// Two objects on a line: the second would be dropped unseen.
		{"two objects", `{"id": "a", "task": "x"} {"id": "b", "task": "y"}`, 1},
		{"trailing garbage", `{"id": "a", "task": "x"},`, 1},
	} {
		_, err := fleet.ReadRequests(strings.NewReader(c.in), "runs.jsonl")
		var le *fleet.LineError
		if !errors.As(err, &le) || le.Name != "runs.jsonl" || le.Line != c.line {
			t.Errorf("%s: %v, want a *LineError of line %d", c.name, err, c.line)
		}
	}

	_, err = fleet.ReadRequests(strings.NewReader("{\"id\": \"a\", \"task\": \"x\"}\n{\"id\": \"b\", \"task\": \"y\"}\n{\"id\": \"a\", \"task\": \"z\"}\n"), "f")
	var de *fleet.DuplicateIDError
	if !errors.As(err, &de) || de.ID != "a" || de.Line != 3 || de.First != 1 {
		t.Errorf("duplicate id: %v", err)
	}
	_, err = fleet.ReadRequests(strings.NewReader("# nothing\n\n"), "f")
	var ee *fleet.EmptyFileError
	if !errors.As(err, &ee) {
		t.Errorf("empty file: %v", err)
	}
	_, err = fleet.ReadRequests(strings.NewReader(`{"id": "a", "task": "`+strings.Repeat("x", 17<<20)+`"}`), "f")
	var le *fleet.LineError
	if !errors.As(err, &le) || le.Line != 1 {
		t.Errorf("a line too long: %v", err)
	}
}

// FuzzReadRequests: a file of run requests is untrusted input. The parser
// never panics; it returns requests or one of its typed errors; every
// request it returns has an id and a task, the ids are distinct, and the
// requests written back as JSONL read back the same.
func FuzzReadRequests(f *testing.F) {
	for _, seed := range []string{
		`{"id": "a", "task": "x"}`,
		"# c\n{\"id\": \"a\", \"task\": \"x\", \"agent\": \"b\"}\n\n{\"id\": \"b\", \"task\": \"y\", \"metadata\": {\"n\": [1, 2.5e3, null]}}\r\n",
		`{"id": "a", "task": "x"} {"id": "b", "task": "y"}`,
		"{\"id\": \"a\", \"task\": \"x\"}\n{\"id\": \"a\", \"task\": \"y\"}",
		`{"id": "\u00e9\ud800", "task": "\t"}`,
		`null`,
		"",
		`{"id": 1, "task": "x"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		reqs, err := fleet.ReadRequests(bytes.NewReader(in), "f")
		if err != nil {
			var le *fleet.LineError
			var de *fleet.DuplicateIDError
			var ee *fleet.EmptyFileError
			if !errors.As(err, &le) && !errors.As(err, &de) && !errors.As(err, &ee) {
				t.Fatalf("an untyped error: %T %v", err, err)
			}
			if le != nil && le.Line < 1 {
				t.Fatalf("a line error without a line: %v", err)
			}
			return
		}
		if len(reqs) == 0 {
			t.Fatal("no requests and no error")
		}
		seen := map[string]bool{}
		var b bytes.Buffer
		for _, r := range reqs {
			if strings.TrimSpace(r.ID) == "" || strings.TrimSpace(r.Task) == "" {
				t.Fatalf("a request without id or task: %+v", r)
			}
			if seen[r.ID] {
				t.Fatalf("id %q twice", r.ID)
			}
			seen[r.ID] = true
			line, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(line)
			b.WriteByte('\n')
		}
		again, err := fleet.ReadRequests(bytes.NewReader(b.Bytes()), "f")
		if err != nil {
			t.Fatalf("the requests written back do not read back: %v\n%s", err, b.String())
		}
		x, _ := json.Marshal(reqs)
		y, _ := json.Marshal(again)
		if !bytes.Equal(x, y) {
			t.Fatalf("read back differently:\n%s\n%s", x, y)
		}
	})
}
