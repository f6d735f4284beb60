package bound

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStringKeepsHeadAndTailOnCharacterBoundaries(t *testing.T) {
	s := "AB" + strings.Repeat("é€😀", 1000) + "YZ"
	out, cut := String(s, 200)
	if !cut || !utf8.ValidString(out) || !strings.HasPrefix(out, "AB") || !strings.HasSuffix(out, "YZ") ||
		len(out) > 200+len(Marker(len(s))) || !strings.Contains(out, "bytes cut by toolmux") {
		t.Errorf("%d bytes: %q", len(out), out)
	}
	if out, cut := String("short", 200); cut || out != "short" {
		t.Errorf("a short string changed: %q", out)
	}
}

// Water-filling: the short strings are kept whole, the long ones share
// what is left, and the cut document fits.
func TestCapSharesTheBudget(t *testing.T) {
	doc := map[string]any{
		"small": "keep me",
		"big1":  strings.Repeat("a", 100000),
		"big2":  strings.Repeat("b", 50000),
		"list":  []any{"x", strings.Repeat("c", 70000), json.Number("12")},
	}
	var f Fitter
	f.Value(doc)
	c := f.Cap(20000)
	if c < minKeep || c > 20000/3 {
		t.Fatalf("cap %d", c)
	}
	budget := 20000
	out, cut := Cut(doc, c, 0, &budget)
	b, _ := json.Marshal(out)
	if !cut || len(b) > 20000 {
		t.Errorf("cut %v to %d bytes", cut, len(b))
	}
	m := out.(map[string]any)
	if m["small"] != "keep me" || len(m["big1"].(string)) < c || len(m["big2"].(string)) < c {
		t.Errorf("unfair: %d %d", len(m["big1"].(string)), len(m["big2"].(string)))
	}
	if doc["big1"].(string)[0] != 'a' || len(doc["big1"].(string)) != 100000 {
		t.Error("the original was modified")
	}
	var fits Fitter
	fits.Value(map[string]any{"a": "b"})
	if fits.Cap(1000) != -1 {
		t.Error("a document that fits gets a cap")
	}
}

// A running budget drops the elements that do not fit, saying how many;
// depth beyond the limit becomes a marker; unchanged values are not copied.
func TestCutDropsAndFlattens(t *testing.T) {
	many := make([]any, 10000)
	for i := range many {
		many[i] = json.Number("1")
	}
	budget := 1000
	out, cut := Cut(map[string]any{"many": many}, -1, 0, &budget)
	b, _ := json.Marshal(out)
	if !cut || len(b) > 1200 || !strings.Contains(string(b), "more elements cut by toolmux") {
		t.Errorf("%v %d %s", cut, len(b), b[len(b)-80:])
	}
	var deep any = "x"
	for range 100 {
		deep = []any{deep}
	}
	out, cut = Cut(deep, -1, 5, nil)
	b, _ = json.Marshal(out)
	if !cut || string(b) != `[[[[["[… nested deeper than 5 levels; cut by toolmux …]"]]]]]` {
		t.Errorf("%s", b)
	}
	in := map[string]any{"a": []any{"b", map[string]any{"c": "d"}}}
	out, cut = Cut(in, 100, 10, nil)
	if cut {
		t.Error("nothing to cut, yet cut")
	}
	// Unchanged, it is the same map, not a copy.
	out.(map[string]any)["probe"] = true
	if in["probe"] != true {
		t.Error("an unchanged value was copied")
	}
}

// Size measures a value as a Fitter does, stops once past max, and
// measures another type by its JSON.
func TestSize(t *testing.T) {
	v := map[string]any{"a": 1.0, "list": []any{"xyz", true, nil}}
	want := 2 + (len("a") + 4 + scalarSize(1.0)) + (len("list") + 4 + 2 + (1 + len("xyz") + 2) + (1 + scalarSize(true)) + (1 + scalarSize(nil)))
	if n := Size(v, 1<<20); n != want {
		t.Errorf("Size %d, want %d", n, want)
	}
	var f Fitter
	f.Value(v)
	measured := f.fixed
	for _, n := range f.strings {
		measured += n
	}
	if measured != want {
		t.Errorf("a Fitter measures %d, Size %d", measured, want)
	}
	if n := Size(struct{ V int }{7}, 100); n != len(`{"V":7}`) {
		t.Errorf("a struct: %d", n)
	}
	if n := Size(func() {}, 100); n <= 100 {
		t.Errorf("what does not encode: %d", n)
	}
	big := []any{strings.Repeat("x", 3000), strings.Repeat("y", 3000), strings.Repeat("z", 3000)}
	if n := Size(big, 1000); n <= 1000 || n > 4000 {
		t.Errorf("past max: %d (it stops after the first part over)", n)
	}
}
