// Package petstore is a small REST API and its OpenAPI 3 description,
// for tests of the OpenAPI source: path, query and header parameters, a
// JSON body, a 404, a 500 and a long answer. Every request is checked
// against the spec by kin-openapi's request validator before it is
// answered, so a request the source encodes wrongly gets a 400 naming
// what was wrong.
package petstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// Spec is the API's description. Its server is a host that does not
// exist: configure base_url as the test server's BaseURL.
//
//go:embed petstore.yaml
var Spec []byte

// Server is the API on a real socket.
type Server struct {
	*httptest.Server
	// BaseURL is where the API's paths are: URL + "/v1".
	BaseURL string
	// SpecURL serves the spec, its server given as the relative "/v1".
	SpecURL string
	// SpecFile is the spec written to a file of the test's.
	SpecFile string

	mu      sync.Mutex
	headers []http.Header
	pets    map[string]map[string]any
	next    int
}

// New starts the API; big is the size of the answer of GET /big. It stops
// with the test.
func New(t testing.TB, big int) *Server {
	t.Helper()
	s := &Server{pets: map[string]map[string]any{
		"p1":    {"id": "p1", "name": "Rex", "tag": "dog"},
		"p2":    {"id": "p2", "name": "Tom", "tag": "cat"},
		"x/y z": {"id": "x/y z", "name": "Odd", "tag": nil},
	}, next: 3}
	mux := http.NewServeMux()
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	s.BaseURL = s.URL + "/v1"
	s.SpecURL = s.URL + "/openapi.yaml"
	s.SpecFile = filepath.Join(t.TempDir(), "petstore.yaml")
	if err := os.WriteFile(s.SpecFile, Spec, 0o600); err != nil {
		t.Fatal(err)
	}
	served := strings.Replace(string(Spec), `"{scheme}://pets.example.invalid/v1"
    variables:
      scheme:
        default: https`, `"/v1"`, 1)
	if served == string(Spec) {
		t.Fatal("petstore: the spec's server was not replaced")
	}
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		w.Header().Set("Content-Type", "application/yaml")
		fmt.Fprint(w, served)
	})

	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(Spec)
	if err != nil {
		t.Fatal(err)
	}
	// The router matches paths relative to no server, as the server
	// sees them: without /v1, and escaped, so that a value with a slash
	// stays one segment.
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/v1/", s.validated(router, s.api(big)))
	return s
}

// Headers returns the headers of every request received, in order.
func (s *Server) Headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

func (s *Server) record(r *http.Request) {
	s.mu.Lock()
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()
}

// validated answers 400 to a request that does not fit the spec.
func (s *Server) validated(router routers.Router, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		rr := r.Clone(r.Context())
		rr.URL.Path = strings.TrimPrefix(r.URL.EscapedPath(), "/v1")
		rr.URL.RawPath = ""
		route, params, err := router.FindRoute(rr)
		if err == nil {
			err = openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
				Request: r, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
			})
		}
		if err != nil {
			http.Error(w, "request does not fit the spec: "+err.Error(), http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) api(big int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/pets", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit := 100
		if l := q.Get("limit"); l != "" {
			fmt.Sscan(l, &limit)
		}
		tags := q["tags"]
		s.mu.Lock()
		pets := []any{}
		for _, id := range []string{"p1", "p2", "x/y z"} {
			p := s.pets[id]
			if p == nil || len(pets) >= limit {
				continue
			}
			if len(tags) > 0 {
				tag, _ := p["tag"].(string)
				if !contains(tags, tag) {
					continue
				}
			}
			pets = append(pets, p)
		}
		s.mu.Unlock()
		reply(w, http.StatusOK, map[string]any{"pets": pets, "request_id": r.Header.Get("X-Request-Id")})
	})
	mux.HandleFunc("POST /v1/pets", func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		p["id"] = fmt.Sprintf("p%d", s.next)
		s.next++
		s.pets[p["id"].(string)] = p
		s.mu.Unlock()
		reply(w, http.StatusCreated, p)
	})
	mux.HandleFunc("GET /v1/pets/{petId}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		p := s.pets[r.PathValue("petId")]
		s.mu.Unlock()
		if p == nil {
			reply(w, http.StatusNotFound, map[string]any{"error": "no pet " + r.PathValue("petId")})
			return
		}
		reply(w, http.StatusOK, p)
	})
	mux.HandleFunc("DELETE /v1/pets/{petId}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		delete(s.pets, r.PathValue("petId"))
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/crash", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom: the database is on fire", http.StatusInternalServerError)
	})
	mux.HandleFunc("GET /v1/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data":"%s"}`, strings.Repeat("x", max(0, big-len(`{"data":""}`))))
	})
	return mux
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
