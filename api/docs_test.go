package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/internal/testservers"
)

// The first JSON example of docs/api.md has the shape of the API's errors.
func TestDocsErrorExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```json\n(.*?)```").FindSubmatch(doc)
	if block == nil {
		t.Fatal("no json example")
	}
	var e apiErr
	if err := json.Unmarshal(block[1], &e); err != nil || e.Error.Kind == "" || e.Error.Message == "" {
		t.Errorf("example %s: %v %+v", block[1], err, e)
	}
}

var (
	docRequest  = regexp.MustCompile(`<!-- request: (\S+) (\S+) (.*?) -->`)
	docResponse = regexp.MustCompile("(?s)<!-- response: (\\S+) (\\S+) -->\n```json\n(.*?)```")
)

// Every answer docs/api.md shows has only fields the API really sends,
// with the same JSON types: the documented requests are made against the
// whole serving stack, a shell call is left waiting for approval, and each
// documented answer is compared with the real one.
func TestDocsResponseExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	f.attach(t)
	answers := map[string]any{}
	for _, m := range docRequest.FindAllSubmatch(doc, -1) {
		method, path, body := string(m[1]), string(m[2]), string(m[3])
		answers[method+" "+path] = f.do(t, method, path, body)
	}
	waiting := make(chan struct{})
	go func() {
		defer close(waiting)
		f.post(t, "/api/tools/builtin/shell/call", `{"arguments": {"command": "echo hi"}}`, nil)
	}()
	if !testservers.Eventually(30*time.Second, func() bool {
		var p []api.Pending
		f.get(t, "/api/approvals", &p)
		return len(p) == 1
	}) {
		t.Fatal("the shell call never waited for approval")
	}

	responses := docResponse.FindAllSubmatch(doc, -1)
	if len(responses) < 6 {
		t.Fatalf("found %d documented answers", len(responses))
	}
	for _, m := range responses {
		method, path := string(m[1]), string(m[2])
		var want any
		if err := json.Unmarshal(m[3], &want); err != nil {
			t.Errorf("%s %s: the example is not JSON: %v", method, path, err)
			continue
		}
		got, ok := answers[method+" "+path]
		if !ok {
			if method != http.MethodGet {
				t.Errorf("%s %s: no documented request to compare with", method, path)
				continue
			}
			got = f.do(t, method, path, "")
		}
		if err := sameShape(want, got, ""); err != nil {
			t.Errorf("%s %s: %v", method, path, err)
		}
	}

	// Let the waiting call go.
	var p []api.Pending
	f.get(t, "/api/approvals", &p)
	for _, x := range p {
		f.post(t, "/api/approvals/"+x.ID, `{"decision": "deny"}`, nil)
	}
	<-waiting
}

// do makes a request and decodes its JSON answer.
func (f fixture) do(t *testing.T, method, path, body string) any {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return v
}

// sameShape reports the first field of want that got lacks or holds with
// another JSON type. An array of want is checked element by element
// against some element of got.
func sameShape(want, got any, at string) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: documented as an object, is %T", at, got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s.%s: documented, not sent", at, k)
			}
			if err := sameShape(wv, gv, at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("%s: documented as an array, is %T", at, got)
		}
		for i, wv := range w {
			var first error
			found := false
			for _, gv := range g {
				err := sameShape(wv, gv, fmt.Sprintf("%s[%d]", at, i))
				if err == nil {
					found = true
					break
				}
				if first == nil {
					first = err
				}
			}
			if !found {
				if first == nil {
					first = fmt.Errorf("%s[%d]: documented, but the array is empty", at, i)
				}
				return first
			}
		}
	default:
		if fmt.Sprintf("%T", want) != fmt.Sprintf("%T", got) {
			return fmt.Errorf("%s: documented as %T, is %T", at, want, got)
		}
	}
	return nil
}
