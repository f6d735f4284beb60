// Package bound fits JSON-like values (what encoding/json decodes into:
// maps, slices, strings, numbers) into a byte budget, so that records,
// answers and events stay within their configured sizes whatever a tool
// or a caller sent.
//
// A [Fitter] is fed every value and string a document will hold, then
// gives the one length its longest strings are cut to so that the whole
// fits ("water-filling": short strings are kept whole, the long ones share
// what is left equally, so one huge argument cannot starve the result of
// room). [Cut] then copies a value with its strings cut to that length,
// its nesting cut at a depth, and its output cut at a running byte
// budget, copying only what changes. Everything cut says so with a marker
// naming what was removed.
//
// Sizes are estimates of the compact JSON encoding (escapes are not
// counted), which is what the budgets are about.
package bound

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"unicode/utf8"
)

// headShare is the part of a cut string kept from its start; the rest is
// kept from its end, where errors and summaries tend to be.
const headShare = 0.7

// minKeep is the least a cut string keeps (head and tail together), so a
// cut value still shows what it was.
const minKeep = 32

// markerRoom is what a marker costs, for sizing: the longest marker text
// plus quotes.
const markerRoom = 64

// String returns s cut to about max bytes (max ≥ minKeep): its head and
// tail, cut at character boundaries, around a marker saying how many bytes
// were removed. A string within max is returned as is; cut reports whether
// s was cut.
func String(s string, max int) (out string, cut bool) {
	if len(s) <= max {
		return s, false
	}
	max = maxInt(max, minKeep)
	head := int(float64(max) * headShare)
	tail := max - head
	h := prefix(s, head)
	t := suffix(s, tail)
	return h + Marker(len(s)-len(h)-len(t)) + t, true
}

// Marker is the text put where n bytes were cut out of a string.
func Marker(n int) string {
	return "[… " + strconv.Itoa(n) + " bytes cut by toolmux …]"
}

func prefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func suffix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// Fitter measures what a document holds, to find how far its strings must
// be cut for the document to fit a budget. The zero value is ready; every
// value is measured only to MaxDepth levels, as [Cut] will keep no more.
type Fitter struct {
	// MaxDepth is the nesting Cut will keep (0: unlimited).
	MaxDepth int
	strings  []int // lengths of the strings
	fixed    int   // bytes of everything that is not a string's content
}

// String adds a string the document holds.
func (f *Fitter) String(s string) {
	f.strings = append(f.strings, len(s))
	f.fixed += 2
}

// Fixed adds n bytes the document holds that cannot be cut (names, numbers,
// binary data that is kept or dropped whole).
func (f *Fitter) Fixed(n int) { f.fixed += n }

// Value adds a JSON-like value.
func (f *Fitter) Value(v any) { f.value(v, 1) }

func (f *Fitter) value(v any, level int) {
	switch x := v.(type) {
	case string:
		f.String(x)
	case map[string]any:
		if f.MaxDepth > 0 && level > f.MaxDepth {
			f.fixed += markerRoom
			return
		}
		f.fixed += 2
		for k, e := range x {
			f.fixed += len(k) + 4
			f.value(e, level+1)
		}
	case []any:
		if f.MaxDepth > 0 && level > f.MaxDepth {
			f.fixed += markerRoom
			return
		}
		f.fixed += 2
		for _, e := range x {
			f.fixed++
			f.value(e, level+1)
		}
	default:
		f.fixed += scalarSize(x)
	}
}

// Cap returns the length the document's strings must be cut to for it to
// fit budget bytes, or -1 when it fits as it is. The cap is never below
// what a cut string keeps anyway; when even that does not fit, Cut's
// running budget drops what is left.
func (f *Fitter) Cap(budget int) int {
	total := f.fixed
	for _, n := range f.strings {
		total += n
	}
	if total <= budget {
		return -1
	}
	// Water-filling: the largest c with fixed + Σ min(n, c+markerRoom) ≤ budget.
	sorted := slices.Clone(f.strings)
	sort.Ints(sorted)
	room := budget - f.fixed
	for i, n := range sorted {
		rest := len(sorted) - i
		// Every string from i on is cut to c; those before are kept whole.
		if c := room/rest - markerRoom; c < n {
			return maxInt(c, minKeep)
		}
		room -= n
	}
	return -1
}

// Cut returns v with every string longer than strCap cut to it (strCap < 0:
// none), every object or array nested deeper than maxDepth replaced by a
// marker (maxDepth ≤ 0: none), and, once *budget bytes have been spent (nil:
// no budget), the remaining elements of each object and array dropped for
// a marker saying how many. Maps and slices are copied only along the
// paths where something changed; v is never modified. cut reports whether
// anything was.
func Cut(v any, strCap, maxDepth int, budget *int) (out any, cut bool) {
	c := cutter{strCap: strCap, maxDepth: maxDepth, budget: budget}
	out, _ = c.value(v, 1)
	return out, c.cut
}

type cutter struct {
	strCap, maxDepth int
	budget           *int
	cut              bool
}

func (c *cutter) spend(n int) {
	if c.budget != nil {
		*c.budget -= n
	}
}

func (c *cutter) broke() bool { return c.budget != nil && *c.budget < 0 }

// value returns v cut, and whether that is a different value.
func (c *cutter) value(v any, level int) (any, bool) {
	switch x := v.(type) {
	case string:
		changed := false
		if c.strCap >= 0 {
			if s, cut := String(x, c.strCap); cut {
				c.cut, changed = true, true
				x = s
			}
		}
		c.spend(len(x) + 2)
		return x, changed
	case map[string]any:
		if c.maxDepth > 0 && level > c.maxDepth {
			return c.tooDeep(), true
		}
		return c.object(x, level)
	case []any:
		if c.maxDepth > 0 && level > c.maxDepth {
			return c.tooDeep(), true
		}
		return c.array(x, level)
	}
	c.spend(scalarSize(v))
	return v, false
}

func (c *cutter) tooDeep() string {
	c.cut = true
	s := fmt.Sprintf("[… nested deeper than %d levels; cut by toolmux …]", c.maxDepth)
	c.spend(len(s) + 2)
	return s
}

// object visits the keys in sorted order, so that what a running budget
// keeps does not depend on map iteration order.
func (c *cutter) object(m map[string]any, level int) (any, bool) {
	c.spend(2)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out map[string]any
	copied := func(n int) {
		if out == nil {
			out = make(map[string]any, n)
			for _, k := range keys[:n] {
				out[k] = m[k]
			}
		}
	}
	for i, k := range keys {
		if c.broke() {
			copied(i)
			out["…"] = fmt.Sprintf("%d more keys cut by toolmux", len(keys)-i)
			c.cut = true
			return out, true
		}
		c.spend(len(k) + 4)
		ne, changed := c.value(m[k], level+1)
		if changed {
			copied(i)
		}
		if out != nil {
			out[k] = ne
		}
	}
	if out == nil {
		return m, false
	}
	return out, true
}

func (c *cutter) array(s []any, level int) (any, bool) {
	c.spend(2)
	var out []any
	for i, e := range s {
		if c.broke() {
			if out == nil {
				out = slices.Clone(s[:i])
			}
			out = append(out, fmt.Sprintf("[… %d more elements cut by toolmux …]", len(s)-i))
			c.cut = true
			return out, true
		}
		c.spend(1)
		ne, changed := c.value(e, level+1)
		if changed && out == nil {
			out = make([]any, i, len(s))
			copy(out, s[:i])
		}
		if out != nil {
			out = append(out, ne)
		}
	}
	if out == nil {
		return s, false
	}
	return out, true
}

// Size estimates the bytes of a JSON-like value as a Fitter measures
// them (a string its length and quotes, a member its key and punctuation,
// a scalar scalarSize), stopping once past max; a value of another type
// is measured by its JSON encoding, and one that does not encode counts
// as past max. Walking a value costs a fraction of encoding it.
func Size(v any, max int) int {
	switch x := v.(type) {
	case string:
		return len(x) + 2
	case map[string]any:
		n := 2
		for k, e := range x {
			if n += len(k) + 4 + Size(e, max-n); n > max {
				break
			}
		}
		return n
	case []any:
		n := 2
		for _, e := range x {
			if n += 1 + Size(e, max-n); n > max {
				break
			}
		}
		return n
	case nil, bool, json.Number, float64, float32, int, int64, int32, uint, uint64, uint32:
		return scalarSize(x)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return max + 1
	}
	return len(b)
}

// scalarSize estimates the JSON size of a scalar.
func scalarSize(v any) int {
	switch x := v.(type) {
	case nil:
		return 4
	case bool:
		return 5
	case json.Number:
		return len(x)
	case float64, float32, int, int64, int32, uint, uint64, uint32:
		return 12
	}
	return 16
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}
