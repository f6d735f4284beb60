package tasklog_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tasklog"
)

// procStart reads field 22 of /proc/PID/stat, as the log records owners.
func procStart(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Skip("no /proc here:", err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return f[19]
}

// On Open, a running task whose process is gone is interrupted; tasks of
// live processes, of other machines, and recent tasks without an owner are
// left running.
func TestOpenInterruptsTheTasksOfDeadProcesses(t *testing.T) {
	dir := t.TempDir()
	db := legacyV3(t, dir)

	host, _ := os.Hostname()
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Process.Kill(); live.Wait() })
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	livePid := live.Process.Pid
	now := time.Now()
	old := now.Add(-2 * time.Hour).UnixNano()
	recent := now.Add(-time.Minute).UnixNano()
	rows := []struct {
		id, owner string
		updated   int64
		want      tasklog.Status
	}{
		{"dead", fmt.Sprintf("%s/%d/1", host, dead.Process.Pid), recent, tasklog.StatusInterrupted},
		{"live", fmt.Sprintf("%s/%d/%s", host, livePid, procStart(t, livePid)), old, tasklog.StatusRunning},
		// The same pid, started at another time: another program now.
		{"reused", fmt.Sprintf("%s/%d/1", host, livePid), recent, tasklog.StatusInterrupted},
		{"elsewhere", fmt.Sprintf("another-%s/%d/1", host, dead.Process.Pid), old, tasklog.StatusRunning},
		{"legacy-old", "", old, tasklog.StatusInterrupted},
		{"legacy-recent", "", recent, tasklog.StatusRunning},
		{"done", fmt.Sprintf("%s/%d/1", host, dead.Process.Pid), old, tasklog.StatusSuccess},
	}
	for _, r := range rows {
		status := "running"
		if r.want == tasklog.StatusSuccess {
			status = "success"
		}
		if _, err := db.Exec(`INSERT INTO tasks (id, status, created_at, updated_at, owner) VALUES (?, ?, ?, ?, ?)`,
			r.id, status, r.updated, r.updated, r.owner); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	l := open(t, dir)
	for _, r := range rows {
		task, err := l.Task(ctx, r.id)
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != r.want {
			t.Errorf("%s: %s, want %s", r.id, task.Status, r.want)
		}
		if r.want != tasklog.StatusInterrupted {
			continue
		}
		steps, err := l.Steps(ctx, r.id)
		if err != nil || len(steps) != 1 || steps[0].Name != "interrupted" || steps[0].Level != "warning" {
			t.Errorf("%s: steps %+v %v", r.id, steps, err)
		}
		t.Logf("%s: %s", r.id, steps[0].Message)
	}
}

// FinishOwned ends the tasks this process runs, and only those.
func TestFinishOwned(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	if err := l.StartTask(ctx, tasklog.Task{ID: "mine"}); err != nil {
		t.Fatal(err)
	}
	if err := l.StartTask(ctx, tasklog.Task{ID: "ended"}); err != nil {
		t.Fatal(err)
	}
	if err := l.FinishTask(ctx, "ended", tasklog.StatusSuccess, "ok"); err != nil {
		t.Fatal(err)
	}
	// A task created by a call record alone is this process's too.
	l.Record(ctx, fullRecord("recorded"))
	if err := tasklog.StartTaskOwnedBy(l, "theirs", "elsewhere/1/1", 1); err != nil {
		t.Fatal(err)
	}
	ids, err := l.FinishOwned(ctx, tasklog.StatusShutdown, "toolmux serve stopped")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ids, ",") != "mine,recorded" && strings.Join(ids, ",") != "recorded,mine" {
		t.Fatalf("finished %v", ids)
	}
	for id, want := range map[string]tasklog.Status{"mine": tasklog.StatusShutdown, "recorded": tasklog.StatusShutdown,
		"ended": tasklog.StatusSuccess, "theirs": tasklog.StatusRunning} {
		task, err := l.Task(ctx, id)
		if err != nil || task.Status != want {
			t.Errorf("%s: %+v %v, want %s", id, task, err, want)
		}
		if want == tasklog.StatusShutdown && (task.FinalAnswer != "toolmux serve stopped" || task.Ended.IsZero()) {
			t.Errorf("%s: %+v", id, task)
		}
	}
	if _, err := l.FinishOwned(ctx, tasklog.StatusRunning, ""); err == nil {
		t.Error("FinishOwned accepted running")
	}
}

// The statuses of a session's end are final statuses like the others.
func TestSessionStatuses(t *testing.T) {
	l := open(t, "")
	for _, st := range []tasklog.Status{tasklog.StatusClosed, tasklog.StatusIdle, tasklog.StatusShutdown} {
		id := "s-" + string(st)
		if err := l.StartTask(ctx, tasklog.Task{ID: id, Input: "MCP session"}); err != nil {
			t.Fatal(err)
		}
		if err := l.FinishTask(ctx, id, st, "ended"); err != nil {
			t.Fatal(err)
		}
		got, err := l.Tasks(ctx, tasklog.Filter{Status: st})
		if err != nil || len(got) != 1 || got[0].ID != id || got[0].Ended.IsZero() {
			t.Errorf("%s: %+v %v", st, got, err)
		}
	}
}
