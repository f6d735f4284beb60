package pipeline

import (
	"fmt"

	"github.com/toolmux/toolmux/internal/bound"
	"github.com/toolmux/toolmux/tool"
)

// DefaultMaxRecordBytes is the default bound on a call's record: twice the
// default bound on arguments (validate.max_argument_bytes), so that a call
// within the other limits, whose result the truncate middleware has cut
// for the model, is recorded whole.
const DefaultMaxRecordBytes = 2 << 20

// Limits bound what a call may bring into the pipeline and what its record
// keeps. Zero values mean the defaults.
type Limits struct {
	// MaxDepth is the deepest nesting of arguments accepted: a call whose
	// arguments nest deeper is refused with invalid_tool_params before any
	// middleware walks them, and values nested deeper in a record are
	// replaced by a marker. 0 means tool.DefaultMaxDepth.
	MaxDepth int
	// MaxRecordBytes bounds the record of a call (about its compact JSON
	// size), which is what the recorder stores and what the caller gets
	// back: when a record would be larger, its longest strings are cut
	// (head and tail kept around a marker) until it fits, binary parts that
	// do not fit are replaced by a text part saying what they were, and a
	// note says what was done. 0 means DefaultMaxRecordBytes.
	MaxRecordBytes int
}

func (l Limits) withDefaults() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = tool.DefaultMaxDepth
	}
	if l.MaxRecordBytes <= 0 {
		l.MaxRecordBytes = DefaultMaxRecordBytes
	}
	return l
}

// WithLimits sets the limits on arguments and records.
func WithLimits(l Limits) Option { return func(o *options) { o.limits = l } }

// shallow returns args with everything nested deeper than max levels
// replaced by a marker, for the record of a call refused for its depth:
// nothing after the refusal may walk the whole of them.
func shallow(args map[string]any, max int) map[string]any {
	out, _ := bound.Cut(args, -1, max, nil)
	m, _ := out.(map[string]any)
	return m
}

// fitRecord returns rec, or a copy of it cut to fit the limits: its longest
// strings cut to one length (water-filling, so that a huge argument does
// not starve the result of room), values nested deeper than l.MaxDepth
// replaced by a marker, binary data that does not fit replaced by a text
// part saying what it was. rec itself is not modified.
func fitRecord(rec *tool.Record, l Limits) *tool.Record {
	f := bound.Fitter{MaxDepth: l.MaxDepth}
	f.Fixed(256) // ids, names, times, counts
	f.Value(rec.Arguments)
	if r := rec.Result; r != nil {
		for _, c := range r.Content {
			f.Fixed(64 + len(c.URI) + len(c.Name) + len(c.Title) + len(c.MIMEType))
			f.String(c.Text)
			f.String(c.Description)
			f.Fixed(len(c.Data) * 4 / 3)
			if c.Resource != nil {
				f.String(c.Resource.Text)
				f.Fixed(len(c.Resource.URI) + len(c.Resource.Blob)*4/3)
				f.Value(c.Resource.Meta)
			}
			f.Value(c.Meta)
		}
		f.Value(r.Structured)
		f.Value(r.Meta)
	}
	if e := rec.Error; e != nil {
		f.String(e.Message)
		f.String(e.Detail)
		f.Fixed(len(e.Suggestion))
	}
	for _, n := range rec.Notes {
		f.String(n.Message)
		f.Value(n.Data)
	}
	for _, s := range rec.Instructions {
		f.String(s)
	}
	capLen := f.Cap(l.MaxRecordBytes)
	if capLen < 0 && !tooDeep(rec, l.MaxDepth) {
		return rec
	}
	budget := l.MaxRecordBytes
	c := recordCutter{cap: capLen, depth: l.MaxDepth, budget: &budget}
	out := *rec
	out.Arguments = c.object(rec.Arguments)
	if r := rec.Result; r != nil {
		res := *r
		res.Content = make([]tool.Content, len(r.Content))
		for i, part := range r.Content {
			res.Content[i] = c.content(part)
		}
		res.Structured = c.value(r.Structured)
		res.Meta = c.object(r.Meta)
		out.Result = &res
	}
	if e := rec.Error; e != nil {
		ne := *e
		ne.Message, ne.Detail = c.str(e.Message), c.str(e.Detail)
		out.Error = &ne
	}
	if len(rec.Notes) > 0 {
		out.Notes = make([]tool.Note, len(rec.Notes))
		for i, n := range rec.Notes {
			n.Message = c.str(n.Message)
			n.Data = c.object(n.Data)
			out.Notes[i] = n
		}
	}
	if len(rec.Instructions) > 0 {
		out.Instructions = make([]string, len(rec.Instructions))
		for i, s := range rec.Instructions {
			out.Instructions[i] = c.str(s)
		}
	}
	if c.cut {
		msg := fmt.Sprintf("the record was cut to fit limits.max_record_bytes (%d bytes)", l.MaxRecordBytes)
		if capLen >= 0 {
			msg += fmt.Sprintf(": strings longer than %d bytes keep their start and end around a marker", capLen)
		}
		out.Notes = append(out.Notes, tool.Note{Layer: "limits", Message: msg,
			Data: map[string]any{"max_record_bytes": l.MaxRecordBytes, "max_string_bytes": capLen, "max_depth": l.MaxDepth}})
	}
	return &out
}

// tooDeep reports whether anything in rec nests deeper than max.
func tooDeep(rec *tool.Record, max int) bool {
	deep := func(v any) bool { return v != nil && tool.Depth(v, max) > max }
	if deep(rec.Arguments) {
		return true
	}
	if r := rec.Result; r != nil {
		if deep(r.Structured) || deep(r.Meta) {
			return true
		}
		for _, c := range r.Content {
			if deep(c.Meta) {
				return true
			}
		}
	}
	for _, n := range rec.Notes {
		if deep(n.Data) {
			return true
		}
	}
	return false
}

// recordCutter applies one cap, depth and running budget to every part of
// a record.
type recordCutter struct {
	cap, depth int
	budget     *int
	cut        bool
}

func (c *recordCutter) str(s string) string {
	if c.cap >= 0 {
		if out, cut := bound.String(s, c.cap); cut {
			c.cut = true
			s = out
		}
	}
	*c.budget -= len(s)
	return s
}

func (c *recordCutter) value(v any) any {
	if v == nil {
		return nil
	}
	out, cut := bound.Cut(v, c.cap, c.depth, c.budget)
	c.cut = c.cut || cut
	return out
}

func (c *recordCutter) object(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out, _ := c.value(m).(map[string]any)
	return out
}

// content cuts one part. Binary data is kept or dropped whole: half an
// image is no image.
func (c *recordCutter) content(part tool.Content) tool.Content {
	part.Text = c.str(part.Text)
	part.Description = c.str(part.Description)
	part.Meta = c.object(part.Meta)
	if n := len(part.Data) * 4 / 3; n > 0 {
		if c.cap >= 0 && n > c.cap {
			c.cut = true
			return tool.Content{Type: tool.ContentText, Text: fmt.Sprintf(
				"[%s %s of %d bytes cut by toolmux: larger than the record may hold (limits.max_record_bytes)]",
				part.Type, part.MIMEType, len(part.Data))}
		}
		*c.budget -= n
	}
	if r := part.Resource; r != nil {
		rc := *r
		rc.Text = c.str(r.Text)
		rc.Meta = c.object(r.Meta)
		if n := len(r.Blob) * 4 / 3; n > 0 && c.cap >= 0 && n > c.cap {
			c.cut = true
			rc.Blob = nil
			rc.Text = fmt.Sprintf("[blob %s of %d bytes cut by toolmux: larger than the record may hold (limits.max_record_bytes)]",
				r.MIMEType, len(r.Blob))
		}
		part.Resource = &rc
	}
	return part
}
