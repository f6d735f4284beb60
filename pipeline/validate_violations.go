package pipeline

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// The wording of schema violations, one line each, in words a model can
// act on.

// maxViolations bounds the violations listed in one message.
const maxViolations = 100

var schemaPrinter = message.NewPrinter(language.English)

type violation struct {
	at  []string // instance location
	msg string
}

// renderViolations lists every violation in err, one line each: the JSON
// pointer of the value and what is wrong with it, in words a model can act
// on. Lines are sorted by location.
func renderViolations(err *jsonschema.ValidationError, instance, doc any) []string {
	var vs []violation
	collectViolations(err, instance, doc, &vs)
	slices.SortFunc(vs, func(a, b violation) int {
		return cmp.Or(comparePointers(a.at, b.at), strings.Compare(a.msg, b.msg))
	})
	lines := make([]string, 0, len(vs))
	for _, v := range vs {
		l := displayPointer(v.at) + ": " + v.msg
		if len(lines) > 0 && lines[len(lines)-1] == l {
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) > maxViolations {
		more := len(lines) - maxViolations
		lines = append(lines[:maxViolations], fmt.Sprintf("... and %d more", more))
	}
	return lines
}

func collectViolations(e *jsonschema.ValidationError, instance, doc any, out *[]violation) {
	add := func(at []string, msg string) { *out = append(*out, violation{at, msg}) }
	child := func(name string) []string { return append(slices.Clip(e.InstanceLocation), name) }
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				collectViolations(c, instance, doc, out)
			}
			return
		}
	case *kind.AnyOf, *kind.OneOf:
		if o, ok := k.(*kind.OneOf); ok && len(o.Subschemas) >= 2 {
			add(e.InstanceLocation, fmt.Sprintf("matches more than one of the alternatives (oneOf %d and %d), want exactly one", o.Subschemas[0], o.Subschemas[1]))
			return
		}
		collectAlternatives(e, instance, doc, out)
		return
	case *kind.Required:
		for _, m := range k.Missing {
			add(child(m), "missing (required property)")
		}
		return
	case *kind.DependentRequired:
		for _, m := range k.Missing {
			add(child(m), fmt.Sprintf("missing (required when %q is present)", k.Prop))
		}
		return
	case *kind.Dependency:
		for _, m := range k.Missing {
			add(child(m), fmt.Sprintf("missing (required when %q is present)", k.Prop))
		}
		return
	case *kind.AdditionalProperties:
		allowed := allowedProperties(e.SchemaURL, doc)
		for _, p := range k.Properties {
			if allowed == "" {
				add(child(p), "unknown property")
			} else {
				add(child(p), "unknown property (allowed: "+allowed+")")
			}
		}
		return
	}
	add(e.InstanceLocation, describeKind(e, instance))
}

// collectAlternatives reports a value that matches none of the anyOf/oneOf
// alternatives. Alternatives of another type than the value are the wrong
// branch; when one alternative remains, its violations are reported as if
// it were the schema.
func collectAlternatives(e *jsonschema.ValidationError, instance, doc any, out *[]violation) {
	var near []*jsonschema.ValidationError
	var want []string
	for _, c := range e.Causes {
		if t, ok := c.ErrorKind.(*kind.Type); ok && slices.Equal(c.InstanceLocation, e.InstanceLocation) {
			for _, w := range t.Want {
				if !slices.Contains(want, w) {
					want = append(want, w)
				}
			}
			continue
		}
		near = append(near, c)
	}
	switch len(near) {
	case 0:
		if len(want) > 0 {
			*out = append(*out, violation{e.InstanceLocation, fmt.Sprintf("got %s, want %s", describeValue(instance, e.InstanceLocation), strings.Join(want, " or "))})
			return
		}
		*out = append(*out, violation{e.InstanceLocation, "matches none of the allowed alternatives"})
	case 1:
		collectViolations(near[0], instance, doc, out)
	default:
		var parts []string
		for i, c := range near {
			var sub []violation
			collectViolations(c, instance, doc, &sub)
			var ps []string
			for _, v := range sub {
				ps = append(ps, displayPointer(v.at)+": "+v.msg)
			}
			parts = append(parts, fmt.Sprintf("(%d) %s", i+1, strings.Join(ps, ", ")))
		}
		*out = append(*out, violation{e.InstanceLocation, "matches none of the allowed alternatives: " + strings.Join(parts, "; ")})
	}
}

// describeKind words one violation.
func describeKind(e *jsonschema.ValidationError, instance any) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return fmt.Sprintf("got %s, want %s", describeValue(instance, e.InstanceLocation), strings.Join(k.Want, " or "))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = displayJSON(w)
		}
		if len(want) == 1 {
			return fmt.Sprintf("got %s, want %s", displayJSON(k.Got), want[0])
		}
		return fmt.Sprintf("got %s, want one of %s", displayJSON(k.Got), strings.Join(want, ", "))
	case *kind.Const:
		return fmt.Sprintf("got %s, want %s", displayJSON(k.Got), displayJSON(k.Want))
	case *kind.Minimum:
		return fmt.Sprintf("got %s, want at least %s", displayRat(k.Got), displayRat(k.Want))
	case *kind.Maximum:
		return fmt.Sprintf("got %s, want at most %s", displayRat(k.Got), displayRat(k.Want))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("got %s, want more than %s", displayRat(k.Got), displayRat(k.Want))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("got %s, want less than %s", displayRat(k.Got), displayRat(k.Want))
	case *kind.MultipleOf:
		return fmt.Sprintf("got %s, want a multiple of %s", displayRat(k.Got), displayRat(k.Want))
	case *kind.MinLength:
		return fmt.Sprintf("%d characters, want at least %d", k.Got, k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("%d characters, want at most %d", k.Got, k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("%d items, want at least %d", k.Got, k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("%d items, want at most %d", k.Got, k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("%d properties, want at least %d", k.Got, k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("%d properties, want at most %d", k.Got, k.Want)
	case *kind.Pattern:
		return fmt.Sprintf("%s does not match the pattern %s", repairQuote(k.Got), strconv.Quote(k.Want))
	case *kind.Format:
		msg := fmt.Sprintf("%s is not a valid %s", displayJSON(k.Got), k.Want)
		if k.Err != nil {
			msg += " (" + k.Err.Error() + ")"
		}
		return msg
	case *kind.UniqueItems:
		return fmt.Sprintf("items %d and %d are equal, want unique items", k.Duplicates[0], k.Duplicates[1])
	case *kind.FalseSchema:
		return "not allowed"
	case *kind.AdditionalItems:
		return fmt.Sprintf("the last %d items are not allowed", k.Count)
	case *kind.PropertyNames:
		return fmt.Sprintf("property name %q is not allowed", k.Property)
	case *kind.Not:
		return "matches a schema it must not match"
	case *kind.InvalidJsonValue:
		return fmt.Sprintf("not a JSON value (%T)", k.Value)
	}
	return e.ErrorKind.LocalizedString(schemaPrinter)
}

// describeValue names the type of the value at a location, with the value
// itself when it is short: `string "3"`, `number 3.5`, `object`.
func describeValue(instance any, at []string) string {
	v, ok := valueAt(instance, at)
	if !ok {
		return "value"
	}
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case string:
		return "string " + repairQuote(x)
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case json.Number:
		if len(x) > 40 {
			return "number " + string(x[:40]) + "..."
		}
		return "number " + string(x)
	case float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprintf("number %v", x)
	}
	return "value"
}

// displayJSON renders a JSON value compactly for a message.
func displayJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 60 {
		switch v.(type) {
		case map[string]any:
			return "an object"
		case []any:
			return "an array"
		}
		cut := 57
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return string(b[:cut]) + "..."
	}
	return string(b)
}

func displayRat(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func valueAt(v any, at []string) (any, bool) {
	for _, tok := range at {
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[tok]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// allowedProperties lists the properties the object schema at schemaURL
// declares, when schemaURL is a location in the tool's schema.
func allowedProperties(schemaURL string, doc any) string {
	base, frag, _ := strings.Cut(schemaURL, "#")
	if base != inputSchemaURL {
		return ""
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return ""
	}
	s, ok := repairPointer(doc, frag)
	if !ok {
		return ""
	}
	m, _ := s.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	if len(props) == 0 {
		return ""
	}
	names := slices.Sorted(maps.Keys(props))
	const most = 20
	if len(names) > most {
		return strings.Join(names[:most], ", ") + fmt.Sprintf(", ... (%d more)", len(names)-most)
	}
	return strings.Join(names, ", ")
}

func displayPointer(at []string) string {
	if len(at) == 0 {
		return "(arguments)"
	}
	var b strings.Builder
	for _, t := range at {
		b.WriteByte('/')
		b.WriteString(pointerToken(t))
	}
	return b.String()
}

// comparePointers orders locations token by token, array indexes
// numerically.
func comparePointers(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] == b[i] {
			continue
		}
		x, errx := strconv.Atoi(a[i])
		y, erry := strconv.Atoi(b[i])
		if errx == nil && erry == nil {
			return cmp.Compare(x, y)
		}
		return strings.Compare(a[i], b[i])
	}
	return cmp.Compare(len(a), len(b))
}
