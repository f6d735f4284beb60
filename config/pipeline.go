package config

// Pipeline configures the governance chain every call goes through: the
// `pipeline:` section of toolmux.yaml. The zero value of each part means
// "that part's defaults"; Order decides which parts run at all.
//
// Tool patterns here have the syntax of the global allow list: "server/tool"
// globs, or bare "tool" globs matching in any server.
type Pipeline struct {
	// Order lists the middlewares, outermost first. Nil means
	// DefaultPipelineOrder; a middleware left out does not run.
	Order []string

	Repair       Repair
	Validate     Validate
	URLPolicy    URLPolicy
	Dedupe       Dedupe
	Fallbacks    []Fallback
	Truncate     Truncate
	Rollback     Rollback
	Instructions Instructions
	Redact       Redact
	PII          PII
}

// Middleware names, as used in Pipeline.Order.
const (
	MiddlewareRecord       = "record"
	MiddlewareInstructions = "instructions"
	MiddlewareTruncate     = "truncate"
	MiddlewareRollback     = "rollback"
	MiddlewareFallback     = "fallback"
	MiddlewareRepair       = "repair"
	MiddlewareValidate     = "validate"
	MiddlewareURLPolicy    = "url_policy"
	MiddlewareDedupe       = "dedupe"
	MiddlewarePII          = "pii"
)

// DefaultPipelineOrder is the order used when Pipeline.Order is nil,
// outermost first: the pipeline's (pipeline.DefaultOrder), which a test
// there keeps equal. Recording is outermost so that every call, whatever
// happens inside, yields exactly one record; fallbacks sit outside the
// argument checks so a fallback target is checked like any call.
var DefaultPipelineOrder = []string{
	MiddlewareRecord,
	MiddlewareInstructions,
	MiddlewareTruncate,
	MiddlewareRollback,
	MiddlewareFallback,
	MiddlewareRepair,
	MiddlewareValidate,
	MiddlewareURLPolicy,
	MiddlewareDedupe,
	MiddlewarePII,
}

// Repair configures argument repair.
type Repair struct {
	// Aliases rename argument keys for the tools a pattern matches, applied
	// in order: {"scrape_and_extract_info": {"description": "info_to_extract"}}.
	Aliases []Aliases
	// NoSchema turns off schema-driven repair (near-miss keys, type
	// coercion, JSON-in-string), which is on by default.
	NoSchema bool
}

// Aliases is one alias map and the tools it applies to.
type Aliases struct {
	Tools string            // tool pattern
	Map   map[string]string // wrong key -> right key
}

// Validate configures schema validation.
type Validate struct {
	// MaxArgumentBytes bounds the JSON size of a call's arguments; 0 means
	// the pipeline's default (pipeline.DefaultMaxArgumentBytes).
	MaxArgumentBytes int64
}

// URLPolicy allows or denies calls by the URLs in their arguments, before
// the call is made.
type URLPolicy struct {
	// Arguments names arguments whose string values are URLs even without a
	// scheme ("huggingface.co/datasets/x"); any string argument that parses
	// as an absolute http(s) URL is checked anyway.
	Arguments []string
	// Rules are tried in order; the first that matches decides.
	Rules []URLRule
	// Default is "allow" (the default) or "deny", for URLs no rule matches.
	Default string
}

// URLRule is one URL policy rule.
type URLRule struct {
	// Action is "allow" or "deny".
	Action string
	// Host is a glob on the lower-cased host name ("huggingface.co",
	// "*.example.com"); empty matches any host.
	Host string
	// Path is a glob on the URL path where "**" crosses "/"
	// ("/datasets/**"); empty matches any path.
	Path string
	// Tools restricts the rule to tools matching these patterns; empty
	// means every tool.
	Tools []string
	// Message is shown to the model when the rule denies a call.
	Message string
}

// Dedupe configures duplicate detection.
type Dedupe struct {
	// Policy is "allow", "warn" (the default) or "reject".
	Policy string
	// Keys are the argument names that identify a query; nil means the
	// pipeline's default (pipeline.DefaultDedupeKeys). A call with none of
	// them is not checked.
	Keys []string
	// Tools overrides keys and policy for the tools a pattern matches; the
	// first matching entry applies.
	Tools []DedupeTool
}

// DedupeTool is a per-tool duplicate detection setting.
type DedupeTool struct {
	Tools  string   // tool pattern
	Keys   []string // nil: the global keys
	Policy string   // "": the global policy
}

// Fallback is one fallback: when a call to a matching tool fails with one
// of the listed error kinds, the target tool is called instead.
type Fallback struct {
	// Tools are the patterns of the tools it applies to.
	Tools []string
	// On lists the error kinds that trigger it (timeout,
	// server_unavailable, tool_error, execution_failed, ...).
	On []string
	// Target is the tool to call, as "server/tool".
	Target string
	// Arguments maps the target's argument names to the failed call's
	// argument names: {"url": "url"}. Nil passes the arguments unchanged.
	Arguments map[string]string
}

// Truncate configures output truncation and spilling.
type Truncate struct {
	// MaxChars bounds the text a model sees of one result; 0 means the
	// pipeline's default (pipeline.DefaultMaxChars).
	MaxChars int
	// Tools overrides MaxChars for the tools a pattern matches; the first
	// matching entry applies.
	Tools []ToolLimit
	// LowContext holds tighter limits, used when enabled here or by the
	// environment variable TOOLMUX_LOW_CONTEXT=1.
	LowContext LowContext
}

// ToolLimit is a per-tool character limit.
type ToolLimit struct {
	Tools    string // tool pattern
	MaxChars int
}

// LowContext is the tighter limit set for small context windows (the seed
// system's DEMO_MODE).
type LowContext struct {
	Enabled bool
	// MaxChars is the low-context global limit; 0 means the pipeline's
	// default (pipeline.DefaultLowContextChars).
	MaxChars int
	Tools    []ToolLimit
}

// Rollback configures rollback verdicts.
type Rollback struct {
	// Rules are tried in order; the first that matches gives the verdict.
	// Nil means the pipeline's default (pipeline.DefaultRollbackRules).
	Rules []RollbackRule
}

// RollbackRule is one rollback rule. Exactly one condition is set.
type RollbackRule struct {
	// Tools restricts the rule to tools matching these patterns.
	Tools []string
	// Prefix matches results whose text starts with it.
	Prefix string
	// IsError matches results the tool marked as errors.
	IsError bool
	// JSONEmpty is a dotted path ("organic", "data.items") into a JSON
	// result (structured content, or the text parsed as JSON) that matches
	// when the value there is missing, null, empty or [].
	JSONEmpty string
	// Kinds matches calls that failed with one of these error kinds.
	Kinds []string
	// Reason explains the verdict; a default is derived from the condition.
	Reason string
}

// Instructions configures just-in-time instructions.
type Instructions struct {
	// Tools gives guidance attached to a tool's result the first time the
	// tool is used in a task.
	Tools []ToolText
	// Rules attach guidance whenever they match.
	Rules []InstructionRule
}

// ToolText is guidance for the tools a pattern matches.
type ToolText struct {
	Tools string // tool pattern
	Text  string
}

// InstructionRule attaches Text when the call matches: its tool matches
// Tools (if set), and its result text matches the regular expression Match
// (if set) or the call failed with one of Kinds (if set).
type InstructionRule struct {
	Tools []string
	Match string
	Kinds []string
	Text  string
}

// Redact configures masking of secrets in records and logs.
type Redact struct {
	// Keys are argument and JSON keys whose values are masked, in addition
	// to the pipeline's (pipeline.DefaultRedactKeys); matching ignores case,
	// '-' and '_'.
	Keys []string
	// Patterns are regular expressions whose matches are masked in every
	// string, in addition to the built-in patterns for common token shapes.
	Patterns []string
}

// PII configures the pii stage: personal data and secrets found in a
// call's arguments or result are masked, refused or noted.
type PII struct {
	// Rules are tried in order; for each kind and direction, the first
	// rule that names them (and the call's tool) decides. None: the stage
	// does nothing.
	Rules []PIIRule
	// Regions are the ISO 3166 codes whose national phone formats are
	// recognised ("US", "GB"); nil means the pipeline's default
	// (pipeline.DefaultPIIRegions).
	Regions []string
	// MaxFindings bounds the findings a note lists per call and
	// direction; 0 means the pipeline's default
	// (pipeline.DefaultPIIMaxFindings).
	MaxFindings int
}

// PIIRule is one pii rule.
type PIIRule struct {
	// Kinds are among email, phone, card, iban, secret; empty means all.
	Kinds []string
	// On lists arguments and/or result; empty means both.
	On []string
	// Action is mask, refuse or note.
	Action string
	// Tools restricts the rule to tools matching these patterns; empty
	// means every tool.
	Tools []string
}
