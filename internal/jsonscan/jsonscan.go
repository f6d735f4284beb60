// Package jsonscan reads what toolmux needs to know of a JSON-RPC message
// before handing it on — how deeply it nests, and its top-level id,
// method, result and error — in one pass over the bytes that allocates
// nothing, instead of decoding the message a second time.
//
// It does not validate: Scan reports what it saw, and whether the
// brackets and strings it walked were closed; a malformed message is
// still the decoder's to refuse.
package jsonscan

// Message is what Scan saw of a message.
type Message struct {
	// Depth is the deepest nesting of objects and arrays (an object alone
	// is 1).
	Depth int
	// Object says the message is a JSON object (its first non-space byte
	// is '{'); Array, an array (a batch).
	Object, Array bool
	// Closed says every string, object and array the scan opened was
	// closed, and nothing but space follows the value (a bare word counts
	// as a value: literals are not checked).
	Closed bool
	// ID and Method are the raw values of the top-level "id" and "method"
	// (a string with its quotes and escapes, a number, a literal, or the
	// whole object or array); nil when absent.
	ID, Method []byte
	// HasResult and HasError say the top-level object has those keys.
	HasResult, HasError bool
	// Params and Result are the raw values of the top-level "params" and
	// "result" (the last, when a key is repeated); nil when absent.
	Params, Result []byte
}

// Scan reads b. Only the top-level object's keys are looked at; keys
// written with escapes are not recognised.
func Scan(b []byte) Message {
	var m Message
	i := skipSpace(b, 0)
	if i == len(b) {
		return m
	}
	m.Object, m.Array = b[i] == '{', b[i] == '['
	var (
		depth     int
		key       []byte // the last key read at depth 1
		wantValue bool   // at depth 1, after a key's colon
		valStart  = -1   // where the value of key began
	)
	end := func(j int) { // the value of key ended before j
		if valStart < 0 {
			return
		}
		v := trimSpace(b[valStart:j])
		switch string(key) {
		case "id":
			m.ID = v
		case "method":
			m.Method = v
		case "params":
			m.Params = v
		case "result":
			m.HasResult = true
			m.Result = v
		case "error":
			m.HasError = true
		}
		valStart = -1
	}
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(b) {
				return m // an unclosed string
			}
			if depth == 0 {
				m.Closed = skipSpace(b, j+1) == len(b)
				return m
			}
			if depth == 1 && m.Object && !wantValue && valStart < 0 {
				key = b[i+1 : j]
			} else if depth == 1 && wantValue {
				valStart, wantValue = i, false
			}
			i = j
		case '{', '[':
			if depth == 1 && wantValue {
				valStart, wantValue = i, false
			}
			depth++
			m.Depth = max(m.Depth, depth)
		case '}', ']':
			if depth == 1 {
				end(i)
			}
			depth--
			if depth < 0 {
				return m
			}
			if depth == 0 {
				m.Closed = skipSpace(b, i+1) == len(b)
				return m
			}
		case ':':
			if depth == 1 {
				wantValue = true
			}
		case ',':
			if depth == 1 {
				end(i)
				wantValue = false
			}
		case ' ', '\t', '\n', '\r':
		default:
			if depth == 1 && wantValue {
				valStart, wantValue = i, false
			}
			if depth == 0 {
				// A scalar at the top: closed when nothing follows it.
				j := i
				for j < len(b) && !isSpace(b[j]) {
					j++
				}
				m.Closed = skipSpace(b, j) == len(b)
				return m
			}
		}
	}
	return m
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func trimSpace(b []byte) []byte {
	i, j := 0, len(b)
	for i < j && isSpace(b[i]) {
		i++
	}
	for j > i && isSpace(b[j-1]) {
		j--
	}
	return b[i:j]
}
