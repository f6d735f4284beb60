package pipeline

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/nyaruka/phonenumbers"

	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

// Directions a pii rule applies to (PIIRule.On).
const (
	PIIArguments = "arguments"
	PIIResult    = "result"
)

// Actions of a pii rule (PIIRule.Action).
const (
	PIIMask   = "mask"
	PIIRefuse = "refuse"
	PIINote   = "note"
)

// DefaultPIIMaxFindings bounds the findings a pii note lists, per call and
// direction, when PIIOptions.MaxFindings is 0.
const DefaultPIIMaxFindings = 20

// PIIOptions configure the pii stage (NewPII): which personal data and
// secrets it looks for in a call's arguments and result, and what it does
// with them. Without rules the stage does nothing.
type PIIOptions struct {
	// Rules are tried in order; for each kind and direction, the first rule
	// that names them (and the call's tool) decides.
	Rules []PIIRule
	// Regions are the ISO 3166 region codes whose national phone formats
	// are recognised ("US", "GB"); nil means DefaultPIIRegions. Numbers in
	// international format are recognised whatever the regions.
	Regions []string
	// MaxFindings bounds the findings a note lists, per call and
	// direction (the rest are counted); 0 means DefaultPIIMaxFindings.
	MaxFindings int
}

// PIIRule is one pii rule.
type PIIRule struct {
	// Kinds are among PIIKinds; empty means every kind.
	Kinds []string
	// On lists PIIArguments and/or PIIResult; empty means both.
	On []string
	// Action is PIIMask, PIIRefuse or PIINote.
	Action string
	// Tools restricts the rule to tools matching these patterns; empty
	// means every tool.
	Tools []string
}

// piiRule is a parsed PIIRule.
type piiRule struct {
	kinds  map[string]bool
	on     map[string]bool
	action string
	tools  []toolglob.Pattern
}

// piiStage is the pii middleware's state.
type piiStage struct {
	rules   []piiRule
	regions []string
	max     int
}

// NewPII returns the pii middleware: it looks for personal data and
// secrets (email addresses, phone numbers, payment card numbers passing
// the Luhn check, IBANs passing the mod-97 check, credential shapes) in
// the strings of a call's arguments, before the call, and of its result's
// text parts and structured content, after it, and masks them with a
// placeholder ("[email]"), refuses the call or withholds the result
// (policy_violation), or notes them, as the rules say. Notes and errors
// name the kind and the JSON pointer of each finding, never its value.
func NewPII(cfg PIIOptions) (Middleware, error) {
	s, err := newPII(cfg)
	if err != nil {
		return nil, err
	}
	return s.middleware, nil
}

func newPII(cfg PIIOptions) (*piiStage, error) {
	s := &piiStage{regions: cfg.Regions, max: cfg.MaxFindings}
	if s.regions == nil {
		s.regions = DefaultPIIRegions()
	}
	for _, r := range s.regions {
		if !phonenumbers.GetSupportedRegions()[r] {
			return nil, fmt.Errorf("pii: region %q: not a region code libphonenumber knows (ISO 3166, upper case: US, GB, DE)", r)
		}
	}
	if s.max < 0 {
		return nil, fmt.Errorf("pii: max_findings %d: want 0 (the default) or more", s.max)
	}
	if s.max == 0 {
		s.max = DefaultPIIMaxFindings
	}
	for i, r := range cfg.Rules {
		pr := piiRule{kinds: map[string]bool{}, on: map[string]bool{}, action: r.Action}
		if !slices.Contains([]string{PIIMask, PIIRefuse, PIINote}, r.Action) {
			return nil, fmt.Errorf("pii: rules[%d]: action %q: want mask, refuse or note", i, r.Action)
		}
		kinds := r.Kinds
		if len(kinds) == 0 {
			kinds = PIIKinds()
		}
		for _, k := range kinds {
			if !slices.Contains(PIIKinds(), k) {
				return nil, fmt.Errorf("pii: rules[%d]: kind %q: want one of %s", i, k, strings.Join(PIIKinds(), ", "))
			}
			pr.kinds[k] = true
		}
		on := r.On
		if len(on) == 0 {
			on = []string{PIIArguments, PIIResult}
		}
		for _, d := range on {
			if d != PIIArguments && d != PIIResult {
				return nil, fmt.Errorf("pii: rules[%d]: on %q: want arguments or result", i, d)
			}
			pr.on[d] = true
		}
		tools, err := toolglob.ParseAll(r.Tools, true)
		if err != nil {
			return nil, fmt.Errorf("pii: rules[%d]: %w", i, err)
		}
		pr.tools = tools
		s.rules = append(s.rules, pr)
	}
	return s, nil
}

// actions returns, for the call's tool and one direction, the action of
// each kind some rule decides (the first rule naming it), nil when none.
func (s *piiStage) actions(call tool.Call, dir string) map[string]string {
	var out map[string]string
	for _, r := range s.rules {
		if !r.on[dir] {
			continue
		}
		if len(r.tools) > 0 {
			if _, ok := toolglob.Any(r.tools, call.Server, call.Tool); !ok {
				continue
			}
		}
		for k := range r.kinds {
			if _, done := out[k]; !done {
				if out == nil {
					out = map[string]string{}
				}
				out[k] = r.action
			}
		}
	}
	return out
}

func (s *piiStage) middleware(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		var argNote *tool.Note
		if acts := s.actions(call, PIIArguments); acts != nil && len(call.Arguments) > 0 {
			sc := s.scanner(acts)
			masked, _ := sc.value(call.Arguments, "")
			if sc.refused {
				// The call is not made; its record keeps no finding.
				all := s.scanner(allMasked(acts))
				whole, _ := all.value(call.Arguments, "")
				call.Arguments = whole.(map[string]any)
				rec := refuse(call, &tool.Error{Kind: tool.KindPolicyViolation,
					Message: fmt.Sprintf("the call to %s/%s was refused: its arguments contain %s (pii rules refuse it)",
						call.Server, call.Tool, sc.describe(PIIRefuse))})
				rec.Notes = append(rec.Notes, sc.note(PIIArguments))
				return rec
			}
			if len(sc.found) > 0 {
				call.Arguments = masked.(map[string]any)
				n := sc.note(PIIArguments)
				argNote = &n
			}
		}
		rec := next.Call(ctx, call)
		if argNote != nil {
			rec.Notes = append(rec.Notes, *argNote)
		}
		if acts := s.actions(call, PIIResult); acts != nil && (rec.Result != nil || rec.Error != nil) {
			s.result(call, rec, acts)
		}
		return rec
	})
}

// result applies the result rules to rec: its result, and its error's
// message and detail, where a server's explanation may quote what it was
// sent (/error/message, /error/detail).
func (s *piiStage) result(call tool.Call, rec *tool.Record, acts map[string]string) {
	sc := s.scanner(acts)
	res := rec.Result
	if res == nil {
		res = &tool.Result{}
	}
	var errCopy *tool.Error
	if e := rec.Error; e != nil {
		msg, c1 := sc.text(e.Message, "/error/message")
		detail, c2 := sc.text(e.Detail, "/error/detail")
		if c1 || c2 {
			c := *e
			c.Message, c.Detail = msg, detail
			errCopy = &c
		}
	}
	var content []tool.Content
	var spilled []int
	enforce := slices.ContainsFunc(slices.Collect(maps.Values(acts)), func(a string) bool { return a != PIINote })
	for i, c := range res.Content {
		base := "/content/" + strconv.Itoa(i)
		text, changed := c.Text, false
		if c.Type == tool.ContentText {
			text, changed = sc.text(c.Text, base+"/text")
		}
		var rtext string
		rchanged := false
		if c.Resource != nil {
			rtext, rchanged = sc.text(c.Resource.Text, base+"/resource/text")
		}
		// A part too large to hold keeps its beginning and end; the file
		// with the whole text is not read. Where the rules enforce
		// anything, the part goes on without its file, so nothing after
		// this stage shows the model text no one checked.
		detach := c.Spill != nil && enforce
		if detach {
			spilled = append(spilled, i)
		}
		if !changed && !rchanged && !detach {
			continue
		}
		if content == nil {
			content = slices.Clone(res.Content)
		}
		content[i].Text = text
		if rchanged {
			r := *c.Resource
			r.Text = rtext
			content[i].Resource = &r
		}
		if detach {
			content[i].Spill = nil
		}
	}
	structured, smasked := res.Structured, false
	if structured != nil {
		structured, smasked = sc.value(structured, "/structuredContent")
	}
	if len(spilled) > 0 {
		rec.Note(NamePII, fmt.Sprintf("result parts %v were too large to hold whole: only their beginning and end were checked, and they go on as that alone", spilled),
			map[string]any{"kind": "pii_partial", "parts": spilled})
	}
	if len(sc.found) == 0 {
		if content != nil {
			out := *res
			out.Content = content
			rec.Result = &out
		}
		return
	}
	rec.Notes = append(rec.Notes, sc.note(PIIResult))
	if errCopy != nil {
		rec.Error = errCopy
	}
	if sc.refused {
		rec.Result = nil
		rec.Error = &tool.Error{Kind: tool.KindPolicyViolation, Server: call.Server, Tool: call.Tool,
			Message: fmt.Sprintf("the result of %s/%s was withheld: it contains %s (pii rules refuse it)",
				call.Server, call.Tool, sc.describe(PIIRefuse))}
		return
	}
	if rec.Result != nil && (content != nil || smasked) {
		out := *res
		if content != nil {
			out.Content = content
		}
		out.Structured = structured
		rec.Result = &out
	}
}

// allMasked returns acts with every action mask: what a refused call's
// record keeps.
func allMasked(acts map[string]string) map[string]string {
	out := make(map[string]string, len(acts))
	for k := range acts {
		out[k] = PIIMask
	}
	return out
}

// piiFinding is what a note says of findings: the kind, where, what was
// done and how many times. Never the value.
type piiFinding struct {
	kind, path, action string
	count              int
}

// piiScanner scans the values of one direction of one call.
type piiScanner struct {
	det     piiDetector
	keys    *piiDetector // every kind: what a path may not show
	acts    map[string]string
	max     int
	found   []piiFinding // in the order met, at most max
	more    int          // findings beyond max
	refused bool
}

func (s *piiStage) scanner(acts map[string]string) *piiScanner {
	kinds := make(map[string]bool, len(acts))
	for k := range acts {
		kinds[k] = true
	}
	all := map[string]bool{}
	for _, k := range PIIKinds() {
		all[k] = true
	}
	return &piiScanner{det: piiDetector{kinds: kinds, regions: s.regions}, keys: &piiDetector{kinds: all, regions: s.regions},
		acts: acts, max: s.max}
}

// text scans one string at path, returning it with the findings whose
// action is mask masked, and whether it changed.
func (sc *piiScanner) text(s, path string) (string, bool) {
	if s == "" {
		return s, false
	}
	ms := sc.det.find(s)
	if len(ms) == 0 {
		return s, false
	}
	var mask []piiMatch
	for _, m := range ms {
		act := sc.acts[m.kind]
		sc.add(m.kind, path, act)
		switch act {
		case PIIMask:
			mask = append(mask, m)
		case PIIRefuse:
			sc.refused = true
		}
	}
	if len(mask) == 0 {
		return s, false
	}
	return maskPII(s, mask), true
}

func (sc *piiScanner) add(kind, path, action string) {
	for i := range sc.found {
		if f := &sc.found[i]; f.kind == kind && f.path == path {
			f.count++
			return
		}
	}
	if len(sc.found) >= sc.max {
		sc.more++
		return
	}
	sc.found = append(sc.found, piiFinding{kind: kind, path: path, action: action, count: 1})
}

// value scans a JSON value at path (a JSON pointer), copying maps and
// slices only along the path to a masked string; v is never modified.
// Keys are visited in sorted order, so the findings listed are the same
// from one call to the next.
func (sc *piiScanner) value(v any, path string) (any, bool) {
	switch x := v.(type) {
	case string:
		return sc.text(x, path)
	case map[string]any, []any:
		return rewriteChildren(x, true, func(k string, i int, e any) (any, bool) {
			if i >= 0 {
				return sc.value(e, path+"/"+strconv.Itoa(i))
			}
			return sc.value(e, path+"/"+escapePointer(sc.key(k)))
		})
	}
	return v, false
}

// key returns an object key as a path names it: with whatever any kind
// would find in it masked, whatever the rules, since a key can be personal
// data too ({"jane@example.org": "+44 20 7946 0958"}) and paths go into
// notes and errors. Keys themselves are not findings.
func (sc *piiScanner) key(k string) string {
	if ms := sc.keys.find(k); len(ms) > 0 {
		return maskPII(k, ms)
	}
	return k
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	if !strings.ContainsAny(k, "~/") {
		return k
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

// piiWords name the kinds in messages.
var piiWords = map[string]string{
	PIIEmail:  "an email address",
	PIIPhone:  "a phone number",
	PIICard:   "a payment card number",
	PIIIBAN:   "an IBAN",
	PIISecret: "a secret (an API key or token)",
}

// describe lists the findings whose action is action, in words: "an email
// address at /to, a phone number at /body".
func (sc *piiScanner) describe(action string) string {
	var parts []string
	for _, f := range sc.found {
		if f.action == action {
			parts = append(parts, piiWords[f.kind]+" at "+pointerText(f.path))
		}
	}
	if len(parts) == 0 {
		// Every finding with this action was past the bound.
		return "more than " + strconv.Itoa(sc.max) + " findings"
	}
	return strings.Join(parts, ", ")
}

func pointerText(p string) string {
	if p == "" {
		return "the top level"
	}
	return p
}

// piiDone says what was done, for notes.
var piiDone = map[string]string{PIIMask: "masked", PIIRefuse: "refused", PIINote: "noted"}

// note is the record's note of the findings of one direction.
func (sc *piiScanner) note(dir string) tool.Note {
	list := make([]any, len(sc.found))
	var words []string
	for i, f := range sc.found {
		list[i] = map[string]any{"kind": f.kind, "path": f.path, "action": f.action, "count": f.count}
		words = append(words, fmt.Sprintf("%s at %s (%s)", f.kind, pointerText(f.path), piiDone[f.action]))
	}
	data := map[string]any{"kind": "pii", "direction": dir, "findings": list}
	msg := dir + ": " + strings.Join(words, ", ")
	if sc.more > 0 {
		data["more"] = sc.more
		msg += fmt.Sprintf(", and %d more not listed", sc.more)
	}
	return tool.Note{Layer: NamePII, Message: msg, Data: data}
}
