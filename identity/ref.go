package identity

import (
	"context"

	"github.com/toolmux/toolmux/tool"
)

// Ownership (docs/identity.md, "Ownership"): what a caller makes (MCP
// tasks, task-log tasks, approval questions, re-issued requests) belongs
// to it. Another caller is told such a thing does not exist, as for an id
// nobody made, never that it is forbidden: an id must not be a way to
// learn what others do. Members of an all-seeing group (AdminGroup) see
// everything, and so does everyone where no authentication is configured
// (a nil caller).

// AdminGroup is the group whose members see every caller's tasks,
// approvals and listings, unless configured otherwise.
const AdminGroup = "admin"

// Ref is what a record keeps of its caller: the name people read and
// the key ownership compares (Caller.Key), never a credential. It is
// tool.CallerRef, so that tool, which every package imports, needs
// nothing of this one (its verifiers and their libraries).
type Ref = tool.CallerRef

// Ref returns what records keep of c; nil for a nil caller.
func (c *Caller) Ref() *Ref {
	if c == nil {
		return nil
	}
	return &Ref{Name: c.Name, Key: c.Key()}
}

// RefFrom returns the Ref of the caller ctx carries; nil when none.
func RefFrom(ctx context.Context) *Ref { return From(ctx).Ref() }

// Scope is what one caller may see of what callers own: everything (no
// caller: no authentication configured; or a member of an all-seeing
// group), or only its own.
type Scope struct {
	key string // "" when everything
}

// ScopeOf returns the scope of c, who sees everything when it is in one
// of all.
func ScopeOf(c *Caller, all []string) Scope {
	if c == nil || c.InAny(all) {
		return Scope{}
	}
	return Scope{key: c.Key()}
}

// All reports whether the scope is everything.
func (s Scope) All() bool { return s.key == "" }

// Key is the key of the only caller whose things the scope holds; "" when
// it holds everything (a listing's filter).
func (s Scope) Key() string { return s.key }

// Sees reports whether something of owner (nil: made with no caller) is
// in the scope. A thing of no owner is seen only by those who see
// everything.
func (s Scope) Sees(owner *Ref) bool {
	return s.key == "" || owner != nil && owner.Key == s.key
}
