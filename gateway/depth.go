package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// sdkMaxDepth is the go-sdk's bound on the nesting of a whole MCP message,
// which it enforces by answering a bare 400 its client shows as "Bad
// Request".
const sdkMaxDepth = 1000

// messageDepth returns how deeply a JSON message nests, and the raw value
// of its top-level "id" when it is a scalar, in one pass that holds
// nothing of the message.
func messageDepth(b []byte) (depth int, id json.RawMessage) {
	var (
		cur        int
		key        []byte // the last key at depth 1
		afterColon bool
	)
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if cur == 1 && !afterColon {
				key = b[i+1 : min(j, len(b))]
			} else if cur == 1 && afterColon && string(key) == "id" {
				id = b[i:min(j+1, len(b))]
			}
			afterColon = false
			i = j
		case '{', '[':
			cur++
			depth = max(depth, cur)
			afterColon = false
		case '}', ']':
			cur--
		case ':':
			afterColon = true
		case ',':
			afterColon = false
		default:
			if cur == 1 && afterColon && string(key) == "id" && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				j := i
				for j < len(b) && b[j] != ',' && b[j] != '}' {
					j++
				}
				if _, err := strconv.ParseFloat(string(bytes.TrimSpace(b[i:j])), 64); err == nil {
					id = b[i:j]
				}
				afterColon = false
				i = j - 1
			}
		}
	}
	return depth, id
}
