package gateway

import (
	"net/http"

	"github.com/toolmux/toolmux/internal/jsonscan"
)

// ServeTasksForTest is the tasks hook of /mcp, for benchmarks.
func ServeTasksForTest(g *Gateway, w http.ResponseWriter, r *http.Request, body []byte, msg jsonscan.Message) bool {
	return g.serveTasks(w, r, routeMCP, body, msg)
}
