package gateway

import (
	"context"

	"github.com/toolmux/toolmux/tool"
)

// Scheduled is the Caller of an assembled runtime: the tools of one part
// (the pipeline's catalog) and calls made through another (the scheduler,
// for the policy gate and the call events), as toolmux serve and run
// --serve give the gateway:
//
//	g := gateway.New(gateway.Scheduled{Catalog: rt.Pipeline, Calls: rt.Scheduler}, opts)
type Scheduled struct {
	Catalog interface {
		Tools(ctx context.Context) (*tool.Catalog, error)
	}
	Calls interface {
		Call(ctx context.Context, call tool.Call) *tool.Record
	}
}

// Tools returns the catalog's tools.
func (s Scheduled) Tools(ctx context.Context) (*tool.Catalog, error) { return s.Catalog.Tools(ctx) }

// Call makes the call through Calls.
func (s Scheduled) Call(ctx context.Context, call tool.Call) *tool.Record {
	return s.Calls.Call(ctx, call)
}
