package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/toolmux/toolmux/internal/toolargs"
	"github.com/toolmux/toolmux/tool"
)

// Tool names.
const (
	FetchToolName  = "web_fetch"
	SearchToolName = "web_search"
)

// annotations are what both tools declare: they change nothing (so a
// repeat after a transport failure is safe), and they reach the open web.
func annotations(title string) tool.Annotations {
	return tool.Annotations{
		Title:       title,
		ReadOnly:    tool.Bool(true),
		Idempotent:  tool.Bool(true),
		Destructive: tool.Bool(false),
		OpenWorld:   tool.Bool(true),
	}
}

// FetchTool returns the definition of web_fetch. Server is left empty for
// the source that registers it to fill in. Each call returns a fresh value.
func FetchTool() tool.Tool {
	return tool.Tool{
		Name:  FetchToolName,
		Title: "Fetch web page",
		Description: `Fetches a web page by URL (http or https only) and returns its readable content. HTML pages are returned as Markdown reduced to the main content (navigation, sidebars and footers are left out; tables are kept; links are absolute). PDF documents are returned as their text. Plain text, JSON, XML and other text formats are returned as they are. Images, archives and other binary files are only described (type and size).
Redirects are followed and the final URL is reported. Very large pages are cut at a size limit; the result says so. HTTP errors (404, 500, ...) are reported as errors with the status.`,
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"url": map[string]any{
					"type":        "string",
					"description": "The absolute http:// or https:// URL to fetch.",
				},
			},
			"required":             []string{"url"},
			"additionalProperties": false,
		},
		Annotations: annotations("Fetch web page"),
	}
}

// SearchTool returns the definition of web_search. Server is left empty for
// the source that registers it to fill in. Each call returns a fresh value.
func SearchTool() tool.Tool {
	return tool.Tool{
		Name:  SearchToolName,
		Title: "Search the web",
		Description: fmt.Sprintf(`Searches the web and returns the top results, best first: for each, its title, URL, a snippet and, when known, its date. When the search engine has a direct answer (an answer box, a knowledge panel), it comes first. Use web_fetch to read a result in full.
Write the query as you would type it into a search engine. Returns %d results unless num says otherwise; larger values of num are lowered to the backend's maximum (%d by default).`,
			DefaultNumResults, DefaultMaxResults),
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"query": map[string]any{
					"type":        "string",
					"description": "What to search for.",
				},
				"num": map[string]any{
					"type":        "integer",
					"minimum":     1,
					"description": fmt.Sprintf("How many results to return (default %d).", DefaultNumResults),
				},
			},
			"required":             []string{"query"},
			"additionalProperties": false,
		},
		Annotations: annotations("Search the web"),
	}
}

// Call runs web_fetch with a call's arguments: {"url": string}. The result
// holds the page as Markdown text and, as structured content, {url,
// final_url, status, content_type, title, truncated}. Failures are
// *tool.Error values as [Fetcher.Fetch] returns them, with invalid_tool_params
// for missing, mistyped or unknown arguments; when ctx ends, Call returns
// ctx.Err().
func (f *Fetcher) Call(ctx context.Context, arguments map[string]any) (*tool.Result, error) {
	a := toolargs.Args{Tool: FetchToolName, M: arguments}
	if err := a.Check("url"); err != nil {
		return nil, err
	}
	rawURL, err := a.NonBlank("url")
	if err != nil {
		return nil, err
	}
	page, err := f.Fetch(ctx, rawURL)
	if err != nil {
		return nil, named(err, FetchToolName)
	}
	res := tool.TextResult(page.Markdown())
	res.Structured = map[string]any{
		"url":          page.URL,
		"final_url":    page.FinalURL,
		"status":       page.Status,
		"content_type": page.ContentType,
		"title":        page.Title,
		"truncated":    page.Truncated,
	}
	return res, nil
}

// Markdown renders the page for a model: a heading with the title, the
// final URL (and the URL asked for, after redirects), the content, and notes
// on anything left out.
func (p *Page) Markdown() string {
	var b strings.Builder
	if p.Title != "" {
		fmt.Fprintf(&b, "# %s\n\n", p.Title)
	}
	fmt.Fprintf(&b, "URL: %s\n", p.FinalURL)
	if p.FinalURL != p.URL {
		fmt.Fprintf(&b, "Redirected from: %s\n", p.URL)
	}
	switch p.Kind {
	case PageBinary:
		size := byteCount(p.Size)
		if p.Truncated {
			size = "more than " + size
		}
		fmt.Fprintf(&b, "\nThe URL returned %s content of %s, which web_fetch does not show (binary). It returns HTML pages as Markdown, PDF documents as text, and text formats as they are.\n", p.ContentType, size)
		return b.String()
	case PagePDF:
		fmt.Fprintf(&b, "Content-Type: %s\n", p.ContentType)
	case PageText:
		fmt.Fprintf(&b, "Content-Type: %s\n", p.ContentType)
	}
	b.WriteString("\n")
	if strings.TrimSpace(p.Content) == "" {
		b.WriteString("(The page has no text content.)\n")
	} else {
		b.WriteString(p.Content)
		if !strings.HasSuffix(p.Content, "\n") {
			b.WriteString("\n")
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "\n[Note: %s]\n", n)
	}
	if p.Truncated {
		fmt.Fprintf(&b, "\n[Truncated: the page is larger than the size limit; only its first %s were read, so the end is missing.]\n", byteCount(p.Size))
	}
	return b.String()
}

// SearchCall runs web_search with s and a call's arguments: {"query":
// string, "num": integer (optional)}. The result holds the hits as Markdown
// text ("No results" when there are none, which is not an error) and, as
// structured content, {query, results: [hits]}. A nil s is reported as a
// tool_error saying that no search backend is configured.
func SearchCall(ctx context.Context, s Searcher, arguments map[string]any) (*tool.Result, error) {
	a := toolargs.Args{Tool: SearchToolName, M: arguments}
	if err := a.Check("query", "num"); err != nil {
		return nil, err
	}
	query, err := a.NonBlank("query")
	if err != nil {
		return nil, err
	}
	num, _, err := a.Int("num", 1)
	if err != nil {
		return nil, err
	}
	// Values past any maximum are lowered by the backend; keep them in range.
	num = min(num, 1<<30)
	if s == nil {
		return nil, &tool.Error{Kind: tool.KindToolError, Tool: SearchToolName,
			Message: "web_search is not configured: no search backend (Serper or SearXNG URL and key) is set"}
	}
	hits, err := s.Search(ctx, query, num)
	if err != nil {
		return nil, named(err, SearchToolName)
	}
	if hits == nil {
		hits = []Hit{}
	}
	res := tool.TextResult(RenderHits(query, hits))
	res.Structured = map[string]any{"query": query, "results": jsonValue(hits)}
	return res, nil
}

// RenderHits formats search results as Markdown for a model.
func RenderHits(query string, hits []Hit) string {
	var b strings.Builder
	ranked := 0
	for _, h := range hits {
		if !h.Answer {
			ranked++
		}
	}
	if len(hits) == 0 {
		fmt.Fprintf(&b, "No results for %q.\n", query)
		return b.String()
	}
	fmt.Fprintf(&b, "Search results for %q (%s):\n", query, countNoun(ranked, "result", "results"))
	for _, h := range hits {
		b.WriteString("\n")
		if h.Answer {
			fmt.Fprintf(&b, "**%s** (%s)", h.Title, firstNonEmpty(h.Source, "answer"))
			if h.URL != "" {
				fmt.Fprintf(&b, " <%s>", h.URL)
			}
			b.WriteString("\n")
			if h.Snippet != "" {
				fmt.Fprintf(&b, "%s\n", h.Snippet)
			}
			continue
		}
		title := firstNonEmpty(h.Title, h.URL)
		if h.URL != "" {
			fmt.Fprintf(&b, "%d. [%s](%s)\n", h.Position, escapeLinkText(title), h.URL)
		} else {
			fmt.Fprintf(&b, "%d. %s\n", h.Position, title)
		}
		var meta []string
		if h.Date != "" {
			meta = append(meta, h.Date)
		}
		if h.Source != "" {
			meta = append(meta, h.Source)
		}
		if len(meta) > 0 {
			fmt.Fprintf(&b, "   %s\n", strings.Join(meta, " · "))
		}
		if h.Snippet != "" {
			fmt.Fprintf(&b, "   %s\n", h.Snippet)
		}
	}
	return b.String()
}

// escapeLinkText keeps brackets in a title from ending the link text.
func escapeLinkText(s string) string {
	return strings.NewReplacer(`[`, `\[`, `]`, `\]`).Replace(s)
}

// named fills in the tool name of a *tool.Error. Context errors pass
// through unchanged.
func named(err error, name string) error {
	var te *tool.Error
	if errors.As(err, &te) && te.Tool == "" {
		te.Tool = name
	}
	return err
}

// jsonValue converts v to the generic form decoded JSON has (maps, slices,
// float64), which is what consumers of structured content (the pipeline's
// rollback rules, the redactor) walk.
func jsonValue(v any) any {
	data, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	if json.Unmarshal(data, &out) != nil {
		return nil
	}
	return out
}

// byteCount formats a size for people: bytes, KiB or MiB.
func byteCount(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB (%d bytes)", float64(n)/(1<<10), n)
	}
	return countNoun(int(n), "byte", "bytes")
}

// countNoun formats a count with its noun.
func countNoun(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
