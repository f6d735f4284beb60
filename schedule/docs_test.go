package schedule_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/toolmux/toolmux/schedule"
)

// The event shown in docs/schedule.md is one the Event type decodes, with
// no field it does not know.
func TestDocsEventExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/schedule.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) == 0 {
		t.Fatal("no json example in docs/schedule.md")
	}
	for _, b := range blocks {
		dec := json.NewDecoder(bytes.NewReader(b[1]))
		dec.DisallowUnknownFields()
		var e schedule.Event
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("example %s: %v", b[1], err)
		}
		if e.Type != schedule.EventState || e.State != schedule.AwaitingApproval || e.Time.IsZero() || e.Call == "" {
			t.Errorf("example decoded to %+v", e)
		}
	}
}
