package stream

import (
	"slices"
	"strconv"
	"strings"

	"github.com/toolmux/toolmux/internal/jsonenc"
	"github.com/toolmux/toolmux/internal/jsonfloat"
)

// The payloads a tool call produces (four or five events per call) are
// encoded by hand rather than by encoding/json's reflection, byte for byte
// as encoding/json writes them (HTML-safe strings, its number formats,
// sorted map keys): FuzzAppendJSON holds them to it. A value of a type
// not handled here makes the whole payload go through encoding/json.

// jsonAppender is a payload that appends its JSON to b; ok is false when
// it holds a value only encoding/json knows how to write.
type jsonAppender interface {
	appendJSON(b []byte) (out []byte, ok bool)
}

// encodedArgs are arguments already encoded by the hub, put in a payload
// as they are.
type encodedArgs []byte

// MarshalJSON returns the bytes: they are JSON already.
func (a encodedArgs) MarshalJSON() ([]byte, error) { return a, nil }

func (r resultInput) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"result":`...)
	b = appendString(b, r.Result)
	return append(b, '}'), true
}

// appendCallHead opens an object with the fields that name a scheduled
// call, which several payloads start with.
func appendCallHead(b []byte, callID, batch string, index int, server, tool string) []byte {
	b = append(b, `{"call_id":`...)
	b = appendString(b, callID)
	b = append(b, `,"batch":`...)
	b = appendString(b, batch)
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, `,"server":`...)
	b = appendString(b, server)
	b = append(b, `,"tool":`...)
	return appendString(b, tool)
}

func (d ToolStateData) appendJSON(b []byte) ([]byte, bool) {
	b = appendCallHead(b, d.CallID, d.Batch, d.Index, d.Server, d.Tool)
	if d.Caller != "" {
		b = append(b, `,"caller":`...)
		b = appendString(b, d.Caller)
	}
	b = append(b, `,"state":`...)
	b = appendString(b, d.State)
	if d.Message != "" {
		b = append(b, `,"message":`...)
		b = appendString(b, d.Message)
	}
	if d.Kind != "" {
		b = append(b, `,"kind":`...)
		b = appendString(b, d.Kind)
	}
	if d.PreviousState != "" {
		b = append(b, `,"previous_state":`...)
		b = appendString(b, d.PreviousState)
	}
	var ok bool
	b = append(b, `,"previous_ms":`...)
	if b, ok = appendFloat(b, d.PreviousMS); !ok {
		return b, false
	}
	b = append(b, `,"total_ms":`...)
	if b, ok = appendFloat(b, d.TotalMS); !ok {
		return b, false
	}
	return append(b, '}'), true
}

func (d ToolCallData) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"tool_call_id":`...)
	b = appendString(b, d.ToolCallID)
	b = append(b, `,"tool_name":`...)
	b = appendString(b, d.ToolName)
	var ok bool
	if d.ToolInput != nil {
		b = append(b, `,"tool_input":`...)
		if b, ok = appendValue(b, d.ToolInput); !ok {
			return b, false
		}
	}
	if d.DeltaInput != nil {
		b = append(b, `,"delta_input":`...)
		if b, ok = appendValue(b, d.DeltaInput); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func (d ApprovalResolvedData) appendJSON(b []byte) ([]byte, bool) {
	b = appendCallHead(b, d.CallID, d.Batch, d.Index, d.Server, d.Tool)
	b = append(b, `,"outcome":`...)
	b = appendString(b, d.Outcome)
	if d.Message != "" {
		b = append(b, `,"message":`...)
		b = appendString(b, d.Message)
	}
	b = append(b, `,"waited_ms":`...)
	b, ok := appendFloat(b, d.WaitedMS)
	if d.Caller != "" {
		b = append(b, `,"caller":`...)
		b = appendString(b, d.Caller)
	}
	if d.AnsweredBy != "" {
		b = append(b, `,"answered_by":`...)
		b = appendString(b, d.AnsweredBy)
	}
	return append(b, '}'), ok
}

func (d MessageData) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"message_id":`...)
	b = appendString(b, d.MessageID)
	b = append(b, `,"delta":{"content":`...)
	b = appendString(b, d.Delta.Content)
	return append(b, `}}`...), true
}

// appendValue appends a JSON-like value (what encoding/json decodes into,
// and Go's integers): ok is false for anything else.
func appendValue(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendString(b, x), true
	case bool:
		return strconv.AppendBool(b, x), true
	case float64:
		return appendFloat(b, x)
	case int:
		return strconv.AppendInt(b, int64(x), 10), true
	case int64:
		return strconv.AppendInt(b, x, 10), true
	case int32:
		return strconv.AppendInt(b, int64(x), 10), true
	case uint64:
		return strconv.AppendUint(b, x, 10), true
	case encodedArgs:
		return append(b, x...), true
	case resultInput:
		return x.appendJSON(b)
	case []any:
		if x == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendValue(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		if x == nil {
			return append(b, "null"...), true
		}
		var buf [16]string
		keys := buf[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, strings.Compare)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = appendValue(b, x[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

// appendFloat appends f as encoding/json writes a float64; NaN and the
// infinities, which JSON cannot hold, are not ok.
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if !jsonfloat.Finite(f) {
		return b, false
	}
	return jsonfloat.Append(b, f, 64), true
}

// appendString appends s as a JSON string as encoding/json writes it.
func appendString(b []byte, s string) []byte { return jsonenc.AppendString(b, s) }
