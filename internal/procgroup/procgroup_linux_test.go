//go:build linux

package procgroup_test

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/toolmux/toolmux/internal/procgroup"
)

func TestSetupDeathSignal(t *testing.T) {
	cmd := exec.Command("true")
	procgroup.Setup(cmd)
	if cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Errorf("Pdeathsig = %v, want SIGKILL", cmd.SysProcAttr.Pdeathsig)
	}
}
