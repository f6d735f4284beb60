package pipeline_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// miroflowServers stands in for MiroFlow's Python tool servers: the same
// server and tool names and argument shapes, served over streamable HTTP.
type miroflowServers struct {
	mu    sync.Mutex
	calls map[string]int // "server/tool" -> tools/call requests that arrived
	urls  map[string]string
}

func (ms *miroflowServers) count(key string) int {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.calls[key]
}

func startMiroflowServers(t *testing.T) *miroflowServers {
	ms := &miroflowServers{calls: map[string]int{}, urls: map[string]string{}}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	build := map[string]func(s *mcp.Server){
		"tool-google-search": func(s *mcp.Server) {
			type searchIn struct {
				Q   string `json:"q"`
				Num int    `json:"num,omitempty"`
			}
			mcp.AddTool(s, &mcp.Tool{Name: "google_search", Description: "Google search via Serper."},
				func(_ context.Context, _ *mcp.CallToolRequest, in searchIn) (*mcp.CallToolResult, any, error) {
					if strings.Contains(in.Q, "nothing") {
						return text(fmt.Sprintf(`{"searchParameters": {"q": %q}, "organic": []}`, in.Q)), nil, nil
					}
					return text(fmt.Sprintf(`{"searchParameters": {"q": %q}, "organic": [{"title": "About %s", "link": "https://example.com/"}]}`, in.Q, in.Q)), nil, nil
				})
			type scrapeIn struct {
				URL string `json:"url"`
			}
			mcp.AddTool(s, &mcp.Tool{Name: "scrape_website", Description: "Scrape a page."},
				func(_ context.Context, _ *mcp.CallToolRequest, in scrapeIn) (*mcp.CallToolResult, any, error) {
					switch {
					case strings.Contains(in.URL, "flaky"):
						return nil, nil, fmt.Errorf("unhandled errors in a TaskGroup (1 sub-exception)")
					case strings.Contains(in.URL, "long"):
						return text(strings.Repeat("lorem ipsum ", 5000)), nil, nil
					}
					return text("page of " + in.URL), nil, nil
				})
		},
		"tool-reading": func(s *mcp.Server) {
			type in struct {
				URL           string `json:"url"`
				InfoToExtract string `json:"info_to_extract"`
			}
			mcp.AddTool(s, &mcp.Tool{Name: "scrape_and_extract_info", Description: "Scrape and extract."},
				func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
					return text("extracted " + a.InfoToExtract + " from " + a.URL), nil, nil
				})
		},
		"tool-python": func(s *mcp.Server) {
			type in struct {
				CodeBlock string `json:"code_block"`
				SandboxID string `json:"sandbox_id,omitempty"`
			}
			mcp.AddTool(s, &mcp.Tool{Name: "run_python_code", Description: "Run Python."},
				func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
					return text("ran: " + a.CodeBlock), nil, nil
				})
		},
		// The fallback target; the real built-in web_fetch joins the
		// built-in tools with the full tool set.
		"builtin": func(s *mcp.Server) {
			type in struct {
				URL string `json:"url"`
			}
			mcp.AddTool(s, &mcp.Tool{Name: "web_fetch", Description: "Fetch a page as Markdown."},
				func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
					return text("fetched " + a.URL), nil, nil
				})
		},
	}
	for name, add := range build {
		s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
		add(s)
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && method == "tools/call" {
					ms.mu.Lock()
					ms.calls[name+"/"+p.Name]++
					ms.mu.Unlock()
				}
				return next(ctx, method, req)
			}
		})
		ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
		t.Cleanup(func() {
			for ss := range s.Sessions() {
				ss.Close()
			}
			ts.Close()
		})
		ms.urls[name] = ts.URL
	}
	return ms
}

func miroflowPipeline(t *testing.T, ms *miroflowServers, opts ...pipeline.Option) *pipeline.Pipeline {
	t.Helper()
	cfg, err := config.Load("../examples/miroflow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var srcs []manager.Option
	for _, sc := range cfg.Servers {
		if _, ok := ms.urls[sc.Name]; !ok && !sc.Disabled && sc.Name != "tool-sogou-search" {
			t.Errorf("examples/miroflow.yaml has server %q that the test does not stand in for", sc.Name)
		}
	}
	for name, url := range ms.urls {
		src, err := mcpsource.New(mcpsource.Config{Name: name, Transport: mcpsource.StreamableHTTP, URL: url})
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, manager.WithSource(src, manager.ServerOptions{}))
	}
	m, err := manager.New(srcs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	p, err := pipeline.New(m, append(append(pipeline.FromConfig(cfg.Pipeline), pipeline.WithDataDir(t.TempDir())), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMiroflowExampleRules(t *testing.T) {
	ms := startMiroflowServers(t)
	p := miroflowPipeline(t, ms, pipeline.WithLookupEnv(func(string) (string, bool) { return "", false }))
	ctx := context.Background()
	call := func(server, name string, args map[string]any) *tool.Record {
		return p.Call(ctx, tool.Call{Task: "task", Session: "main", Server: server, Tool: name, Arguments: args})
	}

	t.Run("aliases", func(t *testing.T) {
		rec := call("tool-reading", "scrape_and_extract_info", map[string]any{"url": "https://example.com/p", "description": "the price"})
		if rec.Err() != nil || rec.Result.Text() != "extracted the price from https://example.com/p" || rec.Arguments["info_to_extract"] != "the price" {
			t.Errorf("scrape_and_extract_info: %v %+v", rec.Err(), rec.Arguments)
		}
		if len(rec.Instructions) != 1 {
			t.Errorf("first use should carry the tool's instructions: %v", rec.Instructions)
		}
		rec = call("tool-python", "run_python_code", map[string]any{"code": "print(1)"})
		if rec.Err() != nil || rec.Result.Text() != "ran: print(1)" {
			t.Errorf("run_python_code: %v", rec.Err())
		}
	})

	t.Run("hugging face blocked before the call", func(t *testing.T) {
		before := ms.count("tool-google-search/scrape_website") + ms.count("tool-reading/scrape_and_extract_info")
		for _, c := range []struct{ server, tool, url string }{
			{"tool-google-search", "scrape_website", "https://huggingface.co/datasets/squad"},
			{"tool-reading", "scrape_and_extract_info", "https://huggingface.co/spaces/someone/demo"},
		} {
			args := map[string]any{"url": c.url}
			if c.tool == "scrape_and_extract_info" {
				args["info_to_extract"] = "x"
			}
			rec := call(c.server, c.tool, args)
			if tool.KindOf(rec.Err()) != tool.KindPolicyViolation || !strings.Contains(rec.Error.Message, "Hugging Face") {
				t.Errorf("%s: %v", c.url, rec.Err())
			}
		}
		if after := ms.count("tool-google-search/scrape_website") + ms.count("tool-reading/scrape_and_extract_info"); after != before {
			t.Errorf("blocked calls reached the servers (%d -> %d)", before, after)
		}
		if rec := call("tool-google-search", "scrape_website", map[string]any{"url": "https://huggingface.co/models"}); rec.Err() != nil {
			t.Errorf("models pages are allowed: %v", rec.Err())
		}
	})

	t.Run("duplicate queries rejected and rolled back", func(t *testing.T) {
		if rec := call("tool-google-search", "google_search", map[string]any{"q": "Rust  MCP"}); rec.Err() != nil || rec.Verdict.Rollback {
			t.Fatalf("first search: %v %+v", rec.Err(), rec.Verdict)
		}
		p.Commit("task", "main")
		rec := call("tool-google-search", "google_search", map[string]any{"q": "rust mcp"})
		if tool.KindOf(rec.Err()) != tool.KindDuplicateQuery || !rec.Verdict.Rollback || rec.Verdict.Reason != "the model repeated a query it already made" {
			t.Errorf("repeat: %v %+v", rec.Err(), rec.Verdict)
		}
		// A rolled-back turn's query does not count.
		call("tool-google-search", "google_search", map[string]any{"q": "go generics"})
		p.Discard("task", "main")
		if rec := call("tool-google-search", "google_search", map[string]any{"q": "go generics"}); rec.Err() != nil {
			t.Errorf("query of a discarded turn counted: %v", rec.Err())
		}
	})

	t.Run("empty organic results", func(t *testing.T) {
		rec := call("tool-google-search", "google_search", map[string]any{"q": "nothing at all"})
		if rec.Err() != nil || !rec.Verdict.Rollback || rec.Verdict.Reason != "the search found nothing; rewrite the query" {
			t.Errorf("verdict: %v %+v", rec.Err(), rec.Verdict)
		}
		if len(rec.Instructions) != 1 || !strings.Contains(rec.Instructions[0], "fewer, more general keywords") {
			t.Errorf("instructions: %v", rec.Instructions)
		}
	})

	t.Run("scrape falls back by error kind", func(t *testing.T) {
		rec := call("tool-google-search", "scrape_website", map[string]any{"url": "https://flaky.example/a"})
		if rec.Err() != nil || rec.Result.Text() != "fetched https://flaky.example/a" {
			t.Fatalf("fallback: %v", rec.Err())
		}
		var target any
		for _, n := range rec.Notes {
			if n.Layer == "fallback" {
				target = n.Data["target"]
			}
		}
		if target != "builtin/web_fetch" {
			t.Errorf("notes: %+v", rec.Notes)
		}
	})

	t.Run("unknown tool rolled back", func(t *testing.T) {
		rec := call("tool-google-search", "google_searc", map[string]any{"q": "x"})
		if tool.KindOf(rec.Err()) != tool.KindToolNotRegistered || !rec.Verdict.Rollback {
			t.Errorf("%v %+v", rec.Err(), rec.Verdict)
		}
	})

	t.Run("normal limits", func(t *testing.T) {
		rec := call("tool-google-search", "scrape_website", map[string]any{"url": "https://example.com/long"})
		if n := utf8.RuneCountInString(rec.Result.Text()); n != 60000 {
			t.Errorf("60000 characters are within the normal limit, got %d", n)
		}
	})
}

func TestMiroflowExampleLowContext(t *testing.T) {
	ms := startMiroflowServers(t)
	p := miroflowPipeline(t, ms, pipeline.WithLookupEnv(func(k string) (string, bool) {
		return "1", k == "TOOLMUX_LOW_CONTEXT"
	}))
	rec := p.Call(context.Background(), tool.Call{Server: "tool-google-search", Tool: "scrape_website", Arguments: map[string]any{"url": "https://example.com/long"}})
	if rec.Err() != nil {
		t.Fatal(rec.Err())
	}
	if n := utf8.RuneCountInString(rec.Result.Text()); n > 20000 {
		t.Errorf("low-context scrape kept %d characters, limit 20000", n)
	}
}
