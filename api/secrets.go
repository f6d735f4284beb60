package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/vault"
)

// Users' own secrets for the servers that take them (a server's auth
// section of kind user_secrets, docs/identity.md "On whose behalf"): each
// caller sets, lists and deletes their own, and only their own: the owner
// is always the caller of the request (identity.Caller.Key), so another's
// entry cannot even be named. A value goes in, never out.

// SecretVault is where the secrets are kept: a *vault.Vault.
type SecretVault interface {
	PutSecret(ctx context.Context, owner, server, secret string, value []byte) error
	Delete(ctx context.Context, owner, name string) error
	List(ctx context.Context, owner string) ([]vault.Info, error)
}

// Secrets is what the /api/secrets routes need.
type Secrets struct {
	Vault SecretVault
	// Needed returns, by server, the names of the secrets each user sets
	// (read at every request: a reload changes them).
	Needed func() map[string][]string
	// MaxValueBytes bounds a value (vault.max_value_bytes).
	MaxValueBytes int
	// Changed is told when a caller set or deleted a secret of a server,
	// so that their connection to it is opened again with it (nil: not).
	Changed func(owner, server string)
}

// SecretInfo is what GET /api/secrets says of one secret: never its
// value.
type SecretInfo struct {
	Server string `json:"server"`
	Name   string `json:"name"`
	// Set says whether the caller has set it; Updated, when.
	Set     bool      `json:"set"`
	Updated time.Time `json:"updated,omitzero"`
	// Configured is false for a secret the caller set for a server that
	// no longer takes it (deleting it is all it is good for).
	Configured bool `json:"configured"`
}

func (s *server) secretsRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/secrets", s.listSecrets)
	mux.HandleFunc("PUT /api/secrets/{server}/{name}", s.putSecret)
	mux.HandleFunc("DELETE /api/secrets/{server}/{name}", s.deleteSecret)
}

// secretOwner is the owner of the request's secrets, or false after an
// answer saying why there is none.
func (s *server) secretOwner(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.o.Secrets == nil || s.o.Secrets.Vault == nil {
		writeError(w, http.StatusNotFound, "not_found", "this toolmux keeps no users' secrets: it has no vault (a data directory is needed, docs/vault.md)")
		return "", false
	}
	c := identity.From(r.Context())
	if c == nil {
		writeError(w, http.StatusForbidden, "no_caller", "users' secrets are each caller's own, and this request has no caller: configure authentication (auth: or API keys, docs/identity.md)")
		return "", false
	}
	return c.Key(), true
}

func (s *server) needed() map[string][]string {
	if s.o.Secrets.Needed == nil {
		return nil
	}
	return s.o.Secrets.Needed()
}

func (s *server) listSecrets(w http.ResponseWriter, r *http.Request) {
	owner, ok := s.secretOwner(w, r)
	if !ok {
		return
	}
	infos, err := s.o.Secrets.Vault.List(r.Context(), owner)
	if err != nil {
		writeVaultError(w, err)
		return
	}
	set := map[[2]string]vault.Info{}
	for _, in := range infos {
		if srv, sec, ok := vault.ParseName(in.Name); ok && sec != "" {
			set[[2]string{srv, sec}] = in
		}
	}
	out := []SecretInfo{}
	for srv, names := range s.needed() {
		for _, n := range names {
			in, ok := set[[2]string{srv, n}]
			delete(set, [2]string{srv, n})
			out = append(out, SecretInfo{Server: srv, Name: n, Set: ok, Updated: in.Updated, Configured: true})
		}
	}
	for k, in := range set {
		out = append(out, SecretInfo{Server: k[0], Name: k[1], Set: true, Updated: in.Updated})
	}
	slices.SortFunc(out, func(a, b SecretInfo) int {
		return strings.Compare(a.Server+"\x00"+a.Name, b.Server+"\x00"+b.Name)
	})
	writeJSON(w, http.StatusOK, map[string]any{"secrets": out})
}

// secretBody is PUT /api/secrets/SERVER/NAME's body.
type secretBody struct {
	Value *string `json:"value"`
}

func (s *server) putSecret(w http.ResponseWriter, r *http.Request) {
	owner, ok := s.secretOwner(w, r)
	if !ok {
		return
	}
	srv, name := r.PathValue("server"), r.PathValue("name")
	if !slices.Contains(s.needed()[srv], name) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("server %q takes no secret %q (servers.%s.auth.secrets; GET /api/secrets lists those there are)", srv, name, srv))
		return
	}
	max := s.o.Secrets.MaxValueBytes
	if max <= 0 {
		max = vault.Options{}.WithDefaults().MaxValueBytes
	}
	// JSON may escape every byte of a value in six: room for that, and
	// the value itself checked after.
	var body secretBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, int64(max)*6+1024))
	if err := dec.Decode(&body); err != nil || body.Value == nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the value is longer than %d bytes (vault.max_value_bytes)", max))
			return
		}
		// The decoder's message may quote the body: not repeated.
		writeError(w, http.StatusBadRequest, "invalid_request", `the body must be {"value": "..."}`)
		return
	}
	if len(*body.Value) > max {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the value is %d bytes, longer than %d (vault.max_value_bytes)", len(*body.Value), max))
		return
	}
	if *body.Value == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "the value is empty (DELETE removes a secret)")
		return
	}
	if err := s.o.Secrets.Vault.PutSecret(r.Context(), owner, srv, name, []byte(*body.Value)); err != nil {
		writeVaultError(w, err)
		return
	}
	if s.o.Secrets.Changed != nil {
		s.o.Secrets.Changed(owner, srv)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	owner, ok := s.secretOwner(w, r)
	if !ok {
		return
	}
	srv, name := r.PathValue("server"), r.PathValue("name")
	err := vault.CheckName(vault.SecretName(srv, name))
	if err == nil {
		err = s.o.Secrets.Vault.Delete(r.Context(), owner, vault.SecretName(srv, name))
	}
	if err != nil {
		writeVaultError(w, err)
		return
	}
	if s.o.Secrets.Changed != nil {
		s.o.Secrets.Changed(owner, srv)
	}
	w.WriteHeader(http.StatusNoContent)
}

// writeVaultError answers a vault's refusal by its kind; its message
// names entries, never a value.
func writeVaultError(w http.ResponseWriter, err error) {
	k := vault.KindOf(err)
	status := http.StatusInternalServerError
	switch k {
	case vault.KindNotFound:
		status = http.StatusNotFound
	case vault.KindInvalid:
		status = http.StatusBadRequest
	case vault.KindTooLarge:
		status = http.StatusRequestEntityTooLarge
	case vault.KindTooMany:
		status = http.StatusConflict
	case vault.KindLocked:
		status = http.StatusServiceUnavailable
	}
	if k == "" {
		k = "internal"
	}
	writeError(w, status, string(k), err.Error())
}
