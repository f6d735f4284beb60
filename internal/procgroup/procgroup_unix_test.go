//go:build unix

package procgroup_test

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/procgroup"
)

// start starts sh -c script as the leader of a group of its own.
func start(t *testing.T, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	procgroup.Setup(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A test that failed halfway leaves nothing running; one that
		// reaped the leader has let its pid go, for another group to take.
		if cmd.ProcessState == nil {
			procgroup.Kill(cmd.Process.Pid)
			_ = cmd.Wait()
		}
	})
	return cmd
}

// eventually polls cond for up to five seconds.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func TestSetupKeepsAttributes(t *testing.T) {
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Noctty: true}
	procgroup.Setup(cmd)
	if !cmd.SysProcAttr.Setpgid || !cmd.SysProcAttr.Noctty {
		t.Errorf("SysProcAttr = %+v, want Setpgid and the Noctty set before", cmd.SysProcAttr)
	}
}

func TestSignalReachesTheWholeGroup(t *testing.T) {
	// The leader's child is what a plain kill of the leader would leave.
	cmd := start(t, "sleep 60 & wait")
	pgid := cmd.Process.Pid
	if !procgroup.Alive(pgid) || !procgroup.AliveIgnoringZombies(pgid) {
		t.Fatal("a running group is not alive")
	}
	procgroup.Signal(pgid, syscall.SIGTERM)
	if err := cmd.Wait(); err == nil {
		t.Fatal("the leader exited cleanly after SIGTERM")
	}
	if code, sig := procgroup.ExitStatus(cmd.ProcessState); code != -1 || sig != syscall.SIGTERM {
		t.Errorf("ExitStatus = %d, %v; want -1, SIGTERM", code, sig)
	}
	// The orphaned sleep is reaped by whoever adopted it, if anyone: only
	// on Linux can a zombie left unreaped be told from a live member.
	if !eventually(func() bool { return !procgroup.AliveIgnoringZombies(pgid) }) {
		t.Error("the group is still alive after SIGTERM: its member survived")
	}
}

func TestKill(t *testing.T) {
	cmd := start(t, "trap '' TERM; sleep 60 & wait")
	procgroup.Kill(cmd.Process.Pid)
	_ = cmd.Wait()
	if _, sig := procgroup.ExitStatus(cmd.ProcessState); sig != syscall.SIGKILL {
		t.Errorf("signal = %v, want SIGKILL", sig)
	}
}

func TestExitCode(t *testing.T) {
	cmd := start(t, "exit 3")
	_ = cmd.Wait()
	if code, sig := procgroup.ExitStatus(cmd.ProcessState); code != 3 || sig != 0 {
		t.Errorf("ExitStatus = %d, %v; want 3, 0", code, sig)
	}
}

// TestZombie: a leader that has exited but is not reaped yet is a zombie,
// which kill(2) still finds.
func TestZombie(t *testing.T) {
	cmd := start(t, "exit 0")
	pgid := cmd.Process.Pid
	if runtime.GOOS == "linux" {
		if !eventually(func() bool { return !procgroup.AliveIgnoringZombies(pgid) }) {
			t.Fatal("a group of one zombie counts as alive")
		}
	}
	if !procgroup.Alive(pgid) {
		t.Error("Alive does not count a zombie")
	}
	_ = cmd.Wait()
	if procgroup.Alive(pgid) || procgroup.AliveIgnoringZombies(pgid) {
		t.Error("a reaped group is alive")
	}
}

func TestNoGroup(t *testing.T) {
	for _, pgid := range []int{0, -1} {
		if procgroup.Alive(pgid) || procgroup.AliveIgnoringZombies(pgid) {
			t.Errorf("pgid %d is alive", pgid)
		}
		// Were it passed on, kill(2) would signal the test's own group.
		procgroup.Signal(pgid, syscall.SIGTERM)
	}
}

func TestSignalName(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{
		syscall.SIGTERM:     "SIGTERM",
		syscall.SIGKILL:     "SIGKILL",
		syscall.SIGSEGV:     "SIGSEGV",
		syscall.SIGSYS:      "SIGSYS",
		syscall.Signal(200): "signal 200",
	} {
		if got := procgroup.SignalName(sig); got != want {
			t.Errorf("SignalName(%d) = %q, want %q", int(sig), got, want)
		}
	}
}
