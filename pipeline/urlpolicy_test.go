package pipeline

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
)

// hfPolicy is the seed system's rule: no Hugging Face datasets or spaces.
var hfPolicy = URLPolicyOptions{Rules: []URLRule{
	{Action: "deny", Host: "huggingface.co", Path: "/datasets/**"},
	{Action: "deny", Host: "huggingface.co", Path: "/spaces/**"},
}}

// runURLPolicy sends one call through the policy and reports whether the
// next handler was reached.
func runURLPolicy(t *testing.T, cfg URLPolicyOptions, call tool.Call) (*tool.Record, bool) {
	t.Helper()
	mw, err := NewURLPolicy(cfg)
	if err != nil {
		t.Fatalf("newURLPolicy: %v", err)
	}
	reached := false
	h := Chain(HandlerFunc(func(_ context.Context, c tool.Call) *tool.Record {
		reached = true
		return &tool.Record{Server: c.Server, Tool: c.Tool, Arguments: c.Arguments, Result: tool.TextResult("ok")}
	}), mw)
	rec := h.Call(context.Background(), call)
	if rec == nil {
		t.Fatal("nil record")
	}
	return rec, reached
}

func TestURLPolicy(t *testing.T) {
	hfNamed := hfPolicy
	hfNamed.Arguments = []string{"url", "Links"}
	precedence := URLPolicyOptions{Rules: []URLRule{
		{Action: "allow", Host: "huggingface.co", Path: "/datasets/public/**"},
		{Action: "deny", Host: "huggingface.co", Path: "/datasets/**"},
	}}
	reversed := URLPolicyOptions{Rules: []URLRule{precedence.Rules[1], precedence.Rules[0]}}
	defaultDeny := URLPolicyOptions{Default: "deny", Rules: []URLRule{
		{Action: "allow", Host: "*.example.com"},
		{Action: "allow", Host: "example.com"},
		{Action: "deny", Host: "api.example.com", Path: "/never/**"}, // shadowed by rule 0
	}}
	scrapeOnly := URLPolicyOptions{Rules: []URLRule{
		{Action: "deny", Host: "huggingface.co", Tools: []string{"scrape_*", "jina/*"}},
	}}
	loopback := URLPolicyOptions{Rules: []URLRule{{Action: "deny", Host: "127.0.0.1"}}}
	anyHost := URLPolicyOptions{Rules: []URLRule{{Action: "deny", Path: "/admin/**"}}}

	url := func(u string) map[string]any { return map[string]any{"url": u} }
	tests := []struct {
		name   string
		cfg    URLPolicyOptions
		server string // default "web"
		tool   string // default "scrape_website"
		args   map[string]any
		rule   int // index of the denying rule; -1 for the default; -2 for allowed
	}{
		// The Hugging Face rules.
		{"hf dataset", hfPolicy, "", "", url("https://huggingface.co/datasets/x"), 0},
		{"hf dataset deep", hfPolicy, "", "", url("https://huggingface.co/datasets/org/name/resolve/main/a.parquet"), 0},
		{"hf datasets listing", hfPolicy, "", "", url("https://huggingface.co/datasets"), 0},
		{"hf space", hfPolicy, "", "", url("https://huggingface.co/spaces/a/b"), 1},
		{"hf model allowed", hfPolicy, "", "", url("https://huggingface.co/models/x"), -2},
		{"hf root allowed", hfPolicy, "", "", url("https://huggingface.co"), -2},
		{"hf lookalike path allowed", hfPolicy, "", "", url("https://huggingface.co/datasetsx/y"), -2},
		{"other host allowed", hfPolicy, "", "", url("https://example.com/datasets/x"), -2},
		{"hf subdomain of evil allowed", hfPolicy, "", "", url("https://huggingface.co.evil.com/datasets/x"), -2},
		{"plain http", hfPolicy, "", "", url("http://huggingface.co/datasets/x"), 0},
		{"not http", hfPolicy, "", "", url("ftp://huggingface.co/datasets/x"), -2},
		{"query and fragment", hfPolicy, "", "", url("https://huggingface.co/datasets/x?row=1#top"), 0},
		// Host tricks.
		{"host case and trailing dot", hfPolicy, "", "", url("https://HuggingFace.CO./datasets/x"), 0},
		{"explicit port", hfPolicy, "", "", url("https://huggingface.co:443/datasets/x"), 0},
		{"userinfo names the denied host", hfPolicy, "", "", url("https://huggingface.co@evil.com/datasets/x"), -2},
		{"userinfo hides the denied host", hfPolicy, "", "", url("https://evil.com@huggingface.co/datasets/x"), 0},
		{"userinfo with password", hfPolicy, "", "", url("https://u:p@huggingface.co/spaces/x"), 1},
		{"backslash before at (RFC reading)", hfPolicy, "", "", url(`https://evil.com\@huggingface.co/datasets/x`), 0},
		{"backslashes as slashes (browser reading)", hfPolicy, "", "", url(`https://huggingface.co\datasets\x`), 0},
		{"no slashes after scheme", hfPolicy, "", "", url("https:huggingface.co/datasets/x"), 0},
		{"newline inside", hfPolicy, "", "", url("https://hugging\nface.co/datasets/x"), 0},
		{"full-width letters", hfPolicy, "", "", url("https://ｈｕｇｇｉｎｇｆａｃｅ．ｃｏ/datasets/x"), 0},
		{"ideographic full stop", hfPolicy, "", "", url("https://huggingface。co/datasets/x"), 0},
		// Path tricks.
		{"escaped slash", hfPolicy, "", "", url("https://huggingface.co/datasets%2Fx"), 0},
		{"escaped letter", hfPolicy, "", "", url("https://huggingface.co/%64atasets/x"), 0},
		{"dot segments", hfPolicy, "", "", url("https://huggingface.co/models/../datasets/x"), 0},
		{"escaped dot segments", hfPolicy, "", "", url("https://huggingface.co/models/%2e%2e/datasets/x"), 0},
		{"double slash", hfPolicy, "", "", url("https://huggingface.co//datasets/x"), 0},
		{"invalid escape elsewhere", hfPolicy, "", "", url("https://huggingface.co/datasets/100%"), 0},
		// Where the URL is.
		{"any argument name", hfPolicy, "", "", map[string]any{"target": "https://huggingface.co/datasets/x"}, 0},
		{"nested map and list", hfPolicy, "", "", map[string]any{"opts": map[string]any{"sources": []any{
			"https://example.com", map[string]any{"u": "https://huggingface.co/spaces/x"}}}}, 1},
		{"Go slice of strings", hfPolicy, "", "", map[string]any{"urls": []string{"https://example.com", "https://huggingface.co/datasets/x"}}, 0},
		{"embedded in code", hfPolicy, "", "python", map[string]any{"code": `import requests; requests.get("https://huggingface.co/datasets/x").text`}, 0},
		{"embedded in prose", hfPolicy, "", "", map[string]any{"info_to_extract": "compare with https://huggingface.co/spaces/y, please"}, 1},
		{"no scheme, not named", hfPolicy, "", "", map[string]any{"note": "huggingface.co/datasets/x"}, -2},
		{"no scheme, named", hfNamed, "", "", url("huggingface.co/datasets/x"), 0},
		{"no scheme, named, case of name", hfNamed, "", "", map[string]any{"links": []any{"example.com", "huggingface.co/spaces/z"}}, 1},
		{"no scheme, named, nested", hfNamed, "", "", map[string]any{"req": map[string]any{"URL": "HuggingFace.co/datasets/x"}}, 0},
		{"protocol-relative, named", hfNamed, "", "", url("//huggingface.co/datasets/x"), 0},
		{"no scheme, named, other host", hfNamed, "", "", url("example.com/datasets/x"), -2},
		{"other scheme, named", hfNamed, "", "", url("ftp://huggingface.co/datasets/x"), -2},
		{"not a URL, named", hfNamed, "", "", url("just some words"), -2},
		{"numbers and bools", hfNamed, "", "", map[string]any{"url": 3.5, "n": true, "x": nil}, -2},
		{"no arguments", hfPolicy, "", "", nil, -2},
		// First match wins.
		{"allow before deny: allowed", precedence, "", "", url("https://huggingface.co/datasets/public/a"), -2},
		{"allow before deny: denied", precedence, "", "", url("https://huggingface.co/datasets/private/a"), 1},
		{"deny before allow", reversed, "", "", url("https://huggingface.co/datasets/public/a"), 0},
		{"allow before deny, dot segments", precedence, "", "", url("https://huggingface.co/datasets/public/../private/a"), 1},
		// Default deny.
		{"default deny: subdomain allowed", defaultDeny, "", "", url("https://api.example.com/never/x"), -2},
		{"default deny: apex allowed", defaultDeny, "", "", url("https://Example.com"), -2},
		{"default deny: other host", defaultDeny, "", "", url("https://other.org/x"), -1},
		{"default deny: lookalike", defaultDeny, "", "", url("https://example.com.other.org/"), -1},
		{"default deny: one bad URL of two", defaultDeny, "", "", map[string]any{"a": "https://example.com", "b": "https://other.org"}, -1},
		{"default deny: no URL", defaultDeny, "", "", map[string]any{"q": "search for cats"}, -2},
		// Tools filter.
		{"tools filter: bare pattern matches", scrapeOnly, "", "scrape_website", url("https://huggingface.co/x"), 0},
		{"tools filter: server pattern matches", scrapeOnly, "jina", "read", url("https://huggingface.co/x"), 0},
		{"tools filter: other tool", scrapeOnly, "", "google_search", url("https://huggingface.co/x"), -2},
		// IP address forms.
		{"loopback", loopback, "", "", url("http://127.0.0.1:8080/"), 0},
		{"loopback as one number", loopback, "", "", url("http://2130706433/"), 0},
		{"loopback in hex", loopback, "", "", url("http://0x7f.0.0.1/"), 0},
		{"loopback in octal", loopback, "", "", url("http://0177.0.0.1/"), 0},
		{"loopback short", loopback, "", "", url("http://127.1/"), 0},
		{"loopback IPv4-mapped IPv6", loopback, "", "", url("http://[::ffff:127.0.0.1]/"), 0},
		{"other loopback address", loopback, "", "", url("http://127.0.0.2/"), -2},
		// A rule without host.
		{"path on any host", anyHost, "", "", url("https://a.b.c/admin/x"), 0},
		{"path on any host, other path", anyHost, "", "", url("https://a.b.c/public/admin"), -2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			call := tool.Call{Server: "web", Tool: "scrape_website", Arguments: tc.args, Task: "t", Session: "main"}
			if tc.server != "" {
				call.Server = tc.server
			}
			if tc.tool != "" {
				call.Tool = tc.tool
			}
			rec, reached := runURLPolicy(t, tc.cfg, call)
			if tc.rule == -2 {
				if !reached || rec.Error != nil {
					t.Fatalf("want allowed; reached %v, error %v", reached, rec.Err())
				}
				return
			}
			if reached {
				t.Fatal("the denied call reached the next handler")
			}
			if tool.KindOf(rec.Err()) != tool.KindPolicyViolation {
				t.Fatalf("error %v, want policy_violation", rec.Err())
			}
			if rec.Server != call.Server || rec.Tool != call.Tool || rec.Task != "t" || rec.Error.Tool != call.Tool {
				t.Errorf("record does not name the call: %+v", rec)
			}
			if len(rec.Notes) != 1 || rec.Notes[0].Layer != "url_policy" {
				t.Fatalf("notes %+v", rec.Notes)
			}
			d := rec.Notes[0].Data
			if d["rule"] != tc.rule || d["action"] != "deny" || d["url"] == "" {
				t.Errorf("note data %v, want rule %d", d, tc.rule)
			}
		})
	}
}

func TestURLPolicyMessages(t *testing.T) {
	call := func(u string) tool.Call {
		return tool.Call{Server: "web", Tool: "scrape_website", Arguments: map[string]any{"url": u}}
	}
	rec, _ := runURLPolicy(t, hfPolicy, call("https://huggingface.co/datasets/x"))
	want := "URL https://huggingface.co/datasets/x is blocked by the URL policy (deny host huggingface.co path /datasets/**)"
	if rec.Error.Message != want || rec.Notes[0].Message != want {
		t.Errorf("message %q, note %q; want %q", rec.Error.Message, rec.Notes[0].Message, want)
	}
	if got := rec.Err().Error(); got != "policy_violation: "+want {
		t.Errorf("Error() = %q", got)
	}
	if u := rec.Notes[0].Data["url"]; u != "https://huggingface.co/datasets/x" {
		t.Errorf("note url %v", u)
	}

	custom := URLPolicyOptions{Rules: []URLRule{{Action: "deny", Host: "*.hf.co", Message: "Hugging Face mirrors are off limits for this benchmark."}}}
	rec, _ = runURLPolicy(t, custom, call("https://cdn.hf.co/x"))
	if rec.Error.Message != "Hugging Face mirrors are off limits for this benchmark." {
		t.Errorf("custom message %q", rec.Error.Message)
	}

	rec, _ = runURLPolicy(t, URLPolicyOptions{Default: "deny"}, call("https://other.org/x"))
	if want := "URL https://other.org/x is blocked by the URL policy (no rule allows it, and the default is deny)"; rec.Error.Message != want {
		t.Errorf("default message %q", rec.Error.Message)
	}

	tools := URLPolicyOptions{Rules: []URLRule{{Action: "deny", Tools: []string{"scrape_*"}}}}
	rec, _ = runURLPolicy(t, tools, call("https://a.org/"))
	if want := "URL https://a.org/ is blocked by the URL policy (deny every URL for tools scrape_*)"; rec.Error.Message != want {
		t.Errorf("tools message %q", rec.Error.Message)
	}

	long := "https://huggingface.co/datasets/" + strings.Repeat("x", 500)
	rec, _ = runURLPolicy(t, hfPolicy, call(long))
	if len(rec.Error.Message) > 400 || !strings.Contains(rec.Error.Message, "…") || rec.Notes[0].Data["url"] != long {
		t.Errorf("long URL: message %d bytes: %q", len(rec.Error.Message), rec.Error.Message)
	}
}

func TestURLPolicyConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  URLPolicyOptions
		want string
	}{
		{"bad default", URLPolicyOptions{Default: "block"}, `default "block"`},
		{"bad action", URLPolicyOptions{Rules: []URLRule{{Action: "block"}}}, `rules[0]: action "block"`},
		{"empty action", URLPolicyOptions{Rules: []URLRule{{Action: "allow"}, {Host: "a.com"}}}, `rules[1]: action ""`},
		{"bad host", URLPolicyOptions{Rules: []URLRule{{Action: "deny", Host: "[a"}}}, "bad host pattern"},
		{"bad path", URLPolicyOptions{Rules: []URLRule{{Action: "deny", Path: "/a/[b"}}}, "bad path pattern"},
		{"relative path", URLPolicyOptions{Rules: []URLRule{{Action: "deny", Path: "datasets/**"}}}, "must start with /"},
		{"bad tools", URLPolicyOptions{Rules: []URLRule{{Action: "deny", Tools: []string{"a/[b"}}}}, "bad tool pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewURLPolicy(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := NewURLPolicy(URLPolicyOptions{Default: "DENY", Rules: []URLRule{{Action: "Allow", Host: "HuggingFace.co"}}}); err != nil {
		t.Errorf("case of actions: %v", err)
	}
}

// TestURLPolicyBlocksBeforeTheNetwork runs the policy in front of a real
// manager and a real MCP server whose fetch tool makes HTTP requests: a
// denied URL never reaches the HTTP server, an allowed one does.
func TestURLPolicyBlocksBeforeTheNetwork(t *testing.T) {
	var hits atomic.Int32
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "served %s", r.URL.Path)
	}))
	defer web.Close()

	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mw, err := NewURLPolicy(URLPolicyOptions{Rules: []URLRule{
		{Action: "deny", Host: "127.0.0.1", Path: "/datasets/**"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := Chain(m, mw)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fetch := func(path string) *tool.Record {
		return h.Call(ctx, tool.Call{Server: "fx", Tool: "fetch", Task: "t", Arguments: map[string]any{"url": web.URL + path}})
	}

	rec := fetch("/datasets/secret")
	if tool.KindOf(rec.Err()) != tool.KindPolicyViolation {
		t.Fatalf("denied fetch: %v %+v", rec.Err(), rec.Result)
	}
	if rec.Attempts != 0 || hits.Load() != 0 {
		t.Fatalf("the denied call went out: attempts %d, requests %d", rec.Attempts, hits.Load())
	}
	t.Logf("denied: %v", rec.Err())

	rec = fetch("/models/public")
	if rec.Err() != nil {
		t.Fatalf("allowed fetch: %v", rec.Err())
	}
	if got := rec.Result.Text(); got != "200 OK\nserved /models/public" {
		t.Errorf("allowed fetch returned %q", got)
	}
	if hits.Load() != 1 {
		t.Errorf("requests = %d, want 1", hits.Load())
	}
}
