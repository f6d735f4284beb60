package pipeline

import "github.com/toolmux/toolmux/config"

// FromConfig returns the options of a configuration file's `pipeline:`
// section, for New: the section's types are config's, the behaviour and
// its defaults are the pipeline's (a zero value in the section means the
// pipeline's default). Options after these in New's list override them.
func FromConfig(c config.Pipeline) []Option {
	opts := []Option{
		WithRedact(RedactOptions(c.Redact)),
		WithInstructions(InstructionsOptions{
			Tools: convert(c.Instructions.Tools, func(t config.ToolText) ToolText { return ToolText(t) }),
			Rules: convert(c.Instructions.Rules, func(r config.InstructionRule) InstructionRule { return InstructionRule(r) }),
		}),
		WithTruncate(TruncateOptions{
			MaxChars: c.Truncate.MaxChars,
			Tools:    toolLimits(c.Truncate.Tools),
			LowContext: LowContext{Enabled: c.Truncate.LowContext.Enabled, MaxChars: c.Truncate.LowContext.MaxChars,
				Tools: toolLimits(c.Truncate.LowContext.Tools)},
		}),
		WithRollback(RollbackOptions{
			Rules: convert(c.Rollback.Rules, func(r config.RollbackRule) RollbackRule { return RollbackRule(r) }),
		}),
		WithFallbacks(convert(c.Fallbacks, func(f config.Fallback) Fallback { return Fallback(f) })...),
		WithRepair(RepairOptions{
			Aliases:  convert(c.Repair.Aliases, func(a config.Aliases) Aliases { return Aliases(a) }),
			NoSchema: c.Repair.NoSchema,
		}),
		WithValidate(ValidateOptions(c.Validate)),
		WithURLPolicy(URLPolicyOptions{
			Arguments: c.URLPolicy.Arguments,
			Rules:     convert(c.URLPolicy.Rules, func(r config.URLRule) URLRule { return URLRule(r) }),
			Default:   c.URLPolicy.Default,
		}),
		WithDedupe(DedupeOptions{
			Policy: c.Dedupe.Policy,
			Keys:   c.Dedupe.Keys,
			Tools:  convert(c.Dedupe.Tools, func(t config.DedupeTool) DedupeTool { return DedupeTool(t) }),
		}),
		WithPII(PIIOptions{
			Rules:       convert(c.PII.Rules, func(r config.PIIRule) PIIRule { return PIIRule(r) }),
			Regions:     c.PII.Regions,
			MaxFindings: c.PII.MaxFindings,
		}),
	}
	if c.Order != nil {
		opts = append(opts, WithOrder(c.Order...))
	}
	return opts
}

func toolLimits(ls []config.ToolLimit) []ToolLimit {
	return convert(ls, func(l config.ToolLimit) ToolLimit { return ToolLimit(l) })
}

// convert maps a slice, keeping nil nil: a nil list means "the default" in
// several options (rollback rules, dedupe keys).
func convert[F, T any](in []F, f func(F) T) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
