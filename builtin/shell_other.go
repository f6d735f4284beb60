//go:build !unix

package builtin

import (
	"os"
	"syscall"
)

// shellSupported is false: without process groups and signals, shell could
// not stop what a command starts.
const shellSupported = false

func procAttr() *syscall.SysProcAttr             { return nil }
func signalGroup(int, bool)                      {}
func groupAlive(int) bool                        { return false }
func exitSignal(*os.ProcessState) (string, bool) { return "", false }
