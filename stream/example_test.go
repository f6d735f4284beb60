package stream_test

import (
	"context"
	"fmt"

	"github.com/toolmux/toolmux/stream"
)

// A hub, a subscriber that joins late and resumes after the first event,
// and the events it receives: the one it missed, replayed, then a live
// one. An SSE client gets the same through the hub's HTTP handler with
// "Last-Event-ID: 1".
func Example() {
	ctx := context.Background()
	h, err := stream.NewHub(ctx)
	if err != nil {
		panic(err)
	}
	defer h.Close(ctx)

	h.Publish(stream.EventStartOfWorkflow, "t-1", stream.StartOfWorkflow("wf-1", "Summarise README.md"))
	h.Publish(stream.EventToolCall, "t-1", stream.ToolCallInput("c-1", "builtin__read_file", map[string]any{"path": "README.md"}))

	sub, err := h.Subscribe(ctx, stream.Filter{Task: "t-1"}, 1)
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	h.Publish(stream.EventToolCall, "t-1", stream.ToolCallResult("c-1", "builtin__read_file", "# toolmux"))

	for range 2 {
		e := <-sub.Events()
		fmt.Println(e.ID, e.Name, string(e.Data))
	}
	// Output:
	// 2 tool_call {"tool_call_id":"c-1","tool_name":"builtin__read_file","tool_input":{"path":"README.md"}}
	// 3 tool_call {"tool_call_id":"c-1","tool_name":"builtin__read_file","tool_input":{"result":"# toolmux"}}
}
