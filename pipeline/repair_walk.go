package pipeline

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

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
		if nv, ok := r.fromString(schema, types, x); ok {
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
		if nv, ok := r.array(schema, x); ok {
			return nv, true
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

// fromString repairs a string where the schema wants another type: a
// number, an integer or a boolean written as text, or an object or array
// sent as JSON text. It returns false when it changed nothing.
func (r *repairer) fromString(schema map[string]any, types repairType, x string) (any, bool) {
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
	return nil, false
}

// array repairs the items of an array against the schema's items. It
// returns false when it changed nothing.
func (r *repairer) array(schema map[string]any, x []any) (any, bool) {
	sub := r.branch(schema, typeArray)
	if sub == nil || r.depth >= repairMaxDepth {
		return nil, false
	}
	items, ok := sub["items"].(map[string]any)
	if !ok || len(x) == 0 {
		return nil, false
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
	return nil, false
}
