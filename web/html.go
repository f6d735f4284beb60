package web

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/base"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/commonmark"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/strikethrough"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/table"
	readability "github.com/go-shiori/go-readability"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Extractor finds the main content of an HTML page: the article without the
// navigation, sidebars, footers and advertisements around it.
//
// It sits behind an interface because the default, go-readability, is
// archived: a successor can replace it without touching the rest.
type Extractor interface {
	// Extract returns the main content of doc, whose relative links are
	// relative to pageURL. It must not modify doc, which is converted whole
	// when extraction finds nothing. A nil Content means nothing was found.
	Extract(doc *html.Node, pageURL *url.URL) (Extracted, error)
}

// Extracted is what an [Extractor] found.
type Extracted struct {
	// Title is the article's title, "" if unknown.
	Title string
	// Content is the element holding the main content, nil if none.
	Content *html.Node
}

// ExtractorFunc adapts a function to the [Extractor] interface.
type ExtractorFunc func(doc *html.Node, pageURL *url.URL) (Extracted, error)

// Extract calls fn.
func (fn ExtractorFunc) Extract(doc *html.Node, pageURL *url.URL) (Extracted, error) {
	return fn(doc, pageURL)
}

// maxReadabilityElements bounds the documents readability scores. Its
// scoring is superlinear in the number of elements; a bigger page is
// converted whole instead, which is fast.
const maxReadabilityElements = 50_000

// Readability returns the default [Extractor]: go-readability, a port of
// Firefox's Reader View (Mozilla's Readability.js).
func Readability() Extractor {
	return ExtractorFunc(func(doc *html.Node, pageURL *url.URL) (Extracted, error) {
		p := readability.NewParser()
		p.MaxElemsToParse = maxReadabilityElements
		// ParseDocument works on a clone, leaving doc intact.
		art, err := p.ParseDocument(doc, pageURL)
		if err != nil {
			return Extracted{}, err
		}
		if art.Node == nil || strings.TrimSpace(art.TextContent) == "" {
			return Extracted{Title: art.Title}, nil
		}
		return Extracted{Title: art.Title, Content: art.Node}, nil
	})
}

// markdownConverter is shared: a Converter is safe for concurrent use
// (html-to-markdown guards it with a mutex and tests that) and building
// one registers every plugin's handlers.
var markdownConverter = sync.OnceValue(func() *converter.Converter {
	return converter.NewConverter(converter.WithPlugins(
		base.NewBasePlugin(),
		commonmark.NewCommonmarkPlugin(),
		strikethrough.NewStrikethroughPlugin(),
		table.NewTablePlugin(
			// Many data tables have no <th>: their first row is the header.
			table.WithHeaderPromotion(true),
			table.WithSkipEmptyRows(true),
			// Padding cells to equal widths costs context and helps no model.
			table.WithCellPaddingBehavior(table.CellPaddingBehaviorMinimal),
		),
	))
})

// htmlToMarkdown converts an HTML body to Markdown: decoded to UTF-8,
// reduced to its main content by the extractor (the whole page when it
// finds nothing), with links made absolute against the page's base URL.
func (f *Fetcher) htmlToMarkdown(ctx context.Context, body []byte, label string, pageURL *url.URL) (title, md string, err error) {
	body = decodeHTML(body, label)
	doc, err := html.Parse(bytes.NewReader(body))
	if err != nil {
		// The parser refuses some hostile markup (elements nested more
		// than 512 deep); its text is still worth returning.
		return "", "", &unparsableHTMLError{err: err, text: strings.Join(strings.Fields(visibleText(body, len(body))), " ")}
	}
	return convertDocument(ctx, doc, pageURL, f.extractor)
}

// unparsableHTMLError is HTML the parser refused, with the page's visible
// text extracted by the tokenizer instead.
type unparsableHTMLError struct {
	err  error
	text string
}

func (e *unparsableHTMLError) Error() string { return "parsing HTML: " + e.err.Error() }
func (e *unparsableHTMLError) Unwrap() error { return e.err }

// convertDocument is htmlToMarkdown after parsing. Both libraries run under
// recover(): they walk untrusted markup, and a bug there must cost one
// call, not the process.
func convertDocument(ctx context.Context, doc *html.Node, pageURL *url.URL, ex Extractor) (title, md string, err error) {
	defer func() {
		if r := recover(); r != nil {
			title, md, err = "", "", fmt.Errorf("converting HTML to Markdown failed (%v)", r)
		}
	}()
	baseURL := documentBase(doc, pageURL)
	title = documentTitle(doc)
	content := doc
	if ex != nil {
		if found, xerr := safeExtract(ex, doc, baseURL); xerr == nil {
			if found.Title != "" {
				title = found.Title
			}
			if found.Content != nil {
				content = found.Content
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return "", "", err
	}
	md, err = toMarkdown(ctx, content, baseURL)
	if err != nil {
		return "", "", err
	}
	if md == "" && content != doc {
		// The extractor picked an element with nothing convertible in it.
		md, err = toMarkdown(ctx, doc, baseURL)
		if err != nil {
			return "", "", err
		}
	}
	return strings.TrimSpace(title), md, nil
}

// safeExtract runs an extractor, turning a panic into an error so that the
// page is converted whole instead.
func safeExtract(ex Extractor, doc *html.Node, pageURL *url.URL) (found Extracted, err error) {
	defer func() {
		if r := recover(); r != nil {
			found, err = Extracted{}, fmt.Errorf("content extraction failed (%v)", r)
		}
	}()
	return ex.Extract(doc, pageURL)
}

// toMarkdown converts one node with links resolved against baseURL.
func toMarkdown(ctx context.Context, n *html.Node, baseURL *url.URL) (string, error) {
	opts := []converter.ConvertOptionFunc{converter.WithContext(ctx)}
	if baseURL != nil {
		opts = append(opts, converter.WithDomain(baseURL.String()))
	}
	out, err := markdownConverter().ConvertNode(n, opts...)
	if err != nil {
		return "", fmt.Errorf("converting HTML to Markdown: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// documentBase returns the URL relative links are relative to: the page's
// URL, or its <base href> resolved against it.
func documentBase(doc *html.Node, pageURL *url.URL) *url.URL {
	b := findElement(doc, atom.Base, func(n *html.Node) bool { return attr(n, "href") != "" })
	if b == nil || pageURL == nil {
		return pageURL
	}
	ref, err := url.Parse(strings.TrimSpace(attr(b, "href")))
	if err != nil {
		return pageURL
	}
	u := pageURL.ResolveReference(ref)
	if u.Scheme != "http" && u.Scheme != "https" {
		return pageURL
	}
	return u
}

// documentTitle returns the text of the document's first <title>.
func documentTitle(doc *html.Node) string {
	t := findElement(doc, atom.Title, nil)
	if t == nil {
		return ""
	}
	var b strings.Builder
	for c := t.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// findElement returns the first element of type a, in document order, that
// ok accepts (any, when ok is nil). It walks with an explicit stack: a
// hostile page may nest elements deeper than recursion should go.
func findElement(root *html.Node, a atom.Atom, ok func(*html.Node) bool) *html.Node {
	stack := []*html.Node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n.Type == html.ElementNode && n.DataAtom == a && (ok == nil || ok(n)) {
			return n
		}
		for c := n.LastChild; c != nil; c = c.PrevSibling {
			stack = append(stack, c)
		}
	}
	return nil
}

// attr returns the value of an element's attribute, "" if absent.
func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}
