package bm25_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/toolmux/toolmux/internal/bm25"
)

func TestTerms(t *testing.T) {
	for in, want := range map[string][]string{
		"read_file":                     {"read", "file"},
		"readFile":                      {"read", "file"},
		"read-file.v2":                  {"read", "file", "v2"},
		"HTTPServer getURL":             {"http", "server", "get", "url"},
		"Search the web for a query":    {"search", "web", "query"},
		"browser_navigate (Playwright)": {"browser", "navigate", "playwright"},
		"x 7 ÄpfelÜber":                 {"7", "äpfel", "über"},
		"":                              nil,
		"  ,;  ":                        nil,
	} {
		if got := bm25.Terms(in); !slices.Equal(got, want) {
			t.Errorf("Terms(%q) = %q, want %q", in, got, want)
		}
	}
}

func tools(specs ...[3]string) [][]bm25.Field {
	var docs [][]bm25.Field
	for _, s := range specs {
		docs = append(docs, []bm25.Field{{Text: s[0], Weight: 3}, {Text: s[1], Weight: 1}, {Text: s[2], Weight: 1}})
	}
	return docs
}

func TestSearchRanks(t *testing.T) {
	ix := bm25.New(tools(
		[3]string{"read_file", "Reads a file of the workspace", "builtin"},
		[3]string{"write_file", "Writes content to a file", "builtin"},
		[3]string{"web_search", "Searches the web and returns results", "builtin"},
		[3]string{"browser_navigate", "Opens a URL in the browser", "playwright"},
		[3]string{"list_directory", "Lists the files of a directory", "builtin"},
	))
	hits := ix.Search("search the web", 3)
	if len(hits) == 0 || hits[0].Doc != 2 {
		t.Fatalf("search the web: %+v", hits)
	}
	// A term in the name outweighs the same term in a description.
	hits = ix.Search("file", 5)
	if len(hits) != 3 || hits[0].Doc > 1 || hits[1].Doc > 1 || hits[2].Doc != 4 {
		t.Fatalf("file: %+v", hits)
	}
	// Server names are searched too.
	if hits := ix.Search("playwright", 2); len(hits) != 1 || hits[0].Doc != 3 {
		t.Fatalf("playwright: %+v", hits)
	}
	// Nothing in common, an empty query, k <= 0: nothing.
	for _, q := range []string{"kubernetes", "", "the of"} {
		if hits := ix.Search(q, 3); len(hits) != 0 {
			t.Errorf("%q: %+v", q, hits)
		}
	}
	if hits := ix.Search("file", 0); hits != nil {
		t.Errorf("k=0: %+v", hits)
	}
	// Repeating a word does not change the ranking.
	a, b := ix.Search("file", 5), ix.Search("file file file", 5)
	if !slices.Equal(a, b) {
		t.Errorf("repeated word: %+v vs %+v", a, b)
	}
}

// Equal scores keep the documents' order, and the k best are the k first
// of the full ranking.
func TestSearchTiesAndTopK(t *testing.T) {
	var specs [][3]string
	for i := range 50 {
		specs = append(specs, [3]string{fmt.Sprintf("tool%d", i), "fetches weather data", "srv"})
	}
	ix := bm25.New(tools(specs...))
	hits := ix.Search("weather", 10)
	for i, h := range hits {
		if h.Doc != i {
			t.Fatalf("tie order: %+v", hits)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	docs := catalog(r, 2000)
	ix = bm25.New(docs)
	all := ix.Search("create issue repository", 2000)
	top := ix.Search("create issue repository", 25)
	if len(top) != 25 || !slices.Equal(top, all[:25]) {
		t.Fatalf("top 25 is not the head of the full ranking")
	}
	for i := 1; i < len(all); i++ {
		if all[i].Score > all[i-1].Score {
			t.Fatalf("not sorted at %d", i)
		}
	}
}

var words = strings.Fields(`read write file directory search web page fetch url browser click type
screenshot issue pull request repository branch commit merge create delete update list get query
database table row column insert select schema calendar event email send message channel slack user
account payment invoice customer order product price stock weather forecast map route image video
audio transcribe translate summarize document pdf spreadsheet chart metric log trace alert deploy
container cluster node pod secret config token cache queue topic stream`)

// catalog makes n tools with names and descriptions from a vocabulary, as
// a large MCP catalog has them.
func catalog(r *rand.Rand, n int) [][]bm25.Field {
	pick := func(k int) string {
		var s []string
		for range k {
			s = append(s, words[r.IntN(len(words))])
		}
		return strings.Join(s, " ")
	}
	docs := make([][]bm25.Field, n)
	for i := range docs {
		name := strings.ReplaceAll(pick(2), " ", "_") + fmt.Sprint(i)
		docs[i] = []bm25.Field{{Text: name, Weight: 3}, {Text: pick(12 + r.IntN(20)), Weight: 1},
			{Text: fmt.Sprintf("server%d", i%40), Weight: 1}}
	}
	return docs
}

// BenchmarkSearch10k: the top 20 of 10 000 tools for a short query
// (BENCHMARKS.md; target under 1 ms).
func BenchmarkSearch10k(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	ix := bm25.New(catalog(r, 10000))
	queries := []string{"create a pull request in the repository", "search the web page", "send slack message to channel",
		"get weather forecast", "query database table rows"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if len(ix.Search(queries[i%len(queries)], 20)) == 0 {
			b.Fatal("no hits")
		}
	}
}

// BenchmarkIndex10k: building the index of 10 000 tools, once per catalog.
func BenchmarkIndex10k(b *testing.B) {
	docs := catalog(rand.New(rand.NewPCG(3, 4)), 10000)
	b.ReportAllocs()
	for b.Loop() {
		bm25.New(docs)
	}
}

func FuzzTerms(f *testing.F) {
	for _, s := range []string{"read_file", "HTTPServer", "ÄpfelÜber 7", "a-b.c_d", "\xff\xfe", "ǅungla"} {
		f.Add(s, "file")
	}
	f.Fuzz(func(t *testing.T, doc, query string) {
		for _, term := range bm25.Terms(doc) {
			if term == "" || term != strings.ToLower(term) {
				t.Fatalf("term %q of %q", term, doc)
			}
			for _, r := range term {
				if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
					t.Fatalf("term %q of %q has %q", term, doc, r)
				}
			}
		}
		ix := bm25.New([][]bm25.Field{{{Text: doc, Weight: 2}}, {{Text: query}}})
		hits := ix.Search(query, 2)
		for _, h := range hits {
			if h.Doc < 0 || h.Doc > 1 || !(h.Score > 0) {
				t.Fatalf("hit %+v", h)
			}
		}
	})
}

// SearchFunc returns the best documents keep allows: the full ranking
// without the others, cut to k.
func TestSearchFuncKeeps(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ix := bm25.New(catalog(r, 500))
	odd := func(doc int) bool { return doc%2 == 1 }
	all := ix.Search("create issue repository", 500)
	want := slices.DeleteFunc(slices.Clone(all), func(h bm25.Hit) bool { return !odd(h.Doc) })[:10]
	got := ix.SearchFunc("create issue repository", 10, odd)
	if !slices.Equal(got, want) {
		t.Fatalf("SearchFunc: %+v\nwant %+v", got, want)
	}
	if none := ix.SearchFunc("create issue repository", 10, func(int) bool { return false }); len(none) != 0 {
		t.Fatalf("nothing kept, got %+v", none)
	}
}
