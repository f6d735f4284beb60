package fleet_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/llmtest"
)

// The summary lists the RecentRuns that ended last, newest first, with
// their worker, duration and, for a failed run, its error's kind: of
// RecentRuns+1 ended runs, the one that ended first is left out.
func TestSummarizeRecent(t *testing.T) {
	s := startNATS(t, t.TempDir(), 0)
	o := fleet.Options{Memory: true, Lease: 10 * time.Second}
	f := open(t, s, o)
	// A task "fail" is refused by the model, which fails its run.
	model := llmtest.OpenAI(t, func(_ int, req llmtest.Request) llmtest.Reply {
		if task, _, _ := req.Dialogue(); strings.HasPrefix(task, "fail") {
			return llmtest.Reply{Status: 400, Body: `{"error": {"message": "the model refuses this task", "type": "invalid_request_error"}}`}
		}
		return scriptAppend(req)
	})
	newNode(t, s, o, "w1", model, newEffects(), fleet.WorkerOptions{}).start()
	// One after the other, so that they end in this order.
	var ids []string
	for i := range fleet.RecentRuns {
		id := fmt.Sprintf("r%02d", i)
		if _, _, err := f.Submit(bg, fleet.Request{ID: id, Task: "append " + id}); err != nil {
			t.Fatal(err)
		}
		if r := wait(t, f, id); r.Status != fleet.StatusDone {
			t.Fatalf("run %s: %+v", id, r)
		}
		ids = append(ids, id)
	}
	if _, _, err := f.Submit(bg, fleet.Request{ID: "bad", Task: "fail now"}); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, f, "bad"); r.Status != fleet.StatusFailed || r.ErrorKind != "model_failed" {
		t.Fatalf("run bad: %+v", r)
	}
	ids = append(ids, "bad")

	sum, err := f.Summarize(bg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Runs[fleet.StatusDone] != fleet.RecentRuns || sum.Runs[fleet.StatusFailed] != 1 {
		t.Errorf("counts %v", sum.Runs)
	}
	var got []string
	for _, r := range sum.Recent {
		got = append(got, r.ID)
		if r.Worker != "w1" || r.Started.IsZero() || r.Ended.Before(r.Started) || r.DurationMS != r.Ended.Sub(r.Started).Milliseconds() {
			t.Errorf("recent run %+v", r)
		}
	}
	var want []string
	for i := len(ids) - 1; i >= len(ids)-fleet.RecentRuns; i-- {
		want = append(want, ids[i])
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("recent runs %v, want %v (the %d that ended last, newest first)", got, want, fleet.RecentRuns)
	}
	if b := sum.Recent[0]; b.Status != fleet.StatusFailed || b.ErrorKind != "model_failed" || !strings.Contains(b.Error, "refuses") {
		t.Errorf("the failed run: %+v", b)
	}
	if d := sum.Recent[1]; d.Status != fleet.StatusDone || d.ErrorKind != "" || d.Error != "" {
		t.Errorf("a done run: %+v", d)
	}
	// A caller who sees some runs only is listed those.
	mine, err := f.Summarize(bg, func(r *fleet.Run) bool { return r.ID == "r00" })
	if err != nil {
		t.Fatal(err)
	}
	if len(mine.Recent) != 1 || mine.Recent[0].ID != "r00" {
		t.Errorf("a caller's own recent runs: %+v", mine.Recent)
	}
}
