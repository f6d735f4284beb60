package config

// Policy is the `policy:` section of toolmux.yaml: the approval mode, and
// the rules that allow, deny or ask before a call runs. Package policy
// gives it its meaning (policy.FromConfig) and docs/policy.md documents
// it; config only checks that it is well formed. The zero value is the
// default mode, no persistence and no rules.
type Policy struct {
	// Mode is the approval mode: "plan", "default", "auto_edit" or "yolo";
	// "" means "default". A command-line flag may override it.
	Mode string
	// Persist saves "always" answers given at approval prompts as allow
	// rules in this file, so that they outlast the session.
	Persist bool
	// Rules are the user's rules, in file order (the order that breaks
	// ties of priority).
	Rules []PolicyRule
}

// PolicyRule is one rule of the policy section. Every condition that is
// set must hold for the rule to match a call.
type PolicyRule struct {
	// Name identifies the rule in messages; "" lets package policy number it.
	Name string
	// Tools are tool patterns with the syntax of the global allow list
	// ("server/tool" or bare "tool" globs); nil matches any tool.
	Tools []string
	// Server is a glob over the server name; "" matches any server.
	Server string
	// Args maps argument names to regular expressions (Go syntax) their
	// values must match; nil has no argument conditions.
	Args map[string]string
	// ReadOnly and Destructive match the tool's readOnlyHint and
	// destructiveHint; nil matches either.
	ReadOnly, Destructive *bool
	// Callers are globs over the calling caller's name or subject; nil
	// matches any caller.
	Callers []string
	// Groups are group names, one of which the caller must be in; nil
	// matches any caller.
	Groups []string
	// Modes restricts the rule to these approval modes; nil means all.
	Modes []string
	// Action is "allow", "deny" or "ask".
	Action string
	// Priority orders rules, higher first. Default: 0.
	Priority int
	// Message is shown to the model on deny and in the prompt on ask.
	Message string
	// Line is where the rule starts in the file, for later messages.
	Line int
}
