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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options tune the fixture server.
type Options struct {
	// Name is the server's implementation name.
	Name string
	// Marker is a file the server appends a line to when a call is cancelled,
	// so tests can see cancellation arrive on the server side; when hang
	// is entered, so they can see the call arrive before they act on it;
	// and when it is pinged.
	Marker string
	// Tools, when positive, adds that many generated tools gen_0000...
	Tools int
	// Catalog, when positive, adds that many tools of a realistic catalog
	// (see CatalogTool), all read-only, for tool selection tests.
	Catalog int
	// Wedge, when set, adds the tool wedge, which calls it and then never
	// answers, cancellation included. The fixture command passes a function
	// that makes the server stop reading its stdin: a wedged server, alive
	// but deaf.
	Wedge func()
	// Described, when set, adds the tool described with this description:
	// a server whose definition of a tool tests change between runs.
	Described string
	// TraceContext adds the tool trace_context, which answers with the
	// trace context the request carried, as JSON: {"meta": _meta's
	// traceparent, "header": the HTTP request's traceparent header}.
	TraceContext bool
	// TaskJobs adds the tools the conformance suite's tasks scenarios
	// call (greet, slow_compute, failing_job, protocol_error_job,
	// confirm_delete): a
	// gateway serving them as tasks is held to the suite.
	TaskJobs bool
	// Whoami adds the tool whoami, which answers with the SHA-256 of the
	// environment variable (over stdio) or the request header (over
	// HTTP) it is asked for, and the server's process id: a server that
	// shows whose credential reached it without putting the credential
	// in its answer (which toolmux records).
	Whoami bool
}

// Whoami is the answer of the fixture's whoami tool: hex SHA-256 sums
// (WhoamiSum), "" for a value that is not set.
type Whoami struct {
	Env    string `json:"env,omitempty"`
	Header string `json:"header,omitempty"`
	PID    int    `json:"pid"`
}

// WhoamiSum is how the whoami tool shows a value: its hex SHA-256.
func WhoamiSum(v string) string {
	if v == "" {
		return ""
	}
	s := sha256.Sum256([]byte(v))
	return hex.EncodeToString(s[:])
}

// TraceContext is the answer of the fixture's trace_context tool: the
// W3C traceparent the request carried in its _meta and, over HTTP, in its
// headers ("" where it carried none), and the keys of its _meta, sorted.
type TraceContext struct {
	Meta     string   `json:"meta"`
	Header   string   `json:"header"`
	MetaKeys []string `json:"metaKeys"`
}

// BigText is the text the fixture's big tool returns for n bytes: lines
// of every digit and letter, then "x" up to n.
func BigText(n int) string {
	const line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_+=\n"
	var b strings.Builder
	b.Grow(n)
	for b.Len()+len(line) <= n {
		b.WriteString(line)
	}
	b.WriteString(strings.Repeat("x", n-b.Len()))
	return b.String()
}

// BulkText is part i of what the fixture's bulk tool returns: about n
// bytes of text (never more, a multi-byte character is not split) mixing
// what JSON encoders escape (quotes, backslashes, control characters,
// "<&>") with multi-byte characters, one starting with i so parts differ.
func BulkText(i, n int) string {
	const piece = "line \"quoted\" back\\slash\ttab <a&b> é € 😀 \x01 end\n"
	var b strings.Builder
	b.Grow(n)
	fmt.Fprintf(&b, "part %d: ", i)
	for b.Len()+len(piece) <= n {
		b.WriteString(piece)
	}
	b.WriteString(strings.Repeat("z", max(n-b.Len(), 0)))
	return b.String()
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
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "ping" {
				marker("ping")
			}
			return next(ctx, method, req)
		}
	})

	type echoIn struct {
		Message string `json:"message" jsonschema:"text to echo back"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes the message back.", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return text("Echo: " + in.Message), nil, nil
		})
	if o.TraceContext {
		mcp.AddTool(s, &mcp.Tool{Name: "trace_context", Description: "Answers with the trace context the request carried.", Annotations: ro},
			func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				tc := TraceContext{}
				tc.Meta, _ = req.Params.GetMeta()["traceparent"].(string)
				tc.MetaKeys = slices.Sorted(maps.Keys(req.Params.GetMeta()))
				if req.Extra != nil && req.Extra.Header != nil {
					tc.Header = req.Extra.Header.Get("Traceparent")
				}
				b, _ := json.Marshal(tc)
				return text(string(b)), nil, nil
			})
	}
	if o.Whoami {
		type whoIn struct {
			Env    string `json:"env,omitempty" jsonschema:"an environment variable to answer with"`
			Header string `json:"header,omitempty" jsonschema:"a request header to answer with"`
		}
		mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Answers with an environment variable or request header, and the process id.", Annotations: ro},
			func(_ context.Context, req *mcp.CallToolRequest, in whoIn) (*mcp.CallToolResult, any, error) {
				w := Whoami{PID: os.Getpid()}
				if in.Env != "" {
					w.Env = WhoamiSum(os.Getenv(in.Env))
				}
				if in.Header != "" && req.Extra != nil && req.Extra.Header != nil {
					w.Header = WhoamiSum(req.Extra.Header.Get(in.Header))
				}
				b, _ := json.Marshal(w)
				return text(string(b)), nil, nil
			})
	}

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

	// append is the judge of repeated side effects: each call appends its
	// line to the file at once, then sleeps ms (a window in which to kill
	// whoever called it). It declares nothing, so it is not idempotent.
	type appendIn struct {
		Path string `json:"path" jsonschema:"file to append to"`
		Line string `json:"line" jsonschema:"line to append"`
		MS   int    `json:"ms,omitempty" jsonschema:"milliseconds to sleep after appending"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "append", Description: "Appends a line to a file, then sleeps ms milliseconds."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in appendIn) (*mcp.CallToolResult, any, error) {
			f, err := os.OpenFile(in.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return nil, nil, err
			}
			_, err = fmt.Fprintln(f, in.Line)
			f.Close()
			if err != nil {
				return nil, nil, err
			}
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
				return text("appended " + in.Line), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})

	mcp.AddTool(s, &mcp.Tool{Name: "hang", Description: "Never answers; records cancellation in the marker file."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			marker("entered hang")
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
			return text(BigText(in.Bytes)), nil, nil
		})

	// sink takes arguments of any shape and answers only their size: a
	// call whose request is large and whose answer is not, for the
	// gateway's memory tests. It declares nothing, so it is not
	// idempotent (the window of re-issued requests keeps its calls).
	s.AddTool(&mcp.Tool{Name: "sink", Description: "Takes any arguments; answers their size in bytes.",
		InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(fmt.Sprintf("%d bytes", len(req.Params.Arguments))), nil
		})

	type bulkIn struct {
		Parts    int  `json:"parts" jsonschema:"number of text parts"`
		Bytes    int  `json:"bytes" jsonschema:"size of each part"`
		Resource bool `json:"resource,omitempty" jsonschema:"make the last part an embedded text resource"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "bulk", Description: "Returns text parts of the requested size with characters JSON must escape (BulkText).", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, in bulkIn) (*mcp.CallToolResult, any, error) {
			res := &mcp.CallToolResult{}
			for i := range in.Parts {
				t := BulkText(i, in.Bytes)
				if in.Resource && i == in.Parts-1 {
					res.Content = append(res.Content, &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
						URI: fmt.Sprintf("mem://part/%d", i), MIMEType: "text/plain", Text: t}})
					continue
				}
				res.Content = append(res.Content, &mcp.TextContent{Text: t})
			}
			return res, nil, nil
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

	if o.Wedge != nil {
		mcp.AddTool(s, &mcp.Tool{Name: "wedge", Description: "Makes the server stop reading its input, and never answers."},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				o.Wedge()
				// Said once deaf, so a test that sees it knows what it
				// sends next goes unread.
				fmt.Fprintln(os.Stderr, "fixture: wedged on purpose")
				select {}
			})
	}

	if o.TaskJobs {
		addTaskJobs(s)
	}

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

	if o.Described != "" {
		mcp.AddTool(s, &mcp.Tool{Name: "described", Description: o.Described, Annotations: ro},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return text("described ran"), nil, nil
			})
	}
	for i := range o.Tools {
		name := fmt.Sprintf("gen_%04d", i)
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: "Generated tool number " + fmt.Sprint(i), Annotations: ro},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return text(name), nil, nil
			})
	}
	type catalogIn struct {
		Target string `json:"target,omitempty" jsonschema:"what to act on: a name, an id or a few words"`
		Limit  int    `json:"limit,omitempty" jsonschema:"the most items to return"`
	}
	for i := range min(o.Catalog, CatalogSize) {
		name, desc := CatalogTool(i)
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: desc, Annotations: ro},
			func(_ context.Context, _ *mcp.CallToolRequest, in catalogIn) (*mcp.CallToolResult, any, error) {
				return text(fmt.Sprintf("%s done for %q", name, in.Target)), nil, nil
			})
	}
	return s
}

// catalogDomain is one service of the generated catalog: its name, the
// phrase describing it, and the objects its tools act on.
type catalogDomain struct {
	name, service string
	objects       []catalogObject
}

// catalogObject is what a catalog tool acts on: its name in tool names,
// the noun and plural descriptions use, and where it lives.
type catalogObject struct {
	name, noun, plural, scope string
}

// catalogVerb is an action every object of the catalog has, with the
// sentence describing it (%[1]s noun, %[2]s plural, %[3]s scope).
type catalogVerb struct {
	name, sentence string
}

var catalogVerbs = []catalogVerb{
	{"get", "Get the %[1]s %[3]s, with every detail."},
	{"list", "List the %[2]s %[3]s, newest first."},
	{"search", "Search the %[2]s %[3]s by keyword and return the best matches."},
	{"create", "Create a new %[1]s %[3]s."},
	{"update", "Update an existing %[1]s %[3]s: change any of its fields."},
	{"delete", "Delete a %[1]s %[3]s; it cannot be undone."},
	{"export", "Export the %[2]s %[3]s as CSV or JSON."},
	{"summarize", "Summarize the %[2]s %[3]s in a few sentences."},
	{"share", "Share a %[1]s %[3]s with other people, by email address."},
	{"watch", "Watch the %[2]s %[3]s and report what changes."},
}

func obj(name, noun, plural, scope string) catalogObject {
	return catalogObject{name: name, noun: noun, plural: plural, scope: scope}
}

var catalogDomains = []catalogDomain{
	{"calendar", "the calendar service", []catalogObject{
		obj("event", "event", "events", "in a calendar"),
		obj("reminder", "reminder", "reminders", "for a calendar event"),
		obj("attendee", "attendee", "attendees", "of a calendar event"),
		obj("availability", "free/busy availability", "free/busy slots", "of people in a calendar"),
		obj("calendar", "calendar", "calendars", "of the user or the team"),
	}},
	{"weather", "the weather service", []catalogObject{
		obj("forecast", "weather forecast", "weather forecasts", "for a city and a date"),
		obj("alert", "severe weather alert", "severe weather alerts", "for a region"),
		obj("observation", "current weather observation", "weather observations", "from the nearest weather station"),
		obj("radar", "precipitation radar image", "radar images", "for an area"),
		obj("air_quality", "air quality index", "air quality readings", "for a city"),
	}},
	{"email", "the mail service", []catalogObject{
		obj("message", "email message", "email messages", "in the mailbox"),
		obj("draft", "email draft", "email drafts", "in the mailbox"),
		obj("thread", "email thread", "email threads", "in the inbox"),
		obj("attachment", "email attachment", "email attachments", "of a message"),
		obj("label", "mailbox label", "mailbox labels", "used to file messages"),
	}},
	{"contacts", "the address book", []catalogObject{
		obj("contact", "contact", "contacts", "in the address book"),
		obj("group", "contact group", "contact groups", "in the address book"),
		obj("address", "postal address", "postal addresses", "of a contact"),
		obj("phone_number", "phone number", "phone numbers", "of a contact"),
		obj("birthday", "birthday", "birthdays", "of your contacts"),
	}},
	{"files", "the file storage service", []catalogObject{
		obj("document", "document", "documents", "in cloud storage"),
		obj("folder", "folder", "folders", "in cloud storage"),
		obj("permission", "sharing permission", "sharing permissions", "of a file"),
		obj("revision", "revision", "revisions", "of a document"),
		obj("comment", "comment", "comments", "on a document"),
	}},
	{"maps", "the maps service", []catalogObject{
		obj("route", "driving or walking route", "routes", "between two places"),
		obj("place", "place of interest", "places of interest", "near a location"),
		obj("geocode", "geocoded coordinate", "geocoded coordinates", "of a street address"),
		obj("traffic", "traffic report", "traffic reports", "on a road"),
		obj("distance", "travel distance", "travel distances", "between cities"),
	}},
	{"news", "the news service", []catalogObject{
		obj("headline", "top headline", "top headlines", "of the day"),
		obj("article", "news article", "news articles", "from the press"),
		obj("source", "news source", "news sources", "you follow"),
		obj("topic", "news topic", "news topics", "that are trending"),
		obj("digest", "daily news digest", "news digests", "for the user"),
	}},
	{"finance", "the finance service", []catalogObject{
		obj("stock_quote", "stock quote", "stock quotes", "for a ticker symbol"),
		obj("exchange_rate", "currency exchange rate", "currency exchange rates", "between two currencies"),
		obj("invoice", "invoice", "invoices", "of a customer"),
		obj("expense", "expense", "expenses", "in an expense report"),
		obj("budget", "budget", "budgets", "of a department"),
	}},
	{"shopping", "the online store", []catalogObject{
		obj("product", "product", "products", "in the store catalog"),
		obj("cart", "shopping cart", "shopping carts", "of a customer"),
		obj("order", "order", "orders", "placed in the store"),
		obj("review", "product review", "product reviews", "written by customers"),
		obj("wishlist", "wishlist", "wishlists", "of a customer"),
	}},
	{"travel", "the travel agency", []catalogObject{
		obj("flight", "flight", "flights", "between two airports"),
		obj("hotel", "hotel room", "hotel rooms", "in a city"),
		obj("booking", "travel booking", "travel bookings", "of a traveller"),
		obj("itinerary", "trip itinerary", "trip itineraries", "of a traveller"),
		obj("visa_requirement", "visa requirement", "visa requirements", "for a destination country"),
	}},
	{"music", "the music streaming service", []catalogObject{
		obj("track", "song", "songs", "in the music library"),
		obj("playlist", "playlist", "playlists", "of the listener"),
		obj("album", "album", "albums", "of an artist"),
		obj("artist", "artist profile", "artist profiles", "in the music library"),
		obj("lyrics", "song lyrics", "song lyrics", "of a track"),
	}},
	{"video", "the video platform", []catalogObject{
		obj("clip", "video clip", "video clips", "on the platform"),
		obj("channel", "video channel", "video channels", "on the platform"),
		obj("transcript", "transcript", "transcripts", "of a video"),
		obj("subtitle", "subtitle track", "subtitle tracks", "of a video"),
		obj("livestream", "live stream", "live streams", "on a channel"),
	}},
	{"notes", "the note-taking app", []catalogObject{
		obj("note", "note", "notes", "in a notebook"),
		obj("notebook", "notebook", "notebooks", "of the user"),
		obj("tag", "tag", "tags", "attached to notes"),
		obj("checklist", "checklist", "checklists", "in a note"),
		obj("sketch", "hand-drawn sketch", "sketches", "in a note"),
	}},
	{"tasks", "the project tracker", []catalogObject{
		obj("task", "task", "tasks", "in a to-do list"),
		obj("project", "project", "projects", "of the team"),
		obj("milestone", "milestone", "milestones", "of a project"),
		obj("assignee", "assignee", "assignees", "of a task"),
		obj("sprint", "sprint", "sprints", "of an agile team"),
	}},
	{"crm", "the customer relationship manager", []catalogObject{
		obj("lead", "sales lead", "sales leads", "in the pipeline"),
		obj("deal", "deal", "deals", "in the sales pipeline"),
		obj("account", "customer account", "customer accounts", "in the CRM"),
		obj("opportunity", "sales opportunity", "sales opportunities", "of an account"),
		obj("campaign", "marketing campaign", "marketing campaigns", "sent to customers"),
	}},
	{"hr", "the human resources system", []catalogObject{
		obj("employee", "employee record", "employee records", "in the company directory"),
		obj("payslip", "payslip", "payslips", "of an employee"),
		obj("leave_request", "leave request", "leave requests", "of an employee"),
		obj("job_posting", "job posting", "job postings", "on the careers page"),
		obj("candidate", "job candidate", "job candidates", "for an open position"),
	}},
	{"analytics", "the analytics platform", []catalogObject{
		obj("report", "analytics report", "analytics reports", "of a website"),
		obj("dashboard", "dashboard", "dashboards", "of the team"),
		obj("metric", "metric", "metrics", "tracked for a product"),
		obj("funnel", "conversion funnel", "conversion funnels", "of a website"),
		obj("cohort", "user cohort", "user cohorts", "of an app"),
	}},
	{"database", "the database service", []catalogObject{
		obj("table", "table", "tables", "in a SQL database"),
		obj("query", "saved SQL query", "saved SQL queries", "of a database"),
		obj("index", "table index", "table indexes", "of a database"),
		obj("backup", "database backup", "database backups", "of a cluster"),
		obj("schema", "database schema", "database schemas", "of a cluster"),
	}},
	{"cloud", "the cloud provider", []catalogObject{
		obj("instance", "virtual machine", "virtual machines", "in a cloud region"),
		obj("bucket", "storage bucket", "storage buckets", "in object storage"),
		obj("function", "serverless function", "serverless functions", "of a project"),
		obj("load_balancer", "load balancer", "load balancers", "in front of a service"),
		obj("dns_record", "DNS record", "DNS records", "of a domain name"),
	}},
	{"code", "the code hosting service", []catalogObject{
		obj("repository", "git repository", "git repositories", "of an organisation"),
		obj("pull_request", "pull request", "pull requests", "of a repository"),
		obj("issue", "issue", "issues", "in a repository's tracker"),
		obj("commit", "commit", "commits", "of a branch"),
		obj("release", "release", "releases", "of a repository"),
	}},
}

// CatalogSize is how many distinct tools the generated catalog has.
var CatalogSize = len(catalogDomains) * 5 * len(catalogVerbs)

// CatalogTool returns the name and description of the i-th tool of the
// generated catalog (0 <= i < CatalogSize): DOMAIN_VERB_OBJECT, such as
// weather_get_forecast, "Get the weather forecast for a city and a date,
// with every detail. Part of the weather service." The order is fixed:
// domain by domain, object by object, verb by verb.
func CatalogTool(i int) (name, description string) {
	nv := len(catalogVerbs)
	d := catalogDomains[i/(5*nv)]
	o := d.objects[i/nv%5]
	v := catalogVerbs[i%nv]
	name = d.name + "_" + v.name + "_" + o.name
	description = fmt.Sprintf(v.sentence, o.noun, o.plural, o.scope) + " Part of " + d.service + "."
	return name, description
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// addTaskJobs adds the tools the conformance suite's tasks-* scenarios
// need, with the behaviour they describe.
func addTaskJobs(s *mcp.Server) {
	type greetIn struct {
		Name string `json:"name" jsonschema:"whom to greet"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "greet", Description: "Answers Hello, NAME!"},
		func(_ context.Context, _ *mcp.CallToolRequest, in greetIn) (*mcp.CallToolResult, any, error) {
			return text("Hello, " + in.Name + "!"), nil, nil
		})
	type computeIn struct {
		Seconds float64 `json:"seconds" jsonschema:"seconds to work"`
		Label   string  `json:"label,omitempty" jsonschema:"a label echoed in the answer"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "slow_compute", Description: "Works for the given seconds, then answers."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in computeIn) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(in.Seconds * float64(time.Second))):
				return text(fmt.Sprintf("computed %s after %gs", in.Label, in.Seconds)), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "failing_job", Description: "Works a second, then reports a tool error (isError)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Second):
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the job failed"}}}, nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	type deleteIn struct {
		Filename string `json:"filename" jsonschema:"the file to delete"`
	}
	// It deletes nothing: a gateway puts its calls to an approval (the
	// question the suite's confirm_delete asks), then it answers.
	mcp.AddTool(s, &mcp.Tool{Name: "confirm_delete", Description: "Answers that the file was deleted (deletes nothing)."},
		func(_ context.Context, _ *mcp.CallToolRequest, in deleteIn) (*mcp.CallToolResult, any, error) {
			return text("deleted " + in.Filename), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "protocol_error_job", Description: "Works a second, then answers with a JSON-RPC error."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Second):
				return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the job broke"}
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
}
