package main

import (
	"sync/atomic"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/policy"
)

// Governance per caller in serve (docs/identity.md "Governance per
// caller"): what each caller sees, from the groups section, kept up to
// date by reloads; who answers approvals. The policy's rules by caller
// and the groups' approval modes come with the policy (toolmux.Open,
// Runtime.Reload); virtual servers and passthrough routes by group with
// their sections (gateway.VirtualFromConfig, gateway.RouteFromConfig).

// visibility holds what each caller may see (the groups section's
// tools), for the gateway and the API, which read it for every request;
// a reload replaces it.
type visibility struct {
	v atomic.Pointer[policy.Visibility]
}

// newVisibility returns the visibility of cfg.
func newVisibility(cfg *config.Config) (*visibility, error) {
	h := &visibility{}
	return h, h.set(cfg)
}

// set takes cfg's groups section; on error the visibility in use stays.
func (h *visibility) set(cfg *config.Config) error {
	admin := cfg.Auth.AdminGroup
	if admin == "" {
		admin = gateway.AdminGroup
	}
	v, err := policy.VisibilityFromConfig(cfg, admin)
	if err != nil {
		return err
	}
	h.v.Store(v)
	return nil
}

// get is the gateway's and the API's Options.Visibility.
func (h *visibility) get() *policy.Visibility { return h.v.Load() }

// approvers says who answers approvals when callers are known: members
// of group and of admin, and whether a caller may answer a question
// about its own call (self).
type approvers struct {
	group, admin string
	self         bool
}

// approvers returns who answers serve's approvals: the auth section's
// approvers_group, admin_group and self_approval (docs/identity.md).
func (a *app) approvers(cfg *config.Config) approvers {
	st := approvers{group: cfg.Auth.ApproversGroup, admin: cfg.Auth.AdminGroup, self: true}
	if st.group == "" {
		st.group = api.DefaultApproversGroup
	}
	if st.admin == "" {
		st.admin = gateway.AdminGroup
	}
	if cfg.Auth.SelfApproval != nil {
		st.self = *cfg.Auth.SelfApproval
	}
	return st
}
