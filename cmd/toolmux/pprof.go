//go:build toolmux_pprof

package main

import (
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/ on http.DefaultServeMux
	"os"
)

// A build for profiling only (go build -tags toolmux_pprof): with
// TOOLMUX_PPROF_ADDR set, the process serves net/http/pprof on that
// address, so a benchmark can take a CPU profile of a running gateway. The
// released binary has none of this.
func init() {
	if addr := os.Getenv("TOOLMUX_PPROF_ADDR"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
