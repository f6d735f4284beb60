// Package bm25 ranks short documents — tools, by name, description and
// server — against a free-text query with Okapi BM25, for the agent's tool
// selection over large catalogs and its find_tools meta-tool.
//
// An Index is built once per catalog and is read-only afterwards, so it is
// safe for concurrent searches. Search costs time in proportion to the
// postings of the query's terms, not to the size of the catalog.
package bm25

import (
	"container/heap"
	"math"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Parameters of BM25: k1 saturates term frequency, b normalises by length.
// The usual values; tool descriptions are short, where they work well.
const (
	k1 = 1.2
	b  = 0.75
)

// Field is a part of a document with a weight: a term in a tool's name
// says more about it than one in its description.
type Field struct {
	Text   string
	Weight float64
}

// Index is a BM25 index of documents numbered from 0 in the order given.
type Index struct {
	postings map[string][]posting
	lengths  []float64 // weighted length of each document
	avgLen   float64
	n        int
	// scratch holds per-search score arrays, all zero between searches:
	// a dense array is several times faster than a map, and pooling it
	// keeps concurrent searches from allocating one each time.
	scratch sync.Pool
}

type scratch struct {
	scores  []float64
	touched []int32
}

type posting struct {
	doc int32
	tf  float32 // weighted term frequency
}

// New indexes docs; docs[i] is document i, made of its fields.
func New(docs [][]Field) *Index {
	ix := &Index{postings: map[string][]posting{}, lengths: make([]float64, len(docs)), n: len(docs)}
	total := 0.0
	tf := map[string]float64{}
	for i, fields := range docs {
		clear(tf)
		length := 0.0
		for _, f := range fields {
			w := f.Weight
			if w <= 0 {
				w = 1
			}
			for _, term := range Terms(f.Text) {
				tf[term] += w
				length += w
			}
		}
		for term, f := range tf {
			ix.postings[term] = append(ix.postings[term], posting{doc: int32(i), tf: float32(f)})
		}
		ix.lengths[i] = length
		total += length
	}
	if len(docs) > 0 {
		ix.avgLen = total / float64(len(docs))
	}
	n := len(docs)
	ix.scratch.New = func() any { return &scratch{scores: make([]float64, n)} }
	return ix
}

// Len returns the number of documents.
func (ix *Index) Len() int { return ix.n }

// Hit is a document and its score.
type Hit struct {
	Doc   int
	Score float64
}

// Search returns the k best documents for query, best first, leaving out
// documents that share no term with it. Ties keep the documents' order.
func (ix *Index) Search(query string, k int) []Hit { return ix.SearchFunc(query, k, nil) }

// SearchFunc is Search among the documents keep reports true for (nil:
// every document): the others are scored, as they weigh in the terms'
// rarity, but never returned.
func (ix *Index) SearchFunc(query string, k int, keep func(doc int) bool) []Hit {
	if k <= 0 || ix.n == 0 {
		return nil
	}
	terms := Terms(query)
	if len(terms) == 0 {
		return nil
	}
	sc := ix.scratch.Get().(*scratch)
	defer ix.scratch.Put(sc)
	scores, touched := sc.scores, sc.touched[:0]
	seen := map[string]bool{}
	for _, term := range terms {
		if seen[term] {
			continue // a repeated query word does not count twice
		}
		seen[term] = true
		ps := ix.postings[term]
		if len(ps) == 0 {
			continue
		}
		// The "plus" IDF keeps every weight positive, so a term found in
		// most tools still counts a little rather than against them.
		idf := math.Log(1 + (float64(ix.n)-float64(len(ps))+0.5)/(float64(len(ps))+0.5))
		for _, p := range ps {
			tf := float64(p.tf)
			norm := k1 * (1 - b + b*ix.lengths[p.doc]/ix.avgLen)
			if scores[p.doc] == 0 {
				touched = append(touched, p.doc)
			}
			scores[p.doc] += idf * tf * (k1 + 1) / (tf + norm)
		}
	}
	h := make(hitHeap, 0, min(k, len(touched)))
	for _, doc := range touched {
		hit := Hit{Doc: int(doc), Score: scores[doc]}
		scores[doc] = 0 // leave the scratch clean for the next search
		if keep != nil && !keep(hit.Doc) {
			continue
		}
		if len(h) < k {
			heap.Push(&h, hit)
		} else if better(hit, h[0]) {
			h[0] = hit
			heap.Fix(&h, 0)
		}
	}
	sc.touched = touched
	out := make([]Hit, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&h).(Hit)
	}
	return out
}

// better orders hits: higher score first, then lower document number.
func better(a, c Hit) bool {
	if a.Score != c.Score {
		return a.Score > c.Score
	}
	return a.Doc < c.Doc
}

// hitHeap is a min-heap by better: its root is the worst hit kept.
type hitHeap []Hit

func (h hitHeap) Len() int           { return len(h) }
func (h hitHeap) Less(i, j int) bool { return better(h[j], h[i]) }
func (h hitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hitHeap) Push(x any)        { *h = append(*h, x.(Hit)) }
func (h *hitHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Terms splits text into lower-case terms: runs of letters and digits,
// also split where snake_case, kebab-case, dotted and camelCase names join
// words ("readFile", "read_file" and "read-file" all give "read",
// "file"), so that a model's words find a tool's name; plurals are folded
// (see stem). Very short and very common English words are dropped.
func Terms(text string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() == 0 {
			return
		}
		t := stem(cur.String())
		cur.Reset()
		if !stop[t] && (utf8.RuneCountInString(t) > 1 || unicode.IsDigit([]rune(t)[0])) {
			out = append(out, t)
		}
	}
	var prev rune
	for i, r := range text {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			// A capital after a lower-case letter starts a word
			// (readFile); so does one before a lower-case letter after
			// capitals (HTTPServer → HTTP, Server).
			if unicode.IsUpper(r) && cur.Len() > 0 {
				next, _ := utf8.DecodeRuneInString(text[i+utf8.RuneLen(r):])
				if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && unicode.IsLower(next)) {
					flush()
				}
			}
			cur.WriteRune(unicode.ToLower(r))
		default:
			flush()
		}
		prev = r
	}
	flush()
	return out
}

// stem folds plurals and third persons into the word ("files", "reads",
// "searches", "queries" → "file", "read", "search", "query"): a model asks
// for "a tool that reads files" of a tool that "reads a file". It is crude
// on purpose — the same folding of query and documents is what matters.
func stem(t string) string {
	if len(t) <= 3 {
		return t
	}
	switch {
	case strings.HasSuffix(t, "ies"):
		return t[:len(t)-3] + "y"
	case strings.HasSuffix(t, "sses"), strings.HasSuffix(t, "xes"), strings.HasSuffix(t, "zes"),
		strings.HasSuffix(t, "ches"), strings.HasSuffix(t, "shes"):
		return t[:len(t)-2]
	case strings.HasSuffix(t, "ss"), strings.HasSuffix(t, "us"), strings.HasSuffix(t, "is"):
		return t
	case strings.HasSuffix(t, "s"):
		return t[:len(t)-1]
	}
	return t
}

// stop holds words too common in tool descriptions and queries to tell
// tools apart.
var stop = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "by": true,
	"for": true, "from": true, "in": true, "is": true, "it": true, "of": true, "on": true, "or": true,
	"that": true, "the": true, "this": true, "to": true, "with": true, "tool": true, "tools": true,
}
