package tasklog_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/toolmux/toolmux/tasklog"
)

// Every JSON example in docs/tasklog.md is one the package's types decode,
// with no field they do not know: the task list of `toolmux logs --json`
// and the export format.
func TestDocsJSONExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/tasklog.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	var lists, exports int
	for _, b := range blocks {
		dec := json.NewDecoder(bytes.NewReader(b[1]))
		dec.DisallowUnknownFields()
		switch {
		case bytes.HasPrefix(bytes.TrimSpace(b[1]), []byte("[")):
			var v []tasklog.TaskSummary
			if err := dec.Decode(&v); err != nil || len(v) == 0 || v[0].ID == "" || !v[0].Status.Valid() {
				t.Errorf("task list example: %v\n%s", err, b[1])
			}
			lists++
		default:
			var v tasklog.ExportTask
			if err := dec.Decode(&v); err != nil || v.TaskID == "" || v.Version != tasklog.ExportVersion || len(v.StepLogs) == 0 || len(v.ToolCalls) == 0 {
				t.Errorf("export example: %v\n%s", err, b[1])
			}
			for _, c := range v.ToolCalls {
				if c.ServerName == "" || c.ToolName == "" || c.CallTime.IsZero() {
					t.Errorf("export example call %+v", c)
				}
			}
			exports++
		}
		if dec.More() {
			t.Errorf("trailing data after an example:\n%s", b[1])
		}
	}
	if lists != 1 || exports != 1 {
		t.Errorf("%d task list and %d export examples, want one of each", lists, exports)
	}
}
