package identity

import (
	"fmt"
	"slices"
	"strings"
)

// Reading a caller from a token's claims (a JWT's payload, an
// introspection's answer), both decoded into a map.

// claim returns the claim called name: the member of that name, else,
// when name holds dots and there is no such member, the path of members
// it spells ("realm_access.roles"). A name with dots of its own (a URL,
// as namespaced claims are) is found as a member first.
func claim(m map[string]any, name string) (any, bool) {
	if v, ok := m[name]; ok {
		return v, true
	}
	cur := m
	parts := strings.Split(name, ".")
	for i, p := range parts {
		v, ok := cur[p]
		if !ok {
			return nil, false
		}
		if i == len(parts)-1 {
			return v, true
		}
		if cur, ok = v.(map[string]any); !ok {
			return nil, false
		}
	}
	return nil, false
}

// claimString returns a claim that is a non-empty string.
func claimString(m map[string]any, name string) string {
	v, _ := claim(m, name)
	s, _ := v.(string)
	return s
}

// claimList returns a claim that is a list of strings (other elements
// ignored), or one string of words separated by spaces or commas; ok is
// false for a claim of another type.
func claimList(m map[string]any, name string) (list []string, ok bool) {
	v, found := claim(m, name)
	if !found || v == nil {
		return nil, true
	}
	switch v := v.(type) {
	case string:
		return strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' }), true
	case []any:
		return stringsOf(v), true
	}
	return nil, false
}

// stringsOf returns the non-empty strings of a JSON list, in order, each
// once; other elements are ignored.
func stringsOf(l []any) []string {
	out := make([]string, 0, len(l))
	for _, e := range l {
		if s, ok := e.(string); ok && s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// callerOf reads the caller of a token's claims m: its subject, name,
// groups and scopes. The issuer, method, audience and expiry are the
// verifier's to set.
func callerOf(m map[string]any, c Claims) (*Caller, error) {
	sub := claimString(m, c.Subject)
	if sub == "" {
		return nil, &Error{Kind: KindInvalid, Message: fmt.Sprintf("the token has no subject (claim %q, auth.claims.subject)", c.Subject)}
	}
	groups, ok := claimList(m, c.Groups)
	if !ok {
		return nil, &Error{Kind: KindInvalid, Message: fmt.Sprintf("the token's groups (claim %q, auth.claims.groups) are neither a list of strings nor a string", c.Groups)}
	}
	caller := &Caller{Subject: sub, Groups: groups, Name: sub}
	names := []string{"name", "preferred_username", "username"}
	if c.Name != "" {
		names = append([]string{c.Name}, names...)
	}
	for _, n := range names {
		if s := claimString(m, n); s != "" {
			caller.Name = s
			break
		}
	}
	caller.Scopes = scopesOf(m)
	return caller, nil
}

// scopesOf returns the scopes a token grants: its scope claim (RFC 8693,
// RFC 9068, RFC 7662: a string of scopes separated by spaces), else its
// scp claim (a list, as Hydra and Azure AD write it, or a string).
func scopesOf(m map[string]any) []string {
	if s, ok := m["scope"].(string); ok {
		return strings.Fields(s)
	}
	switch v := m["scp"].(type) {
	case string:
		return strings.Fields(v)
	case []any:
		return stringsOf(v)
	}
	return nil
}

// audienceOf returns a token's aud claim: a string or a list of strings.
func audienceOf(m map[string]any) []string {
	switch v := m["aud"].(type) {
	case string:
		return []string{v}
	case []any:
		return stringsOf(v)
	}
	return nil
}
