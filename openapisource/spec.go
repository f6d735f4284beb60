package openapisource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// SpecError says that the spec could not be had or is not a usable
// OpenAPI 3 document: where it came from, what step failed and why. The
// cause is kept (errors.As finds kin-openapi's typed validation errors
// through it).
type SpecError struct {
	// Spec is the file or URL the spec was read from.
	Spec string
	// Step is what failed: "read" (the file or URL could not be read, or
	// was over the size bound), "parse" (not an OpenAPI document: bad JSON
	// or YAML, an unresolvable $ref) or "validate" (an OpenAPI document
	// that breaks the specification; the cause names the element).
	Step string
	Err  error
}

func (e *SpecError) Error() string {
	var what string
	switch e.Step {
	case "read":
		what = "could not be read"
	case "parse":
		what = "is not an OpenAPI 3 document"
	default:
		what = "does not validate"
	}
	return fmt.Sprintf("OpenAPI spec %s %s: %v", shown(e.Spec), what, e.Err)
}

// shown is a spec's name as messages write it: a URL without its
// password and query, which may hold a key.
func shown(spec string) string {
	u, err := url.Parse(spec)
	if !isURL(spec) || err != nil {
		return spec
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	return u.Redacted()
}

func (e *SpecError) Unwrap() error { return e.Err }

// errTooLarge is the cause of a spec or response over its bound.
var errTooLarge = errors.New("over the size bound")

// isURL reports whether spec names an http(s) URL rather than a file.
func isURL(spec string) bool {
	return strings.HasPrefix(spec, "http://") || strings.HasPrefix(spec, "https://")
}

// readSpec reads the spec's bytes from its file or URL, at most max bytes;
// a URL is fetched with client, within ctx.
func readSpec(ctx context.Context, client *http.Client, spec string, max int64) ([]byte, error) {
	var r io.Reader
	if isURL(spec) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json, application/yaml;q=0.9, */*;q=0.5")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return nil, fmt.Errorf("GET answered %s", resp.Status)
		}
		r = resp.Body
	} else {
		f, err := os.Open(spec)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w: more than %d bytes (max_spec_bytes)", errTooLarge, max)
	}
	return data, nil
}

// loadSpec reads, parses and validates the spec. External references
// ($ref to another file or URL) are refused: a spec fetched from a URL
// must not make toolmux read local files or reach other hosts.
func loadSpec(ctx context.Context, client *http.Client, spec string, max int64) (*openapi3.T, *url.URL, error) {
	data, err := readSpec(ctx, client, spec, max)
	if err != nil {
		return nil, nil, &SpecError{Spec: spec, Step: "read", Err: err}
	}
	loader := openapi3.NewLoader()
	loader.Context = ctx
	loader.IsExternalRefsAllowed = false
	var loc *url.URL
	if isURL(spec) {
		loc, _ = url.Parse(spec)
	}
	var doc *openapi3.T
	if loc != nil {
		doc, err = loader.LoadFromDataWithPath(data, loc)
	} else {
		doc, err = loader.LoadFromData(data)
	}
	if err != nil {
		return nil, nil, &SpecError{Spec: spec, Step: "parse", Err: err}
	}
	if doc.OpenAPI == "" || !strings.HasPrefix(doc.OpenAPI, "3.") {
		return nil, nil, &SpecError{Spec: spec, Step: "parse", Err: fmt.Errorf("openapi version %q: only OpenAPI 3 is read (convert a Swagger 2 spec first)", doc.OpenAPI)}
	}
	// Examples are documentation: one that does not fit its schema says
	// nothing about the calls, and real specs often have such.
	if err := doc.Validate(ctx, openapi3.DisableExamplesValidation()); err != nil {
		return nil, nil, &SpecError{Spec: spec, Step: "validate", Err: err}
	}
	return doc, loc, nil
}

// baseURL is the URL the API's paths are relative to: configured, else
// the spec's first server with its variables at their defaults, resolved
// against the spec's own URL when it is relative.
func baseURL(configured string, doc *openapi3.T, specURL *url.URL) (*url.URL, error) {
	raw := configured
	if raw == "" {
		if len(doc.Servers) == 0 || doc.Servers[0] == nil {
			return nil, errors.New("the spec names no server: set base_url")
		}
		s := doc.Servers[0]
		raw = s.URL
		for name, v := range s.Variables {
			if v != nil {
				raw = strings.ReplaceAll(raw, "{"+name+"}", v.Default)
			}
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("base URL %q: %v", raw, err)
	}
	if !u.IsAbs() {
		if specURL == nil {
			return nil, fmt.Errorf("the spec's server URL %q is relative and the spec is a file: set base_url", raw)
		}
		u = specURL.ResolveReference(u)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("base URL %q is not an http(s) URL", raw)
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}
