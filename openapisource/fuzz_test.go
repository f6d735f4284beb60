package openapisource

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/toolmux/toolmux/internal/petstore"
)

// FuzzBuildRequest: whatever the arguments, a path parameter's value stays
// in its one segment and comes back whole when unescaped, query values
// come back whole from the encoded query, and a header value never holds
// a line break; or the arguments are refused with an ArgumentError.
func FuzzBuildRequest(f *testing.F) {
	doc, err := openapi3.NewLoader().LoadFromData(petstore.Spec)
	if err != nil {
		f.Fatal(err)
	}
	ops, _ := operations("pets", doc, nil, nil, DefaultMaxSchemaNodes)
	byName := map[string]*operation{}
	for _, op := range ops {
		byName[op.tool.Name] = op
	}
	get, list := byName["getPet"], byName["listPets"]
	for _, seed := range [][3]string{{"p1", "dog", "r-1"}, {"x/y z", "a,b", "a\r\nb"}, {"..", "&x=1", ""}, {"%2F", "#", "é"}, {"a?b#c", " ", "\x00"}} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, id, tag, header string) {
		r, err := get.build("/v1", map[string]any{"petId": id})
		var ae *ArgumentError
		switch {
		case err != nil && !errors.As(err, &ae):
			t.Fatalf("getPet %q: untyped error %v", id, err)
		case err == nil:
			seg, ok := strings.CutPrefix(r.path, "/v1/pets/")
			if !ok || strings.Contains(seg, "/") {
				t.Fatalf("getPet %q: path %q leaves its segment", id, r.path)
			}
			if got, err := url.PathUnescape(seg); err != nil || got != id {
				t.Fatalf("getPet %q: segment %q unescapes to %q (%v)", id, seg, got, err)
			}
		}
		r, err = list.build("/v1", map[string]any{"tags": []any{tag, "z"}, "X-Request-Id": header})
		switch {
		case err != nil && !errors.As(err, &ae):
			t.Fatalf("listPets: untyped error %v", err)
		case err == nil:
			q, err := url.ParseQuery(r.query)
			if err != nil || !slices.Equal(q["tags"], []string{tag, "z"}) || len(q) != 1 {
				t.Fatalf("tags [%q z]: query %q parses to %v (%v)", tag, r.query, q, err)
			}
			if strings.ContainsAny(r.header["X-Request-Id"], "\r\n\x00") {
				t.Fatalf("header %q sent", r.header["X-Request-Id"])
			}
		}
	})
}
