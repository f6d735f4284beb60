package api_test

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"
)

// The JSON example of docs/api.md has the shape of the API's errors.
func TestDocsErrorExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) == 0 {
		t.Fatal("no json example")
	}
	for _, b := range blocks {
		var e apiErr
		if err := json.Unmarshal(b[1], &e); err != nil || e.Error.Kind == "" || e.Error.Message == "" {
			t.Errorf("example %s: %v %+v", b[1], err, e)
		}
	}
}
