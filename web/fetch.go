package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// Defaults of the fetcher's limits.
const (
	// DefaultFetchTimeout bounds one fetch: connecting, every redirect,
	// reading the body and converting it.
	DefaultFetchTimeout = 30 * time.Second
	// DefaultMaxBytes bounds the body read from the server: 10 MiB holds
	// nearly every article and paper while keeping one call's memory small.
	DefaultMaxBytes int64 = 10 << 20
	// DefaultMaxRedirects is how many redirects a fetch follows, as browsers
	// and net/http do.
	DefaultMaxRedirects = 10
	// DefaultMaxPDFPages bounds how many pages of a PDF are turned into
	// text; the rest of a longer document is left out, with a note.
	DefaultMaxPDFPages = 200
	// DefaultUserAgent identifies toolmux. Some sites refuse clients that
	// do not look like browsers; [WithUserAgent] changes it.
	DefaultUserAgent = "Mozilla/5.0 (compatible; toolmux-web/1.0; +https://github.com/toolmux/toolmux)"
)

// accept is the Accept header of a fetch: the formats the fetcher turns into
// text first, anything else last.
const accept = "text/html,application/xhtml+xml,application/pdf;q=0.9,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.5"

// Option configures a [Fetcher]. A non-positive value keeps the default, so
// a zero from an unset configuration field means "default", not "nothing".
type Option func(*Fetcher)

// WithTimeout sets the time limit of one fetch, from the first connection
// to the converted text (default [DefaultFetchTimeout]). The caller's
// context may end it sooner.
func WithTimeout(d time.Duration) Option {
	return func(f *Fetcher) {
		if d > 0 {
			f.timeout = d
		}
	}
}

// WithMaxBytes sets how much of a body is read (default [DefaultMaxBytes]).
// A longer body is cut at the limit and the page says so.
func WithMaxBytes(n int64) Option {
	return func(f *Fetcher) {
		if n > 0 {
			f.maxBytes = n
		}
	}
}

// WithMaxRedirects sets how many redirects a fetch follows (default
// [DefaultMaxRedirects]); one more fails the fetch.
func WithMaxRedirects(n int) Option {
	return func(f *Fetcher) {
		if n > 0 {
			f.maxRedirects = n
		}
	}
}

// WithMaxPDFPages sets how many pages of a PDF are turned into text
// (default [DefaultMaxPDFPages]).
func WithMaxPDFPages(n int) Option {
	return func(f *Fetcher) {
		if n > 0 {
			f.maxPDFPages = n
		}
	}
}

// WithUserAgent sets the User-Agent header of every request (default
// [DefaultUserAgent]). An empty string keeps the default.
func WithUserAgent(ua string) Option {
	return func(f *Fetcher) {
		if ua != "" {
			f.userAgent = ua
		}
	}
}

// WithDenyPrivate makes the fetcher refuse to connect to loopback, private,
// link-local, unspecified, multicast and carrier-grade NAT addresses (cloud
// metadata services live there). The check runs when the connection is
// dialled, on the address actually dialled, so it covers redirects and DNS
// answers that change between lookups. Proxies from the environment are not
// used while it is on, since the check would see only the proxy's address.
//
// It is off by default: toolmux runs next to the developer, and fetching a
// local development server (http://localhost:3000) is a common, legitimate
// use. Turn it on when the model's choice of URLs is not trusted with the
// network the host can reach.
func WithDenyPrivate(deny bool) Option {
	return func(f *Fetcher) { f.denyPrivate = deny }
}

// WithPDFIsolation says whether PDF text is extracted in a child process
// (the default) or in this one. The PDF library can crash the whole process
// on crafted files in ways recover() cannot catch (see pdfworker.go);
// turning isolation off saves a process start per PDF (a few milliseconds)
// and suits only trusted documents.
func WithPDFIsolation(on bool) Option {
	return func(f *Fetcher) { f.pdfIsolation = on }
}

// WithPDFMemory sets the memory limit of the PDF worker process, in bytes
// (default [DefaultPDFMemory]).
func WithPDFMemory(n int64) Option {
	return func(f *Fetcher) {
		if n > 0 {
			f.pdfMemory = n
		}
	}
}

// WithExtractor replaces the main-content extraction applied to HTML pages
// (default [Readability]). A nil extractor converts the whole page.
func WithExtractor(e Extractor) Option {
	return func(f *Fetcher) {
		f.extractor = e
		f.extractorSet = true
	}
}

// Fetcher fetches web pages and turns them into text. It is safe for
// concurrent use; [Fetcher.Close] releases its idle connections.
type Fetcher struct {
	timeout      time.Duration
	maxBytes     int64
	maxRedirects int
	maxPDFPages  int
	pdfIsolation bool
	pdfMemory    int64
	userAgent    string
	denyPrivate  bool
	extractor    Extractor
	extractorSet bool

	transport *http.Transport
}

// NewFetcher returns a fetcher with the given options.
func NewFetcher(opts ...Option) *Fetcher {
	f := &Fetcher{
		timeout:      DefaultFetchTimeout,
		maxBytes:     DefaultMaxBytes,
		maxRedirects: DefaultMaxRedirects,
		maxPDFPages:  DefaultMaxPDFPages,
		pdfIsolation: true,
		pdfMemory:    DefaultPDFMemory,
		userAgent:    DefaultUserAgent,
	}
	for _, o := range opts {
		if o != nil {
			o(f)
		}
	}
	if !f.extractorSet {
		f.extractor = Readability()
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if f.denyPrivate {
		dialer.Control = denyPrivateControl
	}
	// A transport of its own, so that Close releases exactly this
	// fetcher's connections and the deny-private dialer applies to them all.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = dialer.DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.MaxIdleConnsPerHost = 4
	if f.denyPrivate {
		t.Proxy = nil
	}
	f.transport = t
	return f
}

// Close closes the fetcher's idle connections. The fetcher stays usable.
func (f *Fetcher) Close() error {
	f.transport.CloseIdleConnections()
	return nil
}

// PageKind says how a page's body was handled.
type PageKind string

// The kinds of pages.
const (
	// PageHTML: an HTML page, converted to Markdown.
	PageHTML PageKind = "html"
	// PagePDF: a PDF document, converted to text.
	PagePDF PageKind = "pdf"
	// PageText: plain text, JSON, XML and other text formats, returned as
	// they are (decoded to UTF-8).
	PageText PageKind = "text"
	// PageBinary: anything else (images, archives, executables); only
	// described, the body is not returned.
	PageBinary PageKind = "binary"
)

// Page is a fetched page.
type Page struct {
	// URL is the URL asked for; FinalURL is where the redirects, if any, led.
	URL      string `json:"url"`
	FinalURL string `json:"final_url"`
	// Status is the HTTP status code of the final response.
	Status int `json:"status"`
	// ContentType is the media type of the body, without parameters: the
	// server's, or the sniffed one when the server sent none or a generic one.
	ContentType string `json:"content_type"`
	// Kind says how the body was handled.
	Kind PageKind `json:"kind"`
	// Title is the page's or document's title, when it has one.
	Title string `json:"title,omitempty"`
	// Content is the Markdown of an HTML page, the text of a PDF or text
	// body, and empty for a binary body.
	Content string `json:"content"`
	// Size is the number of body bytes read.
	Size int64 `json:"size"`
	// Truncated reports that the body was longer than the size limit and
	// only its first Size bytes were read.
	Truncated bool `json:"truncated"`
	// Notes are remarks for the reader: PDF pages left out, pages whose
	// text could not be extracted, and the like.
	Notes []string `json:"notes,omitempty"`
}

// Fetch GETs rawURL and converts the body by its content type (see the
// package documentation and docs/web.md). Failures are *tool.Error values:
// invalid_tool_params for a URL that is not http or https, tool_error for
// HTTP statuses of 400 and above, network failures and bodies that cannot
// be converted, timeout when the fetch's time limit passes, and
// policy_violation for addresses refused by [WithDenyPrivate]. When ctx
// itself ends, Fetch returns ctx.Err().
func (f *Fetcher) Fetch(ctx context.Context, rawURL string) (*Page, error) {
	u, err := parseFetchURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fctx, cancel := context.WithTimeoutCause(ctx, f.timeout, errFetchTimeout)
	defer cancel()

	req, err := http.NewRequestWithContext(fctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, &tool.Error{Kind: tool.KindInvalidParams, Message: fmt.Sprintf("argument \"url\": %q is not a valid URL: %v", rawURL, err), Err: err}
	}
	req.Header.Set("User-Agent", f.userAgent)
	req.Header.Set("Accept", accept)
	// A cookie jar per fetch: some sites set a cookie and redirect back to
	// the same URL, which loops without one, and a jar per fetch keeps one
	// call's cookies from reaching another.
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Transport: f.transport, CheckRedirect: f.checkRedirect, Jar: jar}

	resp, err := client.Do(req)
	if err != nil {
		return nil, f.requestError(ctx, fctx, rawURL, err)
	}
	defer resp.Body.Close()
	final := resp.Request.URL

	if resp.StatusCode >= 400 {
		return nil, statusError(resp, final.String())
	}

	body, truncated, err := readLimited(resp.Body, f.maxBytes)
	if err != nil {
		return nil, f.requestError(ctx, fctx, rawURL, err)
	}
	page := &Page{
		URL:       strings.TrimSpace(rawURL),
		FinalURL:  final.String(),
		Status:    resp.StatusCode,
		Size:      int64(len(body)),
		Truncated: truncated,
	}
	header := resp.Header.Get("Content-Type")
	mediaType, params := mediaTypeOf(header, body)
	page.ContentType = mediaType
	page.Kind = kindOf(mediaType)
	if page.Kind == PageText && looksBinary(body, params["charset"]) {
		// A server that labels everything text/plain; say what it is.
		page.ContentType, _ = mediaTypeOf("", body)
		page.Kind = PageBinary
		if page.ContentType == "text/plain" {
			page.ContentType = "application/octet-stream"
		}
	}

	switch page.Kind {
	case PageHTML:
		title, md, err := f.htmlToMarkdown(fctx, body, params["charset"], final)
		var unparsable *unparsableHTMLError
		switch {
		case errors.As(err, &unparsable):
			page.Content = unparsable.text
			page.Notes = append(page.Notes, fmt.Sprintf("The page's HTML could not be parsed (%v); only its text is shown, without structure or links.", unparsable.err))
		case err != nil:
			return nil, f.convertError(ctx, fctx, page, err)
		default:
			page.Title, page.Content = title, md
		}
	case PagePDF:
		if truncated {
			return nil, &tool.Error{Kind: tool.KindToolError,
				Message: fmt.Sprintf("the PDF at %s is larger than the size limit of %s; text cannot be extracted from part of a PDF", page.FinalURL, byteSize(f.maxBytes))}
		}
		doc, err := f.pdfExtract(fctx, body)
		if err != nil {
			return nil, f.convertError(ctx, fctx, page, err)
		}
		page.Title, page.Content, page.Notes = doc.title, doc.text, doc.notes
	case PageText:
		page.Content = decodeText(body, params["charset"])
	case PageBinary:
		// Nothing to convert: the description is built from the fields.
	}
	if err := fctx.Err(); err != nil {
		return nil, f.requestError(ctx, fctx, rawURL, err)
	}
	return page, nil
}

// errFetchTimeout is the cause of the fetch context when its own time limit
// passes, telling it apart from the caller's deadline.
var errFetchTimeout = errors.New("fetch time limit reached")

// tooManyRedirectsError ends a chain of redirects longer than the limit.
type tooManyRedirectsError struct{ max int }

func (e *tooManyRedirectsError) Error() string {
	return fmt.Sprintf("stopped after %d redirects", e.max)
}

// checkRedirect bounds redirect chains (a loop ends here too) and refuses
// redirects to schemes other than http and https.
func (f *Fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > f.maxRedirects {
		return &tooManyRedirectsError{max: f.maxRedirects}
	}
	if s := req.URL.Scheme; s != "http" && s != "https" {
		return fmt.Errorf("redirected to %s, whose scheme %q is not http or https", req.URL.Redacted(), s)
	}
	return nil
}

// parseFetchURL accepts absolute http and https URLs only.
func parseFetchURL(rawURL string) (*url.URL, error) {
	s := strings.TrimSpace(rawURL)
	if s == "" {
		return nil, &tool.Error{Kind: tool.KindInvalidParams, Message: "argument \"url\" must not be empty"}
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("argument \"url\": %q is not a valid URL: %v", rawURL, err), Err: err}
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return nil, &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("argument \"url\": %q has no scheme; give an absolute http:// or https:// URL", rawURL)}
	default:
		return nil, &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("argument \"url\": scheme %q is not supported; only http and https URLs can be fetched", u.Scheme)}
	}
	if u.Host == "" {
		return nil, &tool.Error{Kind: tool.KindInvalidParams,
			Message: fmt.Sprintf("argument \"url\": %q has no host", rawURL)}
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// requestError classifies a failure of the request or of reading the body.
func (f *Fetcher) requestError(ctx, fctx context.Context, rawURL string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if fctx.Err() != nil && errors.Is(context.Cause(fctx), errFetchTimeout) {
		return &tool.Error{Kind: tool.KindTimeout,
			Message: fmt.Sprintf("fetching %s took longer than the time limit of %s", rawURL, f.timeout),
			Err:     context.DeadlineExceeded}
	}
	var denied *deniedAddressError
	if errors.As(err, &denied) {
		return &tool.Error{Kind: tool.KindPolicyViolation,
			Message: fmt.Sprintf("fetching %s was refused: %v", rawURL, denied), Err: err}
	}
	var tooMany *tooManyRedirectsError
	if errors.As(err, &tooMany) {
		return &tool.Error{Kind: tool.KindToolError,
			Message: fmt.Sprintf("fetching %s: too many redirects (more than %d); the site may redirect in a loop", rawURL, tooMany.max), Err: err}
	}
	return &tool.Error{Kind: tool.KindToolError,
		Message: fmt.Sprintf("fetching %s failed: %s", rawURL, causeText(err)), Err: err}
}

// convertError classifies a failure to convert a body: a timeout when the
// time limit passed during the conversion, else a tool_error.
func (f *Fetcher) convertError(ctx, fctx context.Context, p *Page, err error) error {
	if ctx.Err() != nil || fctx.Err() != nil {
		return f.requestError(ctx, fctx, p.URL, err)
	}
	return &tool.Error{Kind: tool.KindToolError,
		Message: fmt.Sprintf("could not read the %s at %s: %v", p.ContentType, p.FinalURL, err), Err: err}
}

// causeText is the cause of a network error without net/http's repetition
// of the method and URL, which the message already names.
func causeText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err.Error()
	}
	return err.Error()
}

// excerptLen bounds the body excerpt quoted in errors: enough for a server's
// error message, too little to flood a model's context.
const excerptLen = 300

// statusError reports an HTTP error status with a short excerpt of the body.
func statusError(resp *http.Response, finalURL string) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
	e := &tool.Error{Kind: tool.KindToolError,
		Message: fmt.Sprintf("HTTP %s from %s", statusText(resp), finalURL)}
	mt, _ := mediaTypeOf(resp.Header.Get("Content-Type"), data)
	if ex := excerpt(data, kindOf(mt) == PageHTML); ex != "" {
		e.Detail = "response body: " + ex
	}
	return e
}

// statusText is "404 Not Found", or just the code for unknown codes.
func statusText(resp *http.Response) string {
	if t := http.StatusText(resp.StatusCode); t != "" {
		return fmt.Sprintf("%d %s", resp.StatusCode, t)
	}
	return fmt.Sprint(resp.StatusCode)
}

// readLimited reads up to limit bytes and reports whether there was more.
func readLimited(r io.Reader, limit int64) ([]byte, bool, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > limit {
		return data[:limit], true, nil
	}
	return data, false, nil
}

// mediaTypeOf returns the lower-case media type of a body and the header's
// parameters. A missing, unparsable or generic (application/octet-stream)
// Content-Type is replaced by the sniffed one: servers often send PDFs and
// pages that way. The sniffer's charset is not taken: it guesses UTF-8 for
// any text, which would override a page's <meta charset>.
func mediaTypeOf(header string, body []byte) (string, map[string]string) {
	mt, params, err := mime.ParseMediaType(header)
	if err != nil || mt == "" || mt == "application/octet-stream" || mt == "binary/octet-stream" {
		sniffed, _, _ := mime.ParseMediaType(http.DetectContentType(body))
		if sniffed != "" && (mt == "" || sniffed != "application/octet-stream") {
			mt = sniffed
		}
	}
	if params == nil {
		params = map[string]string{}
	}
	return strings.ToLower(mt), params
}

// looksBinary reports whether a body labelled as text is binary after all:
// a NUL byte early on, which text has only in UTF-16 and UTF-32, which
// announce themselves with a byte-order mark or a charset.
func looksBinary(body []byte, label string) bool {
	if strings.HasPrefix(strings.ToLower(label), "utf-16") || strings.HasPrefix(strings.ToLower(label), "utf-32") ||
		bytes.HasPrefix(body, []byte{0xFE, 0xFF}) || bytes.HasPrefix(body, []byte{0xFF, 0xFE}) {
		return false
	}
	return bytes.IndexByte(body[:min(len(body), 8<<10)], 0) >= 0
}

// kindOf decides how a media type is handled.
func kindOf(mt string) PageKind {
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return PageHTML
	case mt == "application/pdf" || mt == "application/x-pdf":
		return PagePDF
	case strings.HasPrefix(mt, "text/"),
		mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/xml", strings.HasSuffix(mt, "+xml"),
		mt == "application/javascript", mt == "application/ecmascript",
		mt == "application/x-ndjson", mt == "application/ndjson",
		mt == "application/yaml", mt == "application/x-yaml",
		mt == "application/toml", mt == "application/x-sh",
		mt == "application/sql", mt == "application/graphql":
		return PageText
	}
	return PageBinary
}

// byteSize formats a byte count: in MiB or KiB when it is a whole number of
// them, which the defaults are, else in bytes.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
