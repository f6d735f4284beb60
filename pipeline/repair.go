package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

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

// repairMaxDepth bounds how deep into nested arguments repair looks.
const repairMaxDepth = 64

type repairer struct {
	root  map[string]any // the tool's input schema, for local $refs
	items []repairItem
	depth int
}

// repairItem is a repair being reported. Repairs deep in the arguments are
// recorded with pointers relative to the value being repaired, completed
// on the way back up (see prefix): the path is never materialised unless a
// repair is made.
type repairItem struct {
	kind     string
	from, to string
	names    bool   // from and to are top-level argument names, not pointers
	tail     string // the end of the detail sentence
}

func (r *repairer) add(it repairItem) { r.items = append(r.items, it) }

// prefix completes the pointers of the repairs made since start, made
// within the value under key tok, or under array index index when it is
// not negative.
func (r *repairer) prefix(start int, tok string, index int) {
	p := "/" + pointerToken(tok)
	if index >= 0 {
		p = "/" + strconv.Itoa(index)
	}
	for i := start; i < len(r.items); i++ {
		if it := &r.items[i]; !it.names {
			it.from, it.to = p+it.from, p+it.to
		}
	}
}

func (it repairItem) repairment() Repairment {
	rep := Repairment{Kind: it.kind, From: it.from, To: it.to}
	switch {
	case it.kind == RepairAlias:
		rep.Detail = fmt.Sprintf("renamed argument %q to %q", it.from, it.to)
	case it.kind == RepairNearMiss && it.names:
		rep.Detail = fmt.Sprintf("renamed argument %q to %q (a near miss of the required property)", it.from, it.to)
	case it.kind == RepairNearMiss:
		rep.Detail = fmt.Sprintf("renamed argument %s to %s (a near miss of the required property)", it.from, it.to)
	case it.kind == RepairUnwrapJSON && it.to == "":
		rep.Detail = fmt.Sprintf("parsed the JSON object in argument %q as the arguments", it.tail)
	case it.kind == RepairUnwrapJSON:
		rep.Detail = fmt.Sprintf("parsed %s from a string of JSON text into %s", it.from, it.tail)
	default:
		rep.Detail = fmt.Sprintf("converted %s from %s", it.from, it.tail)
	}
	return rep
}

// aliases renames the keys of args that set names. A rename happens only
// when the right key is absent: when the model sent both, both are kept and
// nothing is reported, since dropping either could lose what the model
// meant; validation then flags the wrong key if the schema forbids it.
// Renames are applied in the order of the wrong keys, so that the outcome
// does not depend on map iteration order.
func (r *repairer) aliases(args map[string]any, owned bool, set map[string]string) (map[string]any, bool) {
	var buf [8]string
	wrong := buf[:0]
	for w, right := range set {
		if w == right {
			continue
		}
		if _, ok := args[w]; ok {
			wrong = append(wrong, w)
		}
	}
	if len(wrong) == 0 {
		return args, owned
	}
	slices.Sort(wrong)
	for _, w := range wrong {
		right := set[w]
		if _, taken := args[right]; taken {
			continue
		}
		if !owned {
			args, owned = maps.Clone(args), true
		}
		args[right] = args[w]
		delete(args, w)
		r.add(repairItem{kind: RepairAlias, from: w, to: right, names: true})
	}
	return args, owned
}

// unwrapWhole handles arguments that are one string holding the real
// arguments as JSON text: {"input": "{\"q\": \"x\"}"} for a schema with
// property q. It applies when the only key is not a property of the schema
// and the decoded object has at least one property of the schema.
func (r *repairer) unwrapWhole(schema, args map[string]any) (map[string]any, bool) {
	if len(args) != 1 {
		return nil, false
	}
	schema = r.resolve(schema)
	props, _ := schema["properties"].(map[string]any)
	if len(props) == 0 {
		return nil, false
	}
	for k, v := range args {
		if _, ok := props[k]; ok || slices.Contains(repairRequired(schema), k) {
			return nil, false
		}
		s, ok := v.(string)
		if !ok {
			return nil, false
		}
		dec, ok := repairDecodeJSON(s, '{')
		if !ok {
			return nil, false
		}
		m := dec.(map[string]any)
		hits := 0
		for mk := range m {
			if _, ok := props[mk]; ok {
				hits++
			}
		}
		if hits == 0 {
			return nil, false
		}
		r.add(repairItem{kind: RepairUnwrapJSON, from: "/" + pointerToken(k), tail: k})
		return m, true
	}
	return nil, false
}

// object repairs obj against schema: near-miss names of missing required
// properties, then each property's value. It returns obj itself when nothing
// changed; otherwise a copy (or obj, when owned says it is ours to change).
func (r *repairer) object(schema, obj map[string]any, owned bool) (map[string]any, bool) {
	if r.depth >= repairMaxDepth || len(obj) == 0 {
		return obj, false
	}
	r.depth++
	defer func() { r.depth-- }()
	schema = r.resolve(schema)
	props, _ := schema["properties"].(map[string]any)
	changed := false

	if renames := r.nearMisses(schema, props, obj); len(renames) > 0 {
		if !owned {
			obj, owned = maps.Clone(obj), true
		}
		for _, rn := range renames {
			obj[rn.to] = obj[rn.from]
			delete(obj, rn.from)
		}
		changed = true
	}

	if len(props) == 0 {
		return obj, changed
	}
	start := len(r.items)
	var out map[string]any // the copy being written, when obj is not ours
	for k, v := range obj {
		ps, ok := props[k].(map[string]any)
		if !ok {
			continue
		}
		n := len(r.items)
		nv, ch := r.value(ps, v)
		if !ch {
			continue
		}
		r.prefix(n, k, -1)
		changed = true
		if owned {
			obj[k] = nv // assigning an existing key while ranging is fine
			continue
		}
		if out == nil {
			out = maps.Clone(obj)
		}
		out[k] = nv
	}
	if out != nil {
		obj = out
	}
	if len(r.items)-start > 1 {
		slices.SortStableFunc(r.items[start:], func(a, b repairItem) int { return strings.Compare(a.from, b.from) })
	}
	return obj, changed
}

type repairRename struct{ from, to string }

// nearMisses finds, for each missing required property, the one argument
// that is not a property of the schema and whose name is a near miss of the
// property's. A property with several candidates, or a candidate near to
// several missing properties, is left alone: guessing could be wrong.
func (r *repairer) nearMisses(schema, props, obj map[string]any) []repairRename {
	if !repairMissingRequired(schema, obj) {
		return nil
	}
	required := repairRequired(schema)
	var missing []string
	for _, req := range required {
		if _, ok := obj[req]; !ok {
			missing = append(missing, req)
		}
	}
	var unknown []string
	for k := range obj {
		if _, ok := props[k]; !ok && !slices.Contains(required, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	cands := make(map[string][]string, len(missing))
	uses := make(map[string]int, len(unknown))
	for _, m := range missing {
		for _, k := range unknown {
			if nearMiss(k, m) {
				cands[m] = append(cands[m], k)
				uses[k]++
			}
		}
	}
	top := r.depth == 1 // the arguments object itself
	var out []repairRename
	for _, m := range missing {
		c := cands[m]
		if len(c) != 1 || uses[c[0]] != 1 {
			continue
		}
		if top {
			r.add(repairItem{kind: RepairNearMiss, from: c[0], to: m, names: true})
		} else {
			r.add(repairItem{kind: RepairNearMiss, from: "/" + pointerToken(c[0]), to: "/" + pointerToken(m)})
		}
		out = append(out, repairRename{c[0], m})
	}
	return out
}

// value repairs one value against its schema. Repairs are recorded with
// pointers relative to the value; the caller completes them.
func (r *repairer) value(schema map[string]any, v any) (any, bool) {
	schema = r.resolve(schema)
	types := r.typesOf(schema)
	switch x := v.(type) {
	case string:
		if types == 0 || types&typeString != 0 {
			return v, false
		}
		if types&typeInteger != 0 {
			if n, ok := repairParseInteger(x); ok {
				r.add(repairItem{kind: RepairCoerce, tail: "string " + repairQuote(x) + " to integer " + string(n)})
				return n, true
			}
		}
		if types&typeNumber != 0 {
			if n, ok := repairParseNumber(x); ok {
				r.add(repairItem{kind: RepairCoerce, tail: "string " + repairQuote(x) + " to number " + string(n)})
				return n, true
			}
		}
		if types&typeBoolean != 0 {
			if b, ok := repairParseBool(x); ok {
				r.add(repairItem{kind: RepairCoerce, tail: "string " + repairQuote(x) + " to boolean " + strconv.FormatBool(b)})
				return b, true
			}
		}
		for _, want := range [...]struct {
			t     repairType
			first byte
			name  string
		}{{typeObject, '{', "an object"}, {typeArray, '[', "an array"}} {
			if types&want.t == 0 {
				continue
			}
			dec, ok := repairDecodeJSON(x, want.first)
			if !ok {
				continue
			}
			r.add(repairItem{kind: RepairUnwrapJSON, tail: want.name})
			nv, _ := r.value(r.branch(schema, want.t), dec)
			return nv, true
		}
	case float64, json.Number, int, int64, bool:
		// A number or boolean where only a string will do ("id": 123).
		if types&typeString == 0 || types&(typeNumber|typeInteger|typeBoolean) != 0 {
			return v, false
		}
		text, kind := scalarText(x)
		r.add(repairItem{kind: RepairCoerce, tail: kind + " " + text + " to string " + repairQuote(text)})
		return text, true
	case map[string]any:
		if sub := r.branch(schema, typeObject); sub != nil {
			return r.object(sub, x, false)
		}
	case []any:
		sub := r.branch(schema, typeArray)
		if sub == nil || r.depth >= repairMaxDepth {
			return v, false
		}
		items, ok := sub["items"].(map[string]any)
		if !ok || len(x) == 0 {
			return v, false
		}
		r.depth++
		defer func() { r.depth-- }()
		var out []any
		for i, e := range x {
			n := len(r.items)
			ne, ch := r.value(items, e)
			if !ch {
				continue
			}
			r.prefix(n, "", i)
			if out == nil {
				out = slices.Clone(x)
			}
			out[i] = ne
		}
		if out != nil {
			return out, true
		}
	}
	return v, false
}

// scalarText renders a JSON number or boolean as the text a model meant.
func scalarText(v any) (text, kind string) {
	switch x := v.(type) {
	case bool:
		return strconv.FormatBool(x), "boolean"
	case json.Number:
		return string(x), "number"
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), "number"
	case int:
		return strconv.Itoa(x), "number"
	case int64:
		return strconv.FormatInt(x, 10), "number"
	}
	return fmt.Sprint(v), "value"
}

// resolve follows local "$ref"s ("#/$defs/Item") within the tool's schema.
func (r *repairer) resolve(schema map[string]any) map[string]any {
	for range 8 {
		ref, ok := schema["$ref"].(string)
		if !ok || !strings.HasPrefix(ref, "#") {
			return schema
		}
		target, ok := repairPointer(r.root, ref[1:])
		if !ok {
			return schema
		}
		next, ok := target.(map[string]any)
		if !ok {
			return schema
		}
		schema = next
	}
	return schema
}

// repairPointer resolves a JSON pointer within a schema document.
func repairPointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	if ptr[0] != '/' {
		return nil, false
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// repairType is a set of JSON Schema types.
type repairType uint8

const (
	typeString repairType = 1 << iota
	typeNumber
	typeInteger
	typeBoolean
	typeObject
	typeArray
	typeNull
)

func repairTypeNamed(s string) repairType {
	switch s {
	case "string":
		return typeString
	case "number":
		return typeNumber
	case "integer":
		return typeInteger
	case "boolean":
		return typeBoolean
	case "object":
		return typeObject
	case "array":
		return typeArray
	case "null":
		return typeNull
	}
	return 0
}

// typesOf returns the types a schema allows: its "type" (a name or a list
// of names), or when it has none, the union of the types of its "anyOf" or
// "oneOf" alternatives (Optional[int] is {"anyOf": [{"type": "integer"},
// {"type": "null"}]}). 0 means unknown. Alternatives count by their own
// "type" only, so that self-referencing schemas cost no more than one pass.
func (r *repairer) typesOf(schema map[string]any) repairType {
	if t, ok := repairTypeKeyword(schema); ok {
		return t
	}
	var t repairType
	for _, kw := range [...]string{"anyOf", "oneOf"} {
		alts, ok := schema[kw].([]any)
		if !ok {
			continue
		}
		for _, a := range alts {
			m, ok := a.(map[string]any)
			if !ok {
				return 0
			}
			at, _ := repairTypeKeyword(r.resolve(m))
			if at == 0 {
				return 0 // an alternative of unknown type could take anything
			}
			t |= at
		}
		return t
	}
	return 0
}

// repairTypeKeyword reads a schema's "type"; ok is false when it has none.
func repairTypeKeyword(schema map[string]any) (t repairType, ok bool) {
	switch v := schema["type"].(type) {
	case string:
		return repairTypeNamed(v), true
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				t |= repairTypeNamed(s)
			}
		}
		return t, true
	case []string:
		for _, s := range v {
			t |= repairTypeNamed(s)
		}
		return t, true
	case nil:
		return 0, false
	}
	return 0, true
}

// branch returns the schema that describes values of type want: the schema
// itself, or its anyOf/oneOf alternative of that type. It returns nil when
// the schema does not allow such values.
func (r *repairer) branch(schema map[string]any, want repairType) map[string]any {
	if _, ok := schema["type"]; ok || (schema["anyOf"] == nil && schema["oneOf"] == nil) {
		if t := r.typesOf(schema); t != 0 && t&want == 0 {
			return nil
		}
		return schema
	}
	for _, kw := range [...]string{"anyOf", "oneOf"} {
		alts, _ := schema[kw].([]any)
		for _, a := range alts {
			m, ok := a.(map[string]any)
			if !ok {
				continue
			}
			m = r.resolve(m)
			t, typed := repairTypeKeyword(m)
			if t&want != 0 || !typed && (want == typeObject && m["properties"] != nil || want == typeArray && m["items"] != nil) {
				return m
			}
		}
	}
	return nil
}

// repairRequired returns a schema's "required" names ([]any from JSON,
// []string from Go code).
func repairRequired(schema map[string]any) []string {
	switch v := schema["required"].(type) {
	case []string:
		return v
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// repairMissingRequired reports whether obj lacks a required property of
// schema, without allocating.
func repairMissingRequired(schema, obj map[string]any) bool {
	switch v := schema["required"].(type) {
	case []string:
		for _, s := range v {
			if _, ok := obj[s]; !ok {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				if _, ok := obj[s]; !ok {
					return true
				}
			}
		}
	}
	return false
}

// nearMiss reports whether key is plausibly a misspelling of want: the same
// after case-folding with '-' and '_' alike, or within an edit distance of 2
// that is at most a third of want's length (so "x" is no near miss of "q").
func nearMiss(key, want string) bool {
	k, w := repairFold(key), repairFold(want)
	if k == w {
		return true
	}
	d := repairEditDistance(k, w, 2)
	return d <= 2 && 3*d <= len(w)
}

func repairFold(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), "-", "_")
}

// repairEditDistance is the Levenshtein distance of a and b over bytes, or
// limit+1 when it is larger than limit.
func repairEditDistance(a, b string, limit int) int {
	if len(a) < len(b) {
		a, b = b, a
	}
	if len(a)-len(b) > limit {
		return limit + 1
	}
	var pb, cb [64]int
	prev, cur := pb[:0], cb[:0]
	if len(b)+1 > len(pb) {
		prev, cur = make([]int, 0, len(b)+1), make([]int, 0, len(b)+1)
	}
	prev, cur = prev[:len(b)+1], cur[:len(b)+1]
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin > limit {
			return limit + 1
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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
