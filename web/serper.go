package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/toolmux/toolmux/tool"
)

// Serper is a [Searcher] for Serper's Google search API
// (https://serper.dev) and services that speak the same protocol: a POST to
// {base}/search with the JSON body {"q": query, "num": num} and the key in
// the X-API-KEY header, answered by JSON with an "organic" array of
// {title, link, snippet, position, date} and optional "answerBox" and
// "knowledgeGraph" objects.
type Serper struct{ b *backend }

var _ Searcher = (*Serper)(nil)

// NewSerper returns a Serper backend. An empty baseURL means
// [DefaultSerperURL]. The key may be empty for compatible services that
// need none; Serper itself then answers 403, reported as a missing key.
func NewSerper(baseURL, key string, opts ...SearchOption) (*Serper, error) {
	if strings.TrimSpace(baseURL) == "" {
		baseURL = DefaultSerperURL
	}
	b, err := newBackend("Serper", baseURL, key, opts)
	if err != nil {
		return nil, err
	}
	b.keyHint = "Serper reads it from the X-API-KEY header; get one at https://serper.dev"
	return &Serper{b: b}, nil
}

// Close releases the backend's idle connections.
func (s *Serper) Close() error { return s.b.close() }

// Search implements [Searcher].
func (s *Serper) Search(ctx context.Context, query string, num int) ([]Hit, error) {
	query, num, err := s.b.clamp(query, num)
	if err != nil {
		return nil, err
	}
	payload, _ := json.Marshal(map[string]any{"q": query, "num": num})
	req := newRequest(http.MethodPost, s.b.endpoint(), bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/json")
	if s.b.key != "" {
		req.Header.Set("X-API-KEY", s.b.key)
	}
	return s.b.search(ctx, req, num, parseSerper)
}

// serperOrganic is one ranked result.
type serperOrganic struct {
	Title    string  `json:"title"`
	Link     string  `json:"link"`
	Snippet  string  `json:"snippet"`
	Position jsonInt `json:"position"`
	Date     string  `json:"date"`
	Source   string  `json:"source"`
}

// serperAnswerBox is Google's featured snippet or direct answer.
type serperAnswerBox struct {
	Title   string `json:"title"`
	Answer  string `json:"answer"`
	Snippet string `json:"snippet"`
	Link    string `json:"link"`
	Date    string `json:"date"`
}

// serperKnowledgeGraph is Google's knowledge panel.
type serperKnowledgeGraph struct {
	Title       string            `json:"title"`
	Type        string            `json:"type"`
	Description string            `json:"description"`
	Link        string            `json:"descriptionLink"`
	Website     string            `json:"website"`
	Attributes  map[string]string `json:"attributes"`
}

// parseSerper turns a Serper response into hits: the answer box and the
// knowledge graph first, as answers, then up to num organic results.
// Sections and results of an unexpected shape are skipped rather than
// failing the search; only a body that is not a JSON object is an error.
func parseSerper(body []byte, num int) ([]Hit, error) {
	top, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	hits := []Hit{}
	var ab serperAnswerBox
	if decodeSection(top, "answerBox", &ab) {
		text := firstNonEmpty(ab.Answer, ab.Snippet)
		if text != "" || ab.Title != "" {
			hits = append(hits, Hit{Title: clean(firstNonEmpty(ab.Title, "Answer")), URL: clean(ab.Link),
				Snippet: clean(text), Date: clean(ab.Date), Source: "answer box", Answer: true})
		}
	}
	var kg serperKnowledgeGraph
	if decodeSection(top, "knowledgeGraph", &kg) && (kg.Title != "" || kg.Description != "") {
		text := kg.Description
		if kg.Type != "" {
			text = strings.TrimSpace(kg.Type + ". " + text)
		}
		text = appendAttributes(text, kg.Attributes)
		hits = append(hits, Hit{Title: clean(firstNonEmpty(kg.Title, "Knowledge graph")),
			URL: clean(firstNonEmpty(kg.Website, kg.Link)), Snippet: clean(text), Source: "knowledge graph", Answer: true})
	}

	var organic []json.RawMessage
	decodeSection(top, "organic", &organic)
	if organic == nil && len(hits) == 0 {
		// Compatible services report some failures as a 200 with a message.
		var msg string
		if decodeSection(top, "message", &msg) && msg != "" {
			return nil, &tool.Error{Kind: tool.KindToolError, Message: "the search service answered: " + cut(clean(msg), excerptLen)}
		}
	}
	n := 0
	for _, raw := range organic {
		if n >= num {
			break
		}
		var o serperOrganic
		if json.Unmarshal(raw, &o) != nil || (o.Title == "" && o.Link == "") {
			continue
		}
		n++
		pos := int(o.Position)
		if pos <= 0 {
			pos = n
		}
		hits = append(hits, Hit{Title: clean(o.Title), URL: clean(o.Link), Snippet: clean(o.Snippet),
			Position: pos, Date: clean(o.Date), Source: clean(o.Source)})
	}
	return hits, nil
}

// appendAttributes adds a knowledge graph's attributes ("Born: 1879")
// to its description, in a stable order.
func appendAttributes(text string, attrs map[string]string) string {
	if len(attrs) == 0 {
		return text
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %s", k, attrs[k]))
	}
	if text != "" {
		text += " "
	}
	return text + strings.Join(parts, "; ")
}
