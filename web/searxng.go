package web

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
)

// searxngName names the backend in messages.
const searxngName = "SearXNG"

// SearXNG is a [Searcher] for a SearXNG instance (https://docs.searxng.org)
// and services that speak its JSON API: a GET of
// {base}/search?q=query&format=json, answered by JSON with a "results"
// array of {title, url, content, engine, publishedDate} and optional
// "answers" and "infoboxes". The instance must enable the JSON format
// (search.formats in settings.yml). SearXNG has no result-count parameter:
// the first page is requested and cut to num.
type SearXNG struct{ b *backend }

var _ Searcher = (*SearXNG)(nil)

// NewSearXNG returns a SearXNG backend for the instance at baseURL
// (required: there is no public default). The key is optional; when set,
// it is sent as "Authorization: Bearer key", for instances behind an
// authenticating proxy.
func NewSearXNG(baseURL, key string, opts ...SearchOption) (*SearXNG, error) {
	b, err := newBackend(searxngName, baseURL, key, opts)
	if err != nil {
		return nil, err
	}
	b.keyHint = "it is sent as an Authorization: Bearer header, for instances behind an authenticating proxy"
	return &SearXNG{b: b}, nil
}

// Close releases the backend's idle connections.
func (s *SearXNG) Close() error { return s.b.close() }

// Search implements [Searcher].
func (s *SearXNG) Search(ctx context.Context, query string, num int) ([]Hit, error) {
	query, num, err := s.b.clamp(query, num)
	if err != nil {
		return nil, err
	}
	u := s.b.endpoint()
	// Keep parameters of the configured URL (a token some proxies want).
	q := u.Query()
	q.Set("q", query)
	q.Set("format", "json")
	u.RawQuery = q.Encode()
	req := newRequest(http.MethodGet, u, nil)
	if s.b.key != "" {
		req.Header.Set("Authorization", "Bearer "+s.b.key)
	}
	return s.b.search(ctx, req, num, parseSearXNG)
}

// searxngResult is one ranked result.
type searxngResult struct {
	Title         string     `json:"title"`
	URL           string     `json:"url"`
	Content       string     `json:"content"`
	Engine        string     `json:"engine"`
	PublishedDate nullString `json:"publishedDate"`
}

// searxngAnswer is an answer object; older instances send bare strings.
type searxngAnswer struct {
	Answer string `json:"answer"`
	URL    string `json:"url"`
	Engine string `json:"engine"`
}

// searxngInfobox is a knowledge panel (Wikipedia, Wikidata, ...).
type searxngInfobox struct {
	Infobox string `json:"infobox"`
	ID      string `json:"id"`
	Content string `json:"content"`
	Engine  string `json:"engine"`
	URLs    []struct {
		Title string `json:"title"`
		URL   string `json:"url"`
	} `json:"urls"`
}

// parseSearXNG turns a SearXNG response into hits: answers and infoboxes
// first, then up to num results, positioned in the order given. Entries of
// an unexpected shape are skipped; only a body that is not a JSON object
// is an error.
func parseSearXNG(body []byte, num int) ([]Hit, error) {
	top, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	hits := []Hit{}
	var answers []json.RawMessage
	decodeSection(top, "answers", &answers)
	for _, raw := range answers {
		var a searxngAnswer
		var s string
		switch {
		case json.Unmarshal(raw, &s) == nil:
			a.Answer = s
		case json.Unmarshal(raw, &a) == nil:
		default:
			continue
		}
		if strings.TrimSpace(a.Answer) == "" {
			continue
		}
		hits = append(hits, Hit{Title: "Answer", URL: clean(a.URL), Snippet: clean(a.Answer),
			Source: clean(firstNonEmpty(a.Engine, "answer")), Answer: true})
	}
	var boxes []json.RawMessage
	decodeSection(top, "infoboxes", &boxes)
	for _, raw := range boxes {
		var ib searxngInfobox
		if json.Unmarshal(raw, &ib) != nil || (ib.Infobox == "" && ib.Content == "") {
			continue
		}
		link := ib.ID
		if !strings.HasPrefix(link, "http://") && !strings.HasPrefix(link, "https://") {
			link = ""
			if len(ib.URLs) > 0 {
				link = ib.URLs[0].URL
			}
		}
		hits = append(hits, Hit{Title: clean(firstNonEmpty(ib.Infobox, "Infobox")), URL: clean(link),
			Snippet: clean(cut(ib.Content, 1000)), Source: clean(firstNonEmpty(ib.Engine, "infobox")), Answer: true})
	}

	var results []json.RawMessage
	decodeSection(top, "results", &results)
	n := 0
	for _, raw := range results {
		if n >= num {
			break
		}
		var r searxngResult
		if json.Unmarshal(raw, &r) != nil || (r.Title == "" && r.URL == "") {
			continue
		}
		n++
		hits = append(hits, Hit{Title: clean(r.Title), URL: clean(r.URL), Snippet: clean(r.Content),
			Position: n, Date: clean(string(r.PublishedDate)), Source: clean(r.Engine)})
	}
	return hits, nil
}
