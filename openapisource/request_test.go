package openapisource

import (
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// Each style writes a parameter as the OpenAPI specification's examples
// do ("Style Examples"); a separator inside an item is escaped, the one
// between items is not.
func TestStyles(t *testing.T) {
	arr := []any{"blue", "black", "a,b"}
	obj := map[string]any{"R": 100.0, "G": 200.0}
	for _, c := range []struct {
		in, style string
		explode   bool
		v         any
		want      string
	}{
		{"path", "simple", false, arr, "blue,black,a%2Cb"},
		{"path", "simple", true, obj, "G=200,R=100"},
		{"path", "simple", false, obj, "G,200,R,100"},
		{"path", "label", false, arr, ".blue,black,a%2Cb"},
		{"path", "label", true, arr, ".blue.black.a%2Cb"},
		{"path", "matrix", false, "x y", ";color=x%20y"},
		{"path", "matrix", true, arr, ";color=blue;color=black;color=a%2Cb"},
		{"path", "matrix", true, obj, ";G=200;R=100"},
		{"query", "form", true, arr, "color=blue&color=black&color=a%2Cb"},
		{"query", "form", false, arr, "color=blue,black,a%2Cb"},
		{"query", "form", true, obj, "G=200&R=100"},
		{"query", "form", false, obj, "color=G,200,R,100"},
		{"query", "spaceDelimited", false, arr, "color=blue%20black%20a%2Cb"},
		{"query", "pipeDelimited", false, arr, "color=blue|black|a%2Cb"},
		{"query", "deepObject", true, obj, "color[G]=200&color[R]=100"},
		{"query", "form", true, 1e21, "color=1000000000000000000000"},
		{"query", "form", true, true, "color=true"},
	} {
		tmpl := "/c"
		if c.in == openapi3.ParameterInPath {
			tmpl = "/c/{color}"
		}
		op := &operation{path: tmpl, params: []param{{key: "color", name: "color", in: c.in, style: c.style, explode: c.explode}}}
		r, err := op.build("", map[string]any{"color": c.v})
		if err != nil {
			t.Errorf("%s %s explode=%v %v: %v", c.in, c.style, c.explode, c.v, err)
			continue
		}
		got := r.query
		if c.in == openapi3.ParameterInPath {
			got = r.path[len("/c/"):]
		}
		if got != c.want {
			t.Errorf("%s %s explode=%v %v: %q, want %q", c.in, c.style, c.explode, c.v, got, c.want)
		}
	}
}
