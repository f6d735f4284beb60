package gateway

import (
	"context"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// Code mode (docs/codemode.md): the meta-tool run_code takes a short
// JavaScript program that calls the view's tools as functions (the
// codemode package), so that a model makes many calls in one turn and
// sees only what the program returns. Every call the program makes is a
// call of the view by the same governed path as a direct one
// (Gateway.callRecord: the scheduler, the policy and its approvals, the
// pipeline, the task log), in the task of the run_code call's client.

// CodeMode configures run_code on /mcp, stdio and the virtual servers.
type CodeMode struct {
	// Enabled offers run_code.
	Enabled bool
	// Bounds of each program (codemode.Options' defaults for zeros).
	Bounds codemode.Options
	// Recorder, when set, keeps a record of each run_code call (its code
	// as its arguments), beside its inner calls' own (the task log).
	Recorder Recorder
}

// Recorder keeps records of calls the gateway answers itself
// (*tasklog.Log is one).
type Recorder interface {
	Record(ctx context.Context, rec *tool.Record)
}

// metaRunCode names the code mode meta-tool; runCodeServer is the server
// its records name.
const (
	metaRunCode   = codemode.ToolName
	runCodeServer = "toolmux"
)

// isRunCode reports whether name is run_code on a view offering it.
func (v *view) isRunCode(name string) bool { return v.code != nil && name == metaRunCode }

// runCodeTool is run_code's definition, declaring tools (the tools listed
// beside it; none where callers see different tools).
func runCodeTool(tools []tool.Tool, searching bool) *mcp.Tool {
	return &mcp.Tool{
		Name:        metaRunCode,
		Description: codemode.Description(tools, searching),
		InputSchema: codemode.InputSchema(),
		Annotations: &mcp.ToolAnnotations{Title: "Run code", DestructiveHint: new(true), OpenWorldHint: new(true)},
	}
}

// declared returns the tools run_code's description declares: those
// listed (want), unless callers see different tools, when a declaration
// would name tools some may not see; v.mu is held.
func (v *view) declared(tools []tool.Tool, want map[string]tool.Tool) []tool.Tool {
	if v.g.visibility() != nil {
		return nil
	}
	out := make([]tool.Tool, 0, len(want))
	for _, t := range tools {
		if _, ok := want[t.Exposed]; ok {
			out = append(out, t)
		}
	}
	return out
}

// runCode answers run_code: the program run with the tools of the view
// the caller sees, its inner calls made through codeCaller.
func (v *view) runCode(ctx context.Context, in callInput) *mcp.CallToolResult {
	args, err := v.g.decodeArgs(in.params.Arguments)
	if err != nil {
		return errorResult(&tool.Error{Kind: tool.KindInvalidParams, Tool: metaRunCode, Message: err.Error()})
	}
	code, _ := args["code"].(string)
	if strings.TrimSpace(code) == "" {
		return errorResult(&tool.Error{Kind: tool.KindInvalidParams, Tool: metaRunCode,
			Message: "run_code needs the program to run: {\"code\": \"...\"}"})
	}
	sc := v.g.toolScope(identity.From(ctx))
	v.mu.Lock()
	names := make([]string, 0, len(v.tools))
	for _, t := range v.tools {
		if sc.Sees(t.Server, t.Name) {
			names = append(names, t.Exposed)
		}
	}
	v.mu.Unlock()
	call := tool.Call{ID: tool.NewID(), Server: runCodeServer, Tool: metaRunCode, Arguments: map[string]any{"code": code},
		Task: v.g.taskOf(in), Caller: identity.RefFrom(ctx)}
	rec := tool.NewRecord(&call, metaRunCode)
	// The program's calls name it as their parent, so that the page
	// shows them under it.
	inner := in
	inner.parent = call.ID
	res, err := codemode.New(codeCaller{v: v, in: inner, sc: sc}, v.code.Bounds).Run(ctx, code, names)
	rec.Ended = time.Now()
	rec.Duration = rec.Ended.Sub(rec.Started)
	rec.Attempts = 1
	out := runCodeResult(res, err)
	rec.Result = &tool.Result{Structured: out.StructuredContent, IsError: out.IsError}
	for _, c := range out.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			rec.Result.Content = append(rec.Result.Content, tool.Content{Type: tool.ContentText, Text: t.Text})
		}
	}
	if err != nil {
		rec.Error = &tool.Error{Kind: codemode.ToolKind(err), Tool: metaRunCode, Message: err.Error()}
	}
	if v.code.Recorder != nil {
		v.code.Recorder.Record(context.WithoutCancel(ctx), rec)
	}
	return out
}

// runCodeResult is what the client gets of a program: its result and
// console, as structured content and as text; a failed program's error
// (kind, bound) beside its console (codemode.Answer).
func runCodeResult(res *codemode.Result, err error) *mcp.CallToolResult {
	structured, text := codemode.Answer(res, err)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: structured, IsError: err != nil}
}

// codeCaller is a program's codemode.Caller: each call a call of the view
// named as call_tool names it, by the governed path, in the run_code
// call's task and for its caller.
type codeCaller struct {
	v  *view
	in callInput
	sc policy.Scope
}

func (c codeCaller) Call(ctx context.Context, name string, args map[string]any) *tool.Record {
	t, terr := c.v.byCall(c.sc, name, "find tools with find_tools or see run_code's description")
	if terr != nil {
		return &tool.Record{Name: name, Error: terr}
	}
	if e := tool.CheckDepth(args, c.v.g.depth); e != nil {
		return &tool.Record{Server: t.Server, Tool: t.Name, Error: e}
	}
	// A question the client would answer by retrying its request
	// (input_required, 2026-07-28) cannot be put: the program cannot be
	// retried where it stands. Such a client is one that cannot be
	// asked, as one without elicitation; a session's client is asked
	// (elicitation/create) and the program waits for the answer.
	declared := c.in.declared
	if declared != nil && declared.Capabilities != nil && declared.Capabilities.Elicitation != nil {
		d := *declared
		caps := *d.Capabilities
		caps.Elicitation = nil
		d.Capabilities, declared = &caps, &d
	}
	r := &request{session: c.in.session, declared: declared, elicit: c.in.elicit}
	rec := c.v.g.callRecord(withRequest(ctx, r), t, c.in, args)
	if r.questions() != nil && rec.Error == nil {
		rec.Error = &tool.Error{Kind: tool.KindApprovalUnavailable, Server: t.Server, Tool: t.Name,
			Message: "a program's call cannot wait for an answer given by retrying the request"}
	}
	return rec
}
