// Package testservers provides MCP servers with controllable failure modes
// for toolmux's own tests and benchmarks: slow, hanging, crashing, garbage on
// stdout, huge results, tool lists that change at run time.
//
// The same server runs in process (mounted on an httptest server for the
// HTTP transports) and as a separate process over stdio (the fixture
// command, built once per test binary by [Fixture]).
package testservers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options tune the fixture server.
type Options struct {
	// Name is the server's implementation name.
	Name string
	// Marker is a file the server appends a line to when a call is cancelled,
	// so tests can see cancellation arrive on the server side.
	Marker string
	// Tools, when positive, adds that many generated tools gen_0000...
	Tools int
}

// NewServer returns the fixture MCP server.
func NewServer(o Options) *mcp.Server {
	if o.Name == "" {
		o.Name = "fixture"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: o.Name, Version: "1.0.0"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	marker := func(line string) {
		if o.Marker == "" {
			return
		}
		f, err := os.OpenFile(o.Marker, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}

	type echoIn struct {
		Message string `json:"message" jsonschema:"text to echo back"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes the message back.", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return text("Echo: " + in.Message), nil, nil
		})

	type sleepIn struct {
		MS int `json:"ms" jsonschema:"milliseconds to sleep"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Sleeps, then answers; records cancellation in the marker file.", Annotations: ro},
		func(ctx context.Context, _ *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
				return text(fmt.Sprintf("slept %dms", in.MS)), nil, nil
			case <-ctx.Done():
				marker("cancelled slow")
				return nil, nil, ctx.Err()
			}
		})

	// span and span_write sleep and report when they ran, as "START END" in
	// Unix nanoseconds, so tests can tell whether calls overlapped without
	// timing anything themselves. span is read-only, span_write is not.
	spanTool := func(ctx context.Context, _ *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, any, error) {
		start := time.Now()
		select {
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
			return text(fmt.Sprintf("%d %d", start.UnixNano(), time.Now().UnixNano())), nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "span", Description: "Sleeps ms milliseconds; answers \"START END\" in Unix nanoseconds.", Annotations: ro}, spanTool)
	mcp.AddTool(s, &mcp.Tool{Name: "span_write", Description: "Like span, but declared as changing state."}, spanTool)

	mcp.AddTool(s, &mcp.Tool{Name: "hang", Description: "Never answers; records cancellation in the marker file."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			<-ctx.Done()
			marker("cancelled hang")
			return nil, nil, ctx.Err()
		})

	type crashIn struct {
		Code int `json:"code,omitempty" jsonschema:"exit status"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Writes to stderr and exits in the middle of the call."},
		func(_ context.Context, _ *mcp.CallToolRequest, in crashIn) (*mcp.CallToolResult, any, error) {
			code := in.Code
			if code == 0 {
				code = 3
			}
			fmt.Fprintf(os.Stderr, "fixture: fatal: simulated crash with status %d\n", code)
			os.Exit(code)
			return nil, nil, nil
		})

	type flakyIn struct {
		Flag string `json:"flag" jsonschema:"file whose absence makes the server crash (and create it)"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "crash_once", Description: "Crashes the server unless the flag file exists, creating it first.", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, in flakyIn) (*mcp.CallToolResult, any, error) {
			if _, err := os.Stat(in.Flag); err != nil {
				_ = os.WriteFile(in.Flag, []byte("crashed once\n"), 0o644)
				fmt.Fprintln(os.Stderr, "fixture: crashing once")
				os.Exit(4)
			}
			return text("survived"), nil, nil
		})

	type bigIn struct {
		Bytes int `json:"bytes" jsonschema:"size of the text to return"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "big", Description: "Returns a text of the requested size.", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, in bigIn) (*mcp.CallToolResult, any, error) {
			line := "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_+=\n"
			var b strings.Builder
			b.Grow(in.Bytes)
			for b.Len()+len(line) <= in.Bytes {
				b.WriteString(line)
			}
			b.WriteString(strings.Repeat("x", in.Bytes-b.Len()))
			return text(b.String()), nil, nil
		})

	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "Returns the server's process id.", Annotations: ro},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprint(os.Getpid())), nil, nil
		})

	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Reports a tool error (isError)."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return nil, nil, fmt.Errorf("the fixture failed on purpose")
		})

	type partsOut struct {
		Answer int    `json:"answer"`
		Unit   string `json:"unit"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "parts", Description: "Returns one content part of every type plus structured content.", Annotations: ro},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, partsOut, error) {
			size := int64(3)
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "first"},
				&mcp.ImageContent{Data: []byte{0x89, 'P', 'N', 'G'}, MIMEType: "image/png"},
				&mcp.AudioContent{Data: []byte("RIFF"), MIMEType: "audio/wav"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///r.txt", MIMEType: "text/plain", Text: "embedded"}},
				&mcp.ResourceLink{URI: "file:///l.bin", Name: "l.bin", Size: &size},
				&mcp.TextContent{Text: "last"},
			}}, partsOut{Answer: 42, Unit: "none"}, nil
		})

	type progressIn struct {
		Steps   int `json:"steps"`
		DelayMS int `json:"delay_ms,omitempty" jsonschema:"pause after each step, as real work would"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "progress", Description: "Reports progress for each step.", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, in progressIn) (*mcp.CallToolResult, any, error) {
			tok := req.Params.GetProgressToken()
			for i := 1; i <= in.Steps; i++ {
				if tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: tok, Progress: float64(i), Total: float64(in.Steps), Message: fmt.Sprintf("step %d", i),
					})
				}
				time.Sleep(time.Duration(in.DelayMS) * time.Millisecond)
			}
			return text(fmt.Sprintf("%d steps", in.Steps)), nil, nil
		})

	type fetchIn struct {
		URL string `json:"url" jsonschema:"http(s) URL to GET"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "fetch", Description: "GETs a URL (10 s timeout) and returns the status and the first 1 KiB of the body."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in fetchIn) (*mcp.CallToolResult, any, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL, nil)
			if err != nil {
				return nil, nil, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, nil, err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
			if err != nil {
				return nil, nil, err
			}
			return text(resp.Status + "\n" + string(body)), nil, nil
		})

	var added atomic.Int32
	var addMu sync.Mutex
	mcp.AddTool(s, &mcp.Tool{Name: "add_tool", Description: "Adds a tool named added_N to the server's list."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			addMu.Lock()
			defer addMu.Unlock()
			name := fmt.Sprintf("added_%d", added.Add(1))
			mcp.AddTool(s, &mcp.Tool{Name: name, Description: "Added at run time."},
				func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return text(name), nil, nil
				})
			return text(name), nil, nil
		})

	for i := range o.Tools {
		name := fmt.Sprintf("gen_%04d", i)
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: "Generated tool number " + fmt.Sprint(i), Annotations: ro},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return text(name), nil, nil
			})
	}
	return s
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}
