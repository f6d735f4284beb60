package gateway

import (
	"net/http"
	"time"

	"github.com/toolmux/toolmux/internal/jsonscan"
)

// ServeTasksForTest is the tasks hook of /mcp, for benchmarks.
func ServeTasksForTest(g *Gateway, w http.ResponseWriter, r *http.Request, body []byte, msg jsonscan.Message) bool {
	return g.serveTasks(w, r, routeMCP, body, msg)
}

// SetNowForTest sets the clock the login cookie's expiry is read by.
func (p *PageLogin) SetNowForTest(now func() time.Time) { p.now = now }
