package pipeline

import (
	"log/slog"
	"slices"
)

// Names of the built-in middlewares, as given to WithOrder (and as written
// in the configuration's `pipeline.order`).
const (
	NameRecord       = "record"
	NameInstructions = "instructions"
	NameTruncate     = "truncate"
	NameRollback     = "rollback"
	NameFallback     = "fallback"
	NameRepair       = "repair"
	NameValidate     = "validate"
	NameURLPolicy    = "url_policy"
	NameDedupe       = "dedupe"
	NamePII          = "pii"
)

// DefaultOrder returns the built-in middlewares in the order New uses
// without WithOrder, outermost first. Recording is outermost so that every
// call, whatever happens inside, yields exactly one record; fallbacks sit
// outside the argument checks so a fallback target is checked like any
// call; pii is innermost, so it looks at the arguments as the tool will
// get them (repaired) and at the result before any step after the call
// reads it.
func DefaultOrder() []string {
	return []string{NameRecord, NameInstructions, NameTruncate, NameRollback,
		NameFallback, NameRepair, NameValidate, NameURLPolicy, NameDedupe, NamePII}
}

// Defaults of the middlewares' options: the zero value of an option means
// these.
const (
	// DefaultMaxArgumentBytes bounds the JSON size of a call's arguments
	// (validate).
	DefaultMaxArgumentBytes = 1 << 20
	// DefaultMaxChars bounds the text a model sees of one result
	// (truncate).
	DefaultMaxChars = 50_000
	// DefaultLowContextChars is the low-context bound (truncate).
	DefaultLowContextChars = 20_000
)

// DefaultDedupeKeys returns the argument names that identify a query when
// DedupeOptions.Keys is nil: the common search and scrape argument shapes.
func DefaultDedupeKeys() []string {
	return []string{"q", "query", "Query", "url", "subtask", "info_to_extract"}
}

// DefaultRollbackRules returns the rules used when RollbackOptions.Rules is
// nil: they advise dropping a turn that called an unknown tool or repeated
// a query.
func DefaultRollbackRules() []RollbackRule {
	return []RollbackRule{
		{Kinds: []string{"tool_not_registered"}, Reason: "the model called a tool that does not exist"},
		{Kinds: []string{"duplicate_query"}, Reason: "the model repeated a query it already made"},
	}
}

// DefaultRedactKeys returns the argument and JSON keys whose values are
// always masked, whatever RedactOptions adds.
func DefaultRedactKeys() []string {
	return []string{"api_key", "apikey", "token", "access_token", "refresh_token", "password", "passwd",
		"secret", "client_secret", "authorization", "cookie"}
}

// Tool patterns in these options have the syntax of the configuration's
// allow list: "server/tool" globs, or bare "tool" globs matching in any
// server.

// RepairOptions configure argument repair (NewRepair).
type RepairOptions struct {
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

// ValidateOptions configure schema validation (NewValidate).
type ValidateOptions struct {
	// MaxArgumentBytes bounds the JSON size of a call's arguments; 0 means
	// DefaultMaxArgumentBytes.
	MaxArgumentBytes int64
}

// URLPolicyOptions allow or deny calls by the URLs in their arguments,
// before the call is made (NewURLPolicy).
type URLPolicyOptions struct {
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

// DedupeOptions configure duplicate detection (NewDedupe).
type DedupeOptions struct {
	// Policy is "allow", "warn" (the default) or "reject".
	Policy string
	// Keys are the argument names that identify a query; nil means
	// DefaultDedupeKeys. A call with none of them is not checked.
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

// Fallback is one fallback (NewFallback): when a call to a matching tool
// fails with one of the listed error kinds, the target tool is called
// instead.
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

// TruncateOptions configure output truncation and spilling (NewTruncate).
type TruncateOptions struct {
	// MaxChars bounds the text a model sees of one result; 0 means
	// DefaultMaxChars.
	MaxChars int
	// Tools overrides MaxChars for the tools a pattern matches; the first
	// matching entry applies.
	Tools []ToolLimit
	// LowContext holds tighter limits, used when enabled here, by
	// WithLowContext or by the environment variable TOOLMUX_LOW_CONTEXT=1.
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
	// MaxChars is the low-context global limit; 0 means
	// DefaultLowContextChars.
	MaxChars int
	Tools    []ToolLimit
}

// RollbackOptions configure rollback verdicts (NewRollback).
type RollbackOptions struct {
	// Rules are tried in order; the first that matches gives the verdict.
	// Nil means DefaultRollbackRules; empty means no rule.
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

// InstructionsOptions configure just-in-time instructions
// (NewInstructions).
type InstructionsOptions struct {
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

// RedactOptions configure the masking of secrets in records (NewRecord).
type RedactOptions struct {
	// Keys are argument and JSON keys whose values are masked, in addition
	// to DefaultRedactKeys; matching ignores case, '-' and '_'.
	Keys []string
	// Patterns are regular expressions whose matches are masked in every
	// string, in addition to the built-in patterns for common token shapes.
	Patterns []string
}

// Option configures a Pipeline.
type Option func(*options)

type options struct {
	dataDir    string
	recorder   Recorder
	lowContext bool
	log        *slog.Logger
	lookupEnv  func(string) (string, bool)
	limits     Limits

	order        []string
	orderSet     bool
	redact       RedactOptions
	instructions InstructionsOptions
	truncate     TruncateOptions
	rollback     RollbackOptions
	fallbacks    []Fallback
	repair       RepairOptions
	validate     ValidateOptions
	urlPolicy    URLPolicyOptions
	dedupe       DedupeOptions
	pii          PIIOptions
	pins         *Pins
	extra        []Middleware
}

// WithDataDir sets the directory where truncated outputs are saved in full
// (under spill/); without it, truncated outputs are not saved.
func WithDataDir(dir string) Option { return func(o *options) { o.dataDir = dir } }

// WithRecorder sets where every call's record goes (the task log).
func WithRecorder(r Recorder) Option { return func(o *options) { o.recorder = r } }

// WithLowContext turns low-context limits on (as TOOLMUX_LOW_CONTEXT=1 does).
func WithLowContext(on bool) Option { return func(o *options) { o.lowContext = on } }

// WithLogger sets the logger for internal errors.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithLookupEnv replaces os.LookupEnv for TOOLMUX_LOW_CONTEXT (tests).
func WithLookupEnv(f func(string) (string, bool)) Option {
	return func(o *options) { o.lookupEnv = f }
}

// WithOrder sets which built-in middlewares run, by name (NameRecord, ...),
// outermost first; one left out does not run. Without it, DefaultOrder.
func WithOrder(names ...string) Option {
	return func(o *options) { o.order, o.orderSet = slices.Clone(names), true }
}

// WithPinning checks every call's tool definition against its pin (see
// Pins): a middleware placed after the steps that act on records and after
// fallback, before the built-in ones that read the definition (repair,
// validate, url_policy, dedupe, pii), so a held call reaches none of them; and
// the pipeline's catalog (Pipeline.Tools) lists a held tool with its
// pinned definition, never the one waiting for a person's acceptance
// (Pins.Shown). Without it (or with a nil p), nothing is pinned.
func WithPinning(p *Pins) Option { return func(o *options) { o.pins = p } }

// WithRedact sets what the record middleware masks.
func WithRedact(r RedactOptions) Option { return func(o *options) { o.redact = r } }

// WithInstructions sets the just-in-time instructions.
func WithInstructions(in InstructionsOptions) Option {
	return func(o *options) { o.instructions = in }
}

// WithTruncate sets the truncation limits.
func WithTruncate(t TruncateOptions) Option { return func(o *options) { o.truncate = t } }

// WithRollback sets the rollback rules.
func WithRollback(r RollbackOptions) Option { return func(o *options) { o.rollback = r } }

// WithFallbacks sets the fallbacks, tried in order.
func WithFallbacks(f ...Fallback) Option {
	return func(o *options) { o.fallbacks = slices.Clone(f) }
}

// WithRepair sets argument repair.
func WithRepair(r RepairOptions) Option { return func(o *options) { o.repair = r } }

// WithValidate sets schema validation.
func WithValidate(v ValidateOptions) Option { return func(o *options) { o.validate = v } }

// WithURLPolicy sets the URL policy.
func WithURLPolicy(u URLPolicyOptions) Option { return func(o *options) { o.urlPolicy = u } }

// WithDedupe sets duplicate detection.
func WithDedupe(d DedupeOptions) Option { return func(o *options) { o.dedupe = d } }

// WithPII sets the pii stage's rules.
func WithPII(p PIIOptions) Option { return func(o *options) { o.pii = p } }

// WithMiddleware adds the caller's own middlewares (a rate limiter, an
// audit hook) to the chain, innermost: after every built-in middleware,
// just before the backend, in the order given (the first outermost), each
// call of the option appending to those before. They see each call as the
// backend will (arguments repaired and validated, admitted by the URL
// policy and duplicate detection; a fallback's target too), and the record
// they return goes back out through every built-in step (recorded, guided,
// truncated, given a verdict), so a call they refuse is recorded like any
// other. Calls refused before the chain (Refuse) do not reach them.
func WithMiddleware(mws ...Middleware) Option {
	return func(o *options) { o.extra = append(o.extra, mws...) }
}
