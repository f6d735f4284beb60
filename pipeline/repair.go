package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolmux/toolmux/internal/editdist"
	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

// Repairment kinds.
const (
	// RepairAlias: a configured alias renamed an argument.
	RepairAlias = "alias"
	// RepairNearMiss: a missing required property was filled from an
	// argument whose name is a near miss of it ("Query", "file-path",
	// "mesage").
	RepairNearMiss = "near_miss"
	// RepairCoerce: a string was converted to the number, integer or
	// boolean the schema asks for.
	RepairCoerce = "coerce"
	// RepairUnwrapJSON: a string holding JSON text was replaced by the
	// object or array it encodes.
	RepairUnwrapJSON = "unwrap_json"
)

// Repairment is one change argument repair made.
type Repairment struct {
	// Kind is one of the Repair* constants.
	Kind string `json:"kind"`
	// From and To say what changed: argument names for renames of top-level
	// arguments, JSON pointers otherwise ("" is the whole arguments object).
	From string `json:"from"`
	To   string `json:"to"`
	// Detail describes the change in a sentence, for the record's notes.
	Detail string `json:"detail"`
}

// repairAliasEntry is one configured alias map and the tools it applies to.
type repairAliasEntry struct {
	tools toolglob.Pattern
	names map[string]string
}

// NewRepair returns the argument-repair middleware. tools finds the called
// tool's definition (its InputSchema).
func NewRepair(cfg RepairOptions, tools ToolLookup) (Middleware, error) {
	entries := make([]repairAliasEntry, 0, len(cfg.Aliases))
	for _, a := range cfg.Aliases {
		p, err := toolglob.Parse(a.Tools, true)
		if err != nil {
			return nil, fmt.Errorf("repair: aliases: %w", err)
		}
		if len(a.Map) == 0 {
			continue
		}
		entries = append(entries, repairAliasEntry{tools: p, names: maps.Clone(a.Map)})
	}
	schema := !cfg.NoSchema
	return func(next Handler) Handler {
		if len(entries) == 0 && !schema {
			return next
		}
		return HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
			var buf [4]map[string]string
			sets := buf[:0]
			for _, e := range entries {
				if e.tools.Match(call.Server, call.Tool) {
					sets = append(sets, e.names)
				}
			}
			if len(sets) == 0 && !schema {
				return next.Call(ctx, call)
			}
			t, err := definition(ctx, tools, &call)
			if err != nil {
				// The manager reports unknown and denied tools.
				return next.Call(ctx, call)
			}
			args, reps := repairArgs(*t, call.Arguments, sets, schema)
			if len(reps) == 0 {
				return next.Call(ctx, call)
			}
			call.Arguments = args
			rec := next.Call(ctx, call)
			if rec == nil {
				return rec
			}
			if rec.Arguments == nil {
				rec.Arguments = args
			}
			for _, r := range reps {
				rec.Note("repair", r.Detail, map[string]any{"kind": r.Kind, "from": r.From, "to": r.To})
			}
			return rec
		})
	}, nil
}

// Repair returns a repaired copy of args for tool t and the list of repairs
// made; args is never modified. aliases renames argument keys (wrong ->
// right); schemaRepair turns on the repairs driven by t.InputSchema:
// near-miss names of missing required properties, strings converted to the
// number, integer or boolean the schema asks for, and JSON text unwrapped
// where the schema wants an object or array (or where the whole arguments
// object is one string holding the real arguments).
//
// When nothing needs repair the result is args itself. Otherwise it is a
// new map that shares the values it did not change with args: treat both as
// read-only.
func Repair(t tool.Tool, args map[string]any, aliases map[string]string, schemaRepair bool) (map[string]any, []Repairment) {
	var sets [1]map[string]string
	n := 0
	if len(aliases) > 0 {
		sets[0], n = aliases, 1
	}
	return repairArgs(t, args, sets[:n], schemaRepair)
}

// repairArgs applies each alias set in order, then the schema repairs.
func repairArgs(t tool.Tool, args map[string]any, aliasSets []map[string]string, schemaRepair bool) (map[string]any, []Repairment) {
	r := repairer{root: t.InputSchema}
	out, owned := args, false
	for _, set := range aliasSets {
		out, owned = r.aliases(out, owned, set)
	}
	if schemaRepair && t.InputSchema != nil {
		if m, ok := r.unwrapWhole(t.InputSchema, out); ok {
			// The real arguments get the aliases too.
			out, owned = m, true
			for _, set := range aliasSets {
				out, owned = r.aliases(out, owned, set)
			}
		}
		out, _ = r.object(t.InputSchema, out, owned)
	}
	if len(r.items) == 0 {
		return out, nil
	}
	reps := make([]Repairment, len(r.items))
	for i, it := range r.items {
		reps[i] = it.repairment()
	}
	return out, reps
}

// nearMiss reports whether key is plausibly a misspelling of want: the same
// after case-folding with '-' and '_' alike, or within an edit distance of 2
// that is at most a third of want's length (so "x" is no near miss of "q").
func nearMiss(key, want string) bool {
	k, w := repairFold(key), repairFold(want)
	if k == w {
		return true
	}
	d := editdist.Levenshtein(k, w, 2)
	return d <= 2 && 3*d <= len(w)
}

func repairFold(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), "-", "_")
}

// repairMaxNumberLen bounds the numbers repair creates (and validation
// accepts as json.Number): longer ones are nonsense, and costly for the
// exact arithmetic of schema validation.
const repairMaxNumberLen = 400

// repairParseNumber converts "42", "3.5" or "-1e3" (surrounding spaces
// allowed) to a json.Number. The text must be a JSON number that fits a
// float64.
func repairParseNumber(s string) (json.Number, bool) {
	s = strings.TrimSpace(s)
	if !usableJSONNumber(s) {
		return "", false
	}
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return "", false
	}
	return json.Number(s), true
}

// repairParseInteger converts "42", "-7" or "1e3" to a json.Number holding
// a plain integer; "3.5" is refused. Integers written with a fraction or
// an exponent must be exact in a float64 (|n| <= 2^53).
func repairParseInteger(s string) (json.Number, bool) {
	s = strings.TrimSpace(s)
	if !usableJSONNumber(s) {
		return "", false
	}
	if !strings.ContainsAny(s, ".eE") {
		return json.Number(s), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return "", false
	}
	if f == 0 {
		f = 0 // no "-0"
	}
	return json.Number(strconv.FormatFloat(f, 'f', -1, 64)), true
}

func repairParseBool(s string) (bool, bool) {
	s = strings.TrimSpace(s)
	switch {
	case strings.EqualFold(s, "true"):
		return true, true
	case strings.EqualFold(s, "false"):
		return false, true
	}
	return false, false
}

// usableJSONNumber reports whether s is a JSON number literal no longer than
// repairMaxNumberLen whose exponent, if any, is within ±9999.
func usableJSONNumber(s string) bool {
	if len(s) > repairMaxNumberLen || !validJSONNumber(s) {
		return false
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp := strings.TrimLeft(s[i+1:], "+-")
		exp = strings.TrimLeft(exp, "0")
		if len(exp) > 4 {
			return false
		}
	}
	return true
}

// validJSONNumber reports whether s is a JSON number literal.
func validJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return false
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return false
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	return i == len(s)
}

// repairDecodeJSON decodes s (numbers as json.Number) when, after leading
// spaces, it starts with first ('{' or '[') and holds exactly one JSON value
// of that kind.
func repairDecodeJSON(s string, first byte) (any, bool) {
	t := strings.TrimSpace(s)
	if len(t) < 2 || t[0] != first {
		return nil, false
	}
	dec := json.NewDecoder(strings.NewReader(t))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	switch v.(type) {
	case map[string]any:
		return v, first == '{'
	case []any:
		return v, first == '['
	}
	return nil, false
}

// repairQuote quotes a string for a note, shortening long ones.
func repairQuote(s string) string {
	const max = 40
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

// pointerToken escapes a key for a JSON pointer (RFC 6901).
func pointerToken(k string) string {
	if !strings.ContainsAny(k, "~/") {
		return k
	}
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}
