package pipeline

import (
	"fmt"
	"strings"

	"github.com/toolmux/toolmux/tool"
)

// Format returns the content a model sees for a call: the result's content
// followed by any instructions, or, for a failed call, one text part with a
// sentence naming the tool, what went wrong and what to try instead.
func Format(rec *tool.Record) []tool.Content {
	var out []tool.Content
	switch {
	case rec.Error != nil && (rec.Result == nil || rec.Error.Kind != tool.KindToolError):
		out = []tool.Content{{Type: tool.ContentText, Text: ErrorSentence(rec)}}
	case rec.Result != nil:
		out = append(out, rec.Result.Content...)
		if len(out) == 0 && rec.Result.Structured != nil {
			out = append(out, tool.Content{Type: tool.ContentText, Text: jsonText(rec.Result.Structured)})
		}
	}
	for _, ins := range rec.Instructions {
		out = append(out, tool.Content{Type: tool.ContentText, Text: ins})
	}
	return out
}

// FormatText is Format for text-only consumers: text parts as they are,
// other parts described in one line each.
func FormatText(rec *tool.Record) string {
	r := &tool.Result{Content: Format(rec)}
	return r.Summary()
}

// maxDetail bounds the diagnostics (a server's stderr tail) quoted to a model.
const maxDetail = 1500

// ErrorSentence describes a failed call for a model: server, tool, kind,
// the message, and the fix to try.
func ErrorSentence(rec *tool.Record) string {
	e := rec.Error
	if e == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Error: the call to %s/%s failed (%s): %s", rec.Server, rec.Tool, e.Kind, strings.TrimSpace(e.Message))
	if e.Suggestion != "" {
		fmt.Fprintf(&b, " Did you mean %q?", e.Suggestion)
	}
	if e.Detail != "" {
		b.WriteString("\nDetails:\n")
		b.WriteString(prefixRunes(strings.TrimSpace(e.Detail), maxDetail))
	}
	if hint := fixHint(e.Kind); hint != "" {
		b.WriteString("\nWhat to do: ")
		b.WriteString(hint)
	}
	return b.String()
}

// fixHint is the advice a model can act on for each kind of failure.
func fixHint(k tool.Kind) string {
	switch k {
	case tool.KindToolNotRegistered:
		return "call one of the tools you were given, with its exact name."
	case tool.KindServerNotFound:
		return "use a server name from the tool list."
	case tool.KindServerUnavailable:
		return "the server is down; try again later or use another tool."
	case tool.KindInvalidParams:
		return "fix the arguments listed above and call the tool again."
	case tool.KindPolicyViolation:
		return "this call is not allowed; do not retry it, choose another way."
	case tool.KindApprovalDenied:
		return "the user did not approve this call; do not retry it, choose another way or ask the user."
	case tool.KindApprovalUnavailable:
		return "nobody could be asked to approve this call, so nobody has seen it; do not retry it until the user allows it (the message says how): tell the user, or choose another way."
	case tool.KindTimeout:
		return "the tool took too long; ask for less at a time or use another tool."
	case tool.KindCancelled:
		return "the call was cancelled; do not retry it unless asked to."
	case tool.KindToolError:
		return "read the tool's message above, correct the call and try again."
	case tool.KindDuplicateQuery:
		return "you already made this query; use its earlier result or change the query."
	case tool.KindPathNotInWorkspace:
		return "use a path inside the workspace."
	case tool.KindFileNotFound:
		return "check the path, for example by listing the directory first."
	case tool.KindPermissionDenied:
		return "this file cannot be accessed; use another one."
	case tool.KindFallbackFailed:
		return "neither the tool nor its fallbacks could answer; try another approach."
	case tool.KindOutcomeUnknown:
		return "check whether its effect happened (read the state it changes) before you call it again."
	case tool.KindToolChanged:
		return "the tool's definition changed since it was approved; do not retry it until a person accepts the change, use another tool or tell the user."
	case tool.KindAuthRequired:
		return "the user must give their credential for this server first (the message says how); tell the user, and do not retry until they have."
	case tool.KindExecutionFailed:
		return "the call failed unexpectedly; try again once, then use another tool."
	}
	return ""
}
