//go:build unix

package mcpsource

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the server in a process group of its own, so that
// everything it starts (npx starts node, shells start pipelines) can be
// signalled together and a Ctrl-C in toolmux's terminal does not reach it
// before toolmux has closed it properly.
func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	setDeathSignal(cmd.SysProcAttr)
}

func signalGroup(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

func killGroup(pgid int) { signalGroup(pgid, syscall.SIGKILL) }

// groupAlive reports whether any process of the group still exists.
func groupAlive(pgid int) bool {
	return pgid > 0 && syscall.Kill(-pgid, 0) == nil
}
