package gateway

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

// Virtual is a virtual server: a named subset of the catalog served at
// /virtual/{Name}/mcp, so that one gateway gives different clients
// different catalogs. Its tools are called, governed, like those of /mcp.
type Virtual struct {
	// Name names the route; a path segment (the configuration checks it).
	Name string
	// Description is the server's instructions to its clients; "" says
	// which gateway it is.
	Description string
	// Tools are tool patterns (server/tool globs, as in allow): the
	// catalog's tools that match one are served.
	Tools []string
	// Rename gives tools ("server/tool", exact) the name they are served
	// under; the others keep their exposed name (server__tool).
	Rename map[string]string
	// Describe replaces tools' descriptions ("server/tool", exact).
	Describe map[string]string
	// ToolSearch configures tool search on the virtual server.
	ToolSearch ToolSearch
	// Groups, when set, are the only groups whose members (and the admin
	// group's) may use the virtual server: for anyone else it does not
	// exist (404, as an unknown name). Without authentication everyone
	// may.
	Groups []string
}

// newVirtual returns the view of virtual server vs.
func newVirtual(g *Gateway, vs Virtual, version string) *view {
	route := "/virtual/" + vs.Name + "/mcp"
	instructions := vs.Description
	if instructions == "" {
		instructions = "Tools of toolmux's virtual server " + vs.Name + ". Calls are governed by toolmux."
	}
	impl := &mcp.Implementation{Name: "toolmux/" + vs.Name, Version: version}
	server := mcp.NewServer(impl, &mcp.ServerOptions{
		Logger:       g.log,
		Instructions: instructions,
		Capabilities: g.capabilities(),
		SetCacheable: setCacheable,
	})
	patterns, err := toolglob.ParseAll(vs.Tools, true)
	if err != nil {
		g.log.Error("toolmux: virtual server "+vs.Name+": a tool pattern is invalid; it serves no tool", "err", err)
		patterns = nil
	}
	pick := func(t tool.Tool) (tool.Tool, bool) {
		if _, ok := toolglob.Any(patterns, t.Server, t.Name); !ok {
			return t, false
		}
		key := t.Server + "/" + t.Name
		if n, ok := vs.Rename[key]; ok {
			t.Exposed = n
		}
		if d, ok := vs.Describe[key]; ok {
			t.Description = d
		}
		return t, true
	}
	v := newView(g, route, server, pick, vs.ToolSearch)
	v.groups = vs.Groups
	v.impl, v.instructions = impl, instructions
	server.AddReceivingMiddleware(v.sessionMiddleware, v.syncMiddleware)
	server.AddReceivingMiddleware(g.callerMiddleware) // outermost (owners.go)
	v.handler = g.jsonRPCErrors(g.eras(server, true), route, v.leanCall, v.toolName)
	return v
}

// sessionMiddleware tracks the client sessions of a virtual server, each a
// task, from its initialize on (see Gateway.sessionMiddleware).
func (v *view) sessionMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok && sessionless(ss, req) {
			return v.g.sessionlessMiddleware(ctx, v.route, ss, method, req, next)
		}
		res, err := next(ctx, method, req)
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok && method == "initialize" && err == nil {
			init, _ := req.GetParams().(*mcp.InitializeParams)
			v.g.clients.track(ctx, ss, v.route, 0, init)
		}
		return res, err
	}
}

// VirtualNames returns the names of the virtual servers, sorted.
func (g *Gateway) VirtualNames() []string {
	return slices.Sorted(maps.Keys(g.virtual))
}

// serveVirtual serves /virtual/{name}/mcp. A virtual server the caller
// may not use is answered as one that does not exist, and the names the
// answer lists are those it may use.
func (g *Gateway) serveVirtual(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	c := identity.From(r.Context())
	v, ok := g.virtual[name]
	if !ok || !g.mayUse(c, v.groups) {
		msg := fmt.Sprintf("toolmux: no virtual server %q", name)
		if names := visibleRoutes(g, c, g.virtual, func(v *view) []string { return v.groups }); len(names) > 0 {
			msg += "; configured virtual servers: " + strings.Join(names, ", ")
		}
		writeRPCError(w, http.StatusNotFound, nil, codeServerError, msg)
		return
	}
	v.handler.ServeHTTP(w, r)
}
