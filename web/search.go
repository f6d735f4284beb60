package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// Defaults of the search backends.
const (
	// DefaultNumResults is how many results a search returns when the
	// caller does not say.
	DefaultNumResults = 10
	// DefaultMaxResults caps the results of one search: more rarely helps
	// a model and costs context (and, with Serper, credits).
	DefaultMaxResults = 20
	// DefaultSearchTimeout bounds one search request.
	DefaultSearchTimeout = 20 * time.Second
	// DefaultSerperURL is the base URL of Serper's Google search API.
	DefaultSerperURL = "https://google.serper.dev"
)

// maxSearchResponse bounds the response body read from a search backend;
// a page of results is a few dozen KiB.
const maxSearchResponse int64 = 4 << 20

// Searcher is a web search backend.
type Searcher interface {
	// Search returns up to num results for query, best first. A num of 0
	// or less means [DefaultNumResults]; a larger num than the backend's
	// maximum is lowered to it. No results is an empty list, not an error.
	// Failures are *tool.Error values (see docs/web.md); when ctx ends,
	// Search returns ctx.Err().
	Search(ctx context.Context, query string, num int) ([]Hit, error)
}

// Hit is one search result.
//
// Direct answers (Serper's answer box and knowledge graph, SearXNG's
// answers and infoboxes) are hits too, with Answer set and Position 0; they
// come before the ranked results and do not count against num.
type Hit struct {
	// Title is the result's title.
	Title string `json:"title"`
	// URL is where the result points; answers may have none.
	URL string `json:"url,omitempty"`
	// Snippet is the text the search engine shows under the title, or the
	// answer's text.
	Snippet string `json:"snippet,omitempty"`
	// Position is the 1-based rank among the ranked results, 0 for answers.
	Position int `json:"position"`
	// Date is the publication date the provider reports, as it reports it.
	Date string `json:"date,omitempty"`
	// Source names where the result came from, when the provider says:
	// the engine for SearXNG, "answer box" or "knowledge graph" for Serper.
	Source string `json:"source,omitempty"`
	// Answer marks a direct answer rather than a ranked result.
	Answer bool `json:"answer,omitempty"`
}

// SearchOption configures a search backend. A non-positive value keeps the
// default.
type SearchOption func(*searchConfig)

// searchConfig is what the SearchOptions set.
type searchConfig struct {
	maxResults int
	timeout    time.Duration
	userAgent  string
	client     *http.Client
}

// WithMaxResults sets the most results one search returns (default
// [DefaultMaxResults]).
func WithMaxResults(n int) SearchOption {
	return func(c *searchConfig) {
		if n > 0 {
			c.maxResults = n
		}
	}
}

// WithSearchTimeout sets the time limit of one search request (default
// [DefaultSearchTimeout]).
func WithSearchTimeout(d time.Duration) SearchOption {
	return func(c *searchConfig) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithSearchUserAgent sets the User-Agent header of search requests
// (default [DefaultUserAgent]).
func WithSearchUserAgent(ua string) SearchOption {
	return func(c *searchConfig) {
		if ua != "" {
			c.userAgent = ua
		}
	}
}

// WithHTTPClient makes the backend send its requests with c instead of a
// client of its own; Close then leaves c's connections alone.
func WithHTTPClient(c *http.Client) SearchOption {
	return func(sc *searchConfig) {
		if c != nil {
			sc.client = c
		}
	}
}

// NewSearcher returns the backend named by provider, "serper" or
// "searxng" (case-insensitive), for configuration code that reads the
// provider as a string. The result also implements io.Closer.
func NewSearcher(provider, baseURL, key string, opts ...SearchOption) (Searcher, error) {
	switch strings.ToLower(strings.TrimSpace(provider)) {
	case "serper", "google":
		s, err := NewSerper(baseURL, key, opts...)
		if err != nil {
			return nil, err // not a nil *Serper in a non-nil interface
		}
		return s, nil
	case "searxng", "searx":
		s, err := NewSearXNG(baseURL, key, opts...)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("web: unknown search provider %q; the providers are serper and searxng", provider)
}

// backend is what the two search backends share: configuration, the HTTP
// client and the mapping of HTTP failures to errors.
type backend struct {
	name    string // "Serper" or "SearXNG", for messages
	base    *url.URL
	key     string
	cfg     searchConfig
	client  *http.Client
	ownsTr  *http.Transport // closed by Close; nil with WithHTTPClient
	keyHint string          // how the key is configured, for 401/403 messages
}

// newBackend checks the base URL and applies the options. Without
// WithHTTPClient the backend gets a transport of its own, so that Close
// releases exactly its connections.
func newBackend(name, rawBase, key string, opts []SearchOption) (*backend, error) {
	rawBase = strings.TrimSpace(rawBase)
	u, err := url.Parse(rawBase)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("web: %s base URL %q is not an absolute http or https URL", name, rawBase)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	b := &backend{name: name, base: u, key: strings.TrimSpace(key), cfg: searchConfig{
		maxResults: DefaultMaxResults,
		timeout:    DefaultSearchTimeout,
		userAgent:  DefaultUserAgent,
	}}
	for _, o := range opts {
		if o != nil {
			o(&b.cfg)
		}
	}
	if b.cfg.client != nil {
		b.client = b.cfg.client
	} else {
		b.ownsTr = http.DefaultTransport.(*http.Transport).Clone()
		b.client = &http.Client{Transport: b.ownsTr}
	}
	return b, nil
}

// close releases the backend's idle connections.
func (b *backend) close() error {
	if b.ownsTr != nil {
		b.ownsTr.CloseIdleConnections()
	}
	return nil
}

// display returns the base URL without user information or query, which
// may hold credentials.
func (b *backend) display() string {
	return b.base.Scheme + "://" + b.base.Host + b.base.Path
}

// endpoint returns the base URL with "/search" appended to its path.
func (b *backend) endpoint() *url.URL {
	u := *b.base
	u.Path += "/search"
	return &u
}

// clamp checks the query and applies the default and maximum to num.
func (b *backend) clamp(query string, num int) (string, int, error) {
	query = strings.TrimSpace(query)
	if query == "" {
		return "", 0, &tool.Error{Kind: tool.KindInvalidParams, Message: "argument \"query\" must not be empty"}
	}
	if num <= 0 {
		num = DefaultNumResults
	}
	return query, min(num, b.cfg.maxResults), nil
}

// errSearchTimeout is the cause of a search request's context when its own
// time limit passes, telling it apart from the caller's deadline.
var errSearchTimeout = errors.New("search time limit reached")

// do sends a request and returns the body of a successful response, or an
// error saying, for the model and the operator, what to do about it.
func (b *backend) do(ctx context.Context, req *http.Request) ([]byte, error) {
	sctx, cancel := context.WithTimeoutCause(ctx, b.cfg.timeout, errSearchTimeout)
	defer cancel()
	req = req.WithContext(sctx)
	req.Header.Set("User-Agent", b.cfg.userAgent)
	req.Header.Set("Accept", "application/json")

	resp, err := b.client.Do(req)
	if err != nil {
		return nil, b.requestError(ctx, sctx, err)
	}
	defer resp.Body.Close()
	body, truncated, err := readLimited(resp.Body, maxSearchResponse)
	if err != nil {
		return nil, b.requestError(ctx, sctx, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, b.authError(resp, body)
	case resp.StatusCode == http.StatusTooManyRequests:
		msg := fmt.Sprintf("%s search is rate limited (HTTP 429)", b.name)
		switch ra := strings.TrimSpace(resp.Header.Get("Retry-After")); {
		case ra == "":
			msg += "; wait before searching again"
		case isDigits(ra):
			msg += "; retry after " + ra + " seconds"
		default:
			msg += "; retry after " + cut(ra, 40)
		}
		return nil, &tool.Error{Kind: tool.KindToolError, Message: msg, Detail: b.bodyDetail(body)}
	case resp.StatusCode >= 400:
		return nil, &tool.Error{Kind: tool.KindToolError,
			Message: fmt.Sprintf("%s search failed: HTTP %s", b.name, statusText(resp)),
			Detail:  b.bodyDetail(body)}
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return nil, &tool.Error{Kind: tool.KindToolError,
			Message: fmt.Sprintf("%s search returned HTTP %s instead of results", b.name, statusText(resp)),
			Detail:  b.bodyDetail(body)}
	}
	if truncated {
		return nil, &tool.Error{Kind: tool.KindToolError,
			Message: fmt.Sprintf("%s search returned a response larger than %s", b.name, byteSize(maxSearchResponse))}
	}
	return body, nil
}

// authError explains a 401 or 403: the key is missing or wrong. SearXNG
// also answers 403 when its JSON output is not enabled, a frequent setup
// mistake, so the message names that too.
func (b *backend) authError(resp *http.Response, body []byte) error {
	var msg string
	if b.key == "" {
		msg = fmt.Sprintf("%s search refused the request (HTTP %s): no API key is configured; %s", b.name, statusText(resp), b.keyHint)
	} else {
		msg = fmt.Sprintf("%s search refused the request (HTTP %s): check the API key (%s)", b.name, statusText(resp), b.keyHint)
	}
	if b.name == searxngName && resp.StatusCode == http.StatusForbidden {
		msg += `; SearXNG also answers 403 when the JSON format is not enabled: add "json" to search.formats in its settings.yml`
	}
	return &tool.Error{Kind: tool.KindToolError, Message: msg, Detail: b.bodyDetail(body)}
}

// bodyDetail quotes the start of an error response.
func (b *backend) bodyDetail(body []byte) string {
	mt, _ := mediaTypeOf("", body)
	if ex := excerpt(body, kindOf(mt) == PageHTML); ex != "" {
		return "response body: " + ex
	}
	return ""
}

// requestError classifies a failure to send the request or read the answer.
func (b *backend) requestError(ctx, sctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if sctx.Err() != nil && errors.Is(context.Cause(sctx), errSearchTimeout) {
		return &tool.Error{Kind: tool.KindTimeout,
			Message: fmt.Sprintf("%s search took longer than the time limit of %s", b.name, b.cfg.timeout),
			Err:     context.DeadlineExceeded}
	}
	return &tool.Error{Kind: tool.KindToolError,
		Message: fmt.Sprintf("%s search at %s could not be reached: %s", b.name, b.display(), causeText(err)), Err: err}
}

// malformed reports a response that is not the JSON the backend should
// send, quoting its start so the operator can see what came instead (an
// HTML login page, a proxy's error, ...).
// search sends req and parses the answer with parse: a failure parse
// reports as a *tool.Error stands, anything else means the answer was not
// what the backend should send.
func (b *backend) search(ctx context.Context, req *http.Request, num int, parse func([]byte, int) ([]Hit, error)) ([]Hit, error) {
	body, err := b.do(ctx, req)
	if err != nil {
		return nil, err
	}
	hits, err := parse(body, num)
	if err != nil {
		if _, typed := errors.AsType[*tool.Error](err); typed {
			return nil, err
		}
		return nil, b.malformed(body, err)
	}
	return hits, nil
}

func (b *backend) malformed(body []byte, err error) error {
	ex := excerpt(bytes.TrimSpace(body), false)
	if ex == "" {
		ex = fmt.Sprintf("(%d bytes, not text)", len(body))
	}
	return &tool.Error{Kind: tool.KindToolError,
		Message: fmt.Sprintf("%s search returned a response that is not the expected JSON (%v): %q", b.name, err, ex),
		Err:     err}
}

// newRequest builds a request to the backend.
func newRequest(method string, u *url.URL, body io.Reader) *http.Request {
	// NewRequest fails only for a bad method or URL, neither possible here.
	req, _ := http.NewRequest(method, u.String(), body)
	return req
}

// isDigits reports whether s is a non-empty run of ASCII digits.
func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}
