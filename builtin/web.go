package builtin

import (
	"context"

	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/web"
)

// Tool names of the web tools, which package web implements.
const (
	WebFetch  = web.FetchToolName
	WebSearch = web.SearchToolName
)

// WithFetcher sets the fetcher behind web_fetch. Without it the source
// makes one with package web's defaults, and closes it on Close; a fetcher
// given here belongs to the caller.
func WithFetcher(f *web.Fetcher) Option { return func(l *limits) { l.fetcher = f } }

// WithSearcher sets the search backend behind web_search. Without one,
// web_search is not offered: a tool that can only fail would waste the
// model's turns.
func WithSearcher(s web.Searcher) Option { return func(l *limits) { l.searcher = s } }

func (s *Source) webFetchTool() tool.Tool {
	t := web.FetchTool()
	t.Server = ServerName
	return t
}

func (s *Source) webFetch(ctx context.Context, a args) (*tool.Result, error) {
	return s.fetcher.Call(ctx, a.M)
}

func (s *Source) webSearchTool() tool.Tool {
	t := web.SearchTool()
	t.Server = ServerName
	return t
}

func (s *Source) webSearch(ctx context.Context, a args) (*tool.Result, error) {
	return web.SearchCall(ctx, s.limits.searcher, a.M)
}

// offered reports whether the source lists a tool: web_search only with a
// search backend.
func (s *Source) offered(name string) bool {
	return name != WebSearch || s.limits.searcher != nil
}
