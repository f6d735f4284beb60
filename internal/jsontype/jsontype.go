// Package jsontype names JSON types in the messages of decoding errors:
// what a Go type is read from, and what encoding/json found instead (a
// json.UnmarshalTypeError's Type and Value), so that every place that
// explains such an error says it the same way (funcsource's arguments,
// the gateway's MCP tasks params).
package jsontype

import (
	"fmt"
	"reflect"
)

// Of names the JSON type a Go type is read from: "a string", "an
// object", "an integer from 0 to 255".
func Of(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Int8, reflect.Int16, reflect.Int32:
		// The decoder refuses a number outside the type's range; say it.
		return fmt.Sprintf("an integer from %d to %d", -(int64(1) << (t.Bits() - 1)), int64(1)<<(t.Bits()-1)-1)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return fmt.Sprintf("an integer from 0 to %d", uint64(1)<<t.Bits()-1)
	case reflect.Uint, reflect.Uint64, reflect.Uintptr:
		return "an integer not below 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

// Found describes what the decoder found, from a json.UnmarshalTypeError's
// Value: a type ("a string") or a number that does not fit ("number 1.5").
func Found(v string) string {
	switch v {
	case "array", "object":
		return "an " + v
	case "string", "bool", "number":
		if v == "bool" {
			v = "boolean"
		}
		return "a " + v
	}
	return v
}
