package toolargs_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/toolmux/toolmux/internal/toolargs"
	"github.com/toolmux/toolmux/tool"
)

// wantErr checks that err is an invalid_tool_params error for tool "t"
// with exactly the message want, or that err is nil when want is "".
func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("error %v, want none", err)
		}
		return
	}
	var te *tool.Error
	if !errors.As(err, &te) {
		t.Errorf("error %v, want a *tool.Error saying %q", err, want)
		return
	}
	if te.Kind != tool.KindInvalidParams || te.Tool != "t" || te.Message != want {
		t.Errorf("error %+v, want kind %s, tool \"t\", message %q", te, tool.KindInvalidParams, want)
	}
}

func TestInvalid(t *testing.T) {
	a := toolargs.Args{Tool: "t"}
	wantErr(t, a.Invalid("argument %q is %d bytes", "x", 3), `argument "x" is 3 bytes`)
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name  string
		m     map[string]any
		known []string
		want  string
	}{
		{"none given", nil, []string{"a"}, ""},
		{"all known", map[string]any{"a": 1, "b": nil}, []string{"a", "b"}, ""},
		{"unknown sorted, known in order", map[string]any{"z": 1, "a": 2, "m": nil, "path": "x"}, []string{"path", "limit"},
			`t does not take the argument(s) "a", "m", "z"; its arguments are "path", "limit"`},
		{"quoted", map[string]any{"a b\"": 1}, []string{"x"},
			`t does not take the argument(s) "a b\""; its arguments are "x"`},
		{"takes none", map[string]any{"a": 1}, nil, `t does not take the argument(s) "a"; its arguments are `},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantErr(t, toolargs.Args{Tool: "t", M: c.m}.Check(c.known...), c.want)
		})
	}
}

func TestString(t *testing.T) {
	for _, c := range []struct {
		name     string
		v        any // absent: not in the map at all
		required bool
		want     string
		given    bool
		err      string
	}{
		{"absent optional", absent{}, false, "", false, ""},
		{"absent required", absent{}, true, "", false, `missing required argument "s" (a string)`},
		{"null optional", nil, false, "", false, ""},
		{"null required", nil, true, "", false, `missing required argument "s" (a string)`},
		{"empty optional", "", false, "", true, ""},
		{"empty required", "", true, "", false, `argument "s" must not be empty`},
		{"blank required", " \t", true, " \t", true, ""},
		{"value", "x y", true, "x y", true, ""},
		{"number", 1.0, false, "", false, `argument "s" must be a string, not a number`},
		{"json number", json.Number("1"), true, "", false, `argument "s" must be a string, not a number`},
		{"boolean", true, false, "", false, `argument "s" must be a string, not a boolean`},
		{"array", []any{"x"}, false, "", false, `argument "s" must be a string, not an array`},
		{"object", map[string]any{}, false, "", false, `argument "s" must be a string, not an object`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, given, err := with("s", c.v).String("s", c.required)
			wantErr(t, err, c.err)
			if got != c.want || given != c.given {
				t.Errorf("String = %q, %v; want %q, %v", got, given, c.want, c.given)
			}
		})
	}
}

// TestRequiredStrings covers the two readers of a required string that
// differ only in what they make of "" and of white space.
func TestRequiredStrings(t *testing.T) {
	nonBlank := func(a toolargs.Args) (string, error) { return a.NonBlank("s") }
	text := func(a toolargs.Args) (string, error) { return a.Text("s") }
	for _, c := range []struct {
		name string
		read func(toolargs.Args) (string, error)
		v    any
		want string
		err  string
	}{
		{"NonBlank absent", nonBlank, absent{}, "", `missing required argument "s" (a string)`},
		{"NonBlank null", nonBlank, nil, "", `missing required argument "s" (a string)`},
		{"NonBlank empty", nonBlank, "", "", `argument "s" must not be empty`},
		{"NonBlank blank", nonBlank, " \n\t", "", `argument "s" must not be empty`},
		{"NonBlank value", nonBlank, " x ", " x ", ""},
		{"NonBlank number", nonBlank, 3.0, "", `argument "s" must be a string, not a number`},
		{"Text absent", text, absent{}, "", `missing required argument "s" (a string; it may be empty)`},
		{"Text null", text, nil, "", `missing required argument "s" (a string; it may be empty)`},
		{"Text empty", text, "", "", ""},
		{"Text blank", text, "  ", "  ", ""},
		{"Text value", text, "x", "x", ""},
		{"Text boolean", text, false, "", `argument "s" must be a string, not a boolean`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.read(with("s", c.v))
			wantErr(t, err, c.err)
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestInt(t *testing.T) {
	for _, c := range []struct {
		name  string
		v     any
		least int
		want  int
		given bool
		err   string
	}{
		{"absent", absent{}, 1, 0, false, ""},
		{"null", nil, 1, 0, false, ""},
		{"float", 5.0, 1, 5, true, ""},
		{"float32", float32(7), 0, 7, true, ""},
		{"zero at least zero", 0.0, 0, 0, true, ""},
		{"negative least", -3.0, -5, -3, true, ""},
		{"below least", 0.0, 1, 0, false, `argument "n" must be at least 1, not 0`},
		{"negative", -2.0, 0, 0, false, `argument "n" must be at least 0, not -2`},
		{"large negative", -1e6, 0, 0, false, `argument "n" must be at least 0, not -1000000`},
		{"fraction", 2.5, 1, 0, false, `argument "n" must be an integer, not 2.5`},
		{"float32 fraction", float32(1.5), 1, 0, false, `argument "n" must be an integer, not 1.5`},
		{"NaN", math.NaN(), 1, 0, false, `argument "n" must be an integer, not NaN`},
		{"infinity", math.Inf(1), 1, 0, false, `argument "n" must be an integer, not +Inf`},
		{"huge float", 1e300, 1, min(1<<62, math.MaxInt), true, ""},
		{"json integer", json.Number("42"), 1, 42, true, ""},
		{"json whole float", json.Number("4.0"), 1, 4, true, ""},
		{"json exponent", json.Number("1e3"), 1, 1000, true, ""},
		{"json beyond int64", json.Number("1e30"), 1, min(1<<62, math.MaxInt), true, ""},
		{"json fraction", json.Number("4.5"), 1, 0, false, `argument "n" must be an integer, not 4.5`},
		{"json garbage", json.Number("x"), 1, 0, false, `argument "n" must be an integer, not x`},
		{"json below least", json.Number("0"), 1, 0, false, `argument "n" must be at least 1, not 0`},
		{"int", 3, 1, 3, true, ""},
		{"int8", int8(-3), -10, -3, true, ""},
		{"int16", int16(300), 1, 300, true, ""},
		{"int32", int32(70000), 1, 70000, true, ""},
		{"int64", int64(1) << 40, 1, min(1<<40, math.MaxInt), true, ""},
		{"uint", uint(9), 1, 9, true, ""},
		{"uint8", uint8(255), 1, 255, true, ""},
		{"uint16", uint16(65535), 1, 65535, true, ""},
		{"uint32", uint32(1) << 31, 1, min(1<<31, math.MaxInt), true, ""},
		{"uint64 beyond int64", uint64(math.MaxUint64), 1, math.MaxInt, true, ""},
		{"int below least", -1, 0, 0, false, `argument "n" must be at least 0, not -1`},
		{"string", "5", 1, 0, false, `argument "n" must be an integer, not a string`},
		{"boolean", true, 1, 0, false, `argument "n" must be an integer, not a boolean`},
		{"array", []any{1.0}, 1, 0, false, `argument "n" must be an integer, not an array`},
		{"object", map[string]any{}, 1, 0, false, `argument "n" must be an integer, not an object`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, given, err := with("n", c.v).Int("n", c.least)
			wantErr(t, err, c.err)
			if got != c.want || given != c.given {
				t.Errorf("Int = %d, %v; want %d, %v", got, given, c.want, c.given)
			}
		})
	}
}

func TestJSONType(t *testing.T) {
	type custom struct{}
	for _, c := range []struct {
		v    any
		want string
	}{
		{"x", "a string"},
		{true, "a boolean"},
		{1.5, "a number"},
		{float32(1), "a number"},
		{json.Number("1"), "a number"},
		{7, "a number"},
		{uint64(7), "a number"},
		{[]any{}, "an array"},
		{map[string]any{}, "an object"},
		{custom{}, "a toolargs_test.custom"},
	} {
		if got := toolargs.JSONType(c.v); got != c.want {
			t.Errorf("JSONType(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
}

// absent marks a test case whose argument is not in the map at all, as
// against one whose value is a JSON null.
type absent struct{}

// with returns the arguments of tool "t" holding name = v, or nothing when
// v is absent.
func with(name string, v any) toolargs.Args {
	m := map[string]any{}
	if _, ok := v.(absent); !ok {
		m[name] = v
	}
	return toolargs.Args{Tool: "t", M: m}
}
