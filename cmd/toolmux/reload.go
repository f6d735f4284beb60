package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
)

// watchDebounce is how long --watch waits after the last change of the
// configuration file before it reloads: editors write a file in several
// steps (truncate, write, rename), and a reload of half a file would be
// refused.
const watchDebounce = 300 * time.Millisecond

// reloader reloads serve's configuration on SIGHUP and, with --watch,
// when the configuration file changes: one reload at a time, in its own
// goroutine, until stop.
type reloader struct {
	a     *app
	rt    *toolmux.Runtime
	g     *gateway.Gateway
	drain time.Duration
	path  string

	wake    chan struct{} // a reload is wanted; buffered, so wishes coalesce
	watcher *fsnotify.Watcher
	stopSig func()
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startReloader starts reloading the configuration of rt on SIGHUP, and on
// changes of its file when watch is set. A configuration that did not
// come from a file cannot be reloaded: SIGHUP is then answered with a
// line saying so.
func (a *app) startReloader(ctx context.Context, rt *toolmux.Runtime, g *gateway.Gateway, watch bool, drain time.Duration) (*reloader, error) {
	r := &reloader{a: a, rt: rt, g: g, drain: drain, path: rt.Config.Path, wake: make(chan struct{}, 1)}
	if watch {
		if r.path == "" {
			return nil, usageError("--watch: there is no configuration file to watch (give one with --config)")
		}
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, fmt.Errorf("--watch: %w", err)
		}
		// The directory, not the file: editors and tools that replace the
		// file by a rename would leave a watch on the file watching the
		// old one.
		if err := w.Add(filepath.Dir(r.path)); err != nil {
			w.Close()
			return nil, fmt.Errorf("--watch: %w", err)
		}
		r.watcher = w
	}
	ctx, r.cancel = context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	r.stopSig = func() { signal.Stop(hup) }
	r.wg.Go(func() { r.loop(ctx, hup) })
	if r.watcher != nil {
		r.wg.Go(func() { r.watch(ctx) })
	}
	return r, nil
}

// stop ends the reloader, waiting for a reload in progress.
func (r *reloader) stop() {
	r.stopSig()
	r.cancel()
	if r.watcher != nil {
		r.watcher.Close()
	}
	r.wg.Wait()
}

func (r *reloader) want() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// loop reloads once per wish.
func (r *reloader) loop(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload(ctx, "SIGHUP")
		case <-r.wake:
			r.reload(ctx, "a change of the file")
		}
	}
}

// watch turns the file's changes into wishes, after watchDebounce of
// quiet.
func (r *reloader) watch(ctx context.Context) {
	base := filepath.Base(r.path)
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-r.watcher.Events:
			if !ok {
				return
			}
			if filepath.Base(ev.Name) == base && !ev.Has(fsnotify.Chmod) {
				t.Reset(watchDebounce)
			}
		case err, ok := <-r.watcher.Errors:
			if !ok {
				return
			}
			fmt.Fprintf(r.a.stderr, "toolmux: --watch: %v\n", err)
		case <-t.C:
			r.want()
		}
	}
}

// reload reads the file again and applies it, or says why not and keeps
// the configuration in use.
func (r *reloader) reload(ctx context.Context, why string) {
	stderr := r.a.stderr
	if r.path == "" {
		fmt.Fprintln(stderr, "toolmux: SIGHUP: no configuration file to reload (the built-in defaults are in use)")
		return
	}
	cfg, err := config.Load(r.path)
	if err != nil {
		fmt.Fprintf(stderr, "toolmux: reload (%s) refused: invalid configuration:\n%v\ntoolmux: the configuration in use stays\n", why, err)
		return
	}
	res, err := r.rt.Reload(ctx, cfg, r.drain)
	if err != nil {
		fmt.Fprintf(stderr, "toolmux: reload (%s) refused: %v\ntoolmux: the configuration in use stays\n", why, err)
		return
	}
	var parts []string
	for _, p := range []struct {
		what  string
		names []string
	}{{"added", res.Added}, {"removed", res.Removed}, {"restarted", res.Restarted}} {
		if len(p.names) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.names, ", "))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no server changed")
	}
	fmt.Fprintf(stderr, "toolmux: reloaded %s (%s): %s; policy and pipeline settings apply to the next call\n", r.path, why, strings.Join(parts, "; "))
	if len(res.Unchanged) > 0 {
		fmt.Fprintf(stderr, "toolmux: reload: %s changed in the file and take effect only at the next start\n", strings.Join(res.Unchanged, ", "))
	}
	// Lists the servers added and tells the clients what changed
	// (notifications/tools/list_changed).
	if err := r.g.Sync(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "toolmux: reload: updating the gateway's tools: %v\n", err)
	}
	st := r.rt.Manager.Health()
	for _, h := range st {
		for _, name := range append(res.Added, res.Restarted...) {
			if h.Name == name && h.Error != "" {
				fmt.Fprintf(stderr, "toolmux: server %s failed: %s\n", h.Name, h.Error)
			}
		}
	}
}
