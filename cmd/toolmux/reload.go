package main

import (
	"context"
	"errors"
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
	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/metrics"
	"github.com/toolmux/toolmux/ratelimit"
)

// watchDebounce is how long a reload waits for quiet: after the last
// change of the configuration file (--watch), and after the reload that
// ran when a SIGHUP or a change came. Editors and tools write a file in
// several steps (truncate, write, rename), and the file is read once
// they are done.
const watchDebounce = 300 * time.Millisecond

// reloader reloads serve's configuration on SIGHUP and, with --watch,
// when the configuration file changes: one reload at a time, until stop.
//
// The wishes (signals, changes) are coalesced by loop, which alone holds
// the state: a SIGHUP when nothing runs or is due reloads at once; a
// change of the file reloads after watchDebounce of quiet; any wish while
// a reload runs makes one more reload, after the running one and then
// watchDebounce of quiet, never one per wish. Each reload reads the file
// once, when it starts.
type reloader struct {
	a      *app
	rt     *toolmux.Runtime
	g      *gateway.Gateway
	drain  time.Duration
	path   string
	status *reloadStatus
	vis    *visibility // what each caller sees, taken again at each reload

	watcher *fsnotify.Watcher
	stopSig func()
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startReloader starts reloading the configuration of rt on SIGHUP, and on
// changes of its file when watch is set, telling status how the reloads
// go. A configuration that did not come from a file cannot be reloaded:
// SIGHUP is then answered with a line saying so.
func (a *app) startReloader(ctx context.Context, rt *toolmux.Runtime, g *gateway.Gateway, status *reloadStatus, watch bool, drain time.Duration,
	vis *visibility) (*reloader, error) {
	r := &reloader{a: a, rt: rt, g: g, drain: drain, path: rt.Config.Path, status: status, vis: vis}
	if watch {
		if r.path == "" {
			return nil, usageError("--watch: there is no configuration file to watch (give one with --config)")
		}
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, fmt.Errorf("--watch: %w", err)
		}
		// The directory, not the file: a file replaced by a rename (as
		// editors save, and as docs/operations.md asks writers to) is a
		// new file, which a watch on the old one would not see; the
		// rename shows as a creation of the file's name.
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

// wishes are what asked for the next reload, for its log line.
type wishes struct{ hups, changes int }

func (w wishes) String() string {
	var parts []string
	switch {
	case w.hups == 1:
		parts = append(parts, "SIGHUP")
	case w.hups > 1:
		parts = append(parts, fmt.Sprintf("%d SIGHUPs", w.hups))
	}
	switch {
	case w.changes == 1:
		parts = append(parts, "a change of the file")
	case w.changes > 1:
		parts = append(parts, "changes of the file")
	}
	return strings.Join(parts, " and ")
}

// loop turns signals and changes of the file into reloads (see reloader),
// each run in a goroutine of its own so that the wishes that come
// meanwhile are counted, not queued.
func (r *reloader) loop(ctx context.Context, hup <-chan os.Signal) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if r.watcher != nil {
		events, errs = r.watcher.Events, r.watcher.Errors
	}
	base := filepath.Base(r.path)
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	defer quiet.Stop()
	var (
		running bool          // a reload runs
		waiting bool          // quiet runs: a reload starts when it fires
		pending bool          // a wish came while a reload ran
		asked   wishes        // the wishes the next reload answers
		done    chan struct{} // closed when the running reload ends
	)
	start := func() {
		running, done = true, make(chan struct{})
		why, finished := asked.String(), done
		asked = wishes{}
		r.status.began()
		r.wg.Go(func() {
			defer close(finished)
			r.reload(ctx, why)
		})
	}
	wait := func() {
		waiting = true
		quiet.Reset(watchDebounce)
	}
	wish := func(now bool) {
		switch {
		case running:
			pending = true
		case now && !waiting:
			start()
		default:
			wait()
		}
		r.status.setPending(pending || waiting)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			asked.hups++
			wish(true)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Base(ev.Name) == base && !ev.Has(fsnotify.Chmod) {
				asked.changes++
				wish(false)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			fmt.Fprintf(r.a.stderr, "toolmux: --watch: %v\n", err)
		case <-quiet.C:
			waiting = false
			start()
			r.status.setPending(false)
		case <-done:
			running, done = false, nil
			if pending {
				pending = false
				wait()
			}
			r.status.setPending(waiting)
		}
	}
}

// reload reads the file again and applies it, or says why not and keeps
// the configuration in use.
func (r *reloader) reload(ctx context.Context, why string) {
	stderr := r.a.stderr
	if r.path == "" {
		fmt.Fprintln(stderr, "toolmux: SIGHUP: no configuration file to reload (the built-in defaults are in use)")
		r.status.ended(why, nil)
		return
	}
	// One read of the whole file, parsed from those bytes: config.Load
	// reads it once (positions in errors come from the same bytes).
	cfg, err := config.Load(r.path)
	if err != nil {
		fmt.Fprintf(stderr, "toolmux: reload of %s (%s) refused: invalid configuration:\n%v\ntoolmux: the configuration in use stays\n", r.path, why, err)
		r.status.ended(why, &api.ReloadError{Kind: "invalid_config", Message: err.Error()})
		return
	}
	res, err := r.rt.Reload(ctx, cfg, r.drain)
	if err != nil {
		kind := "reload_failed"
		if errors.As(err, new(*toolmux.NoServersError)) {
			kind = "no_servers"
		}
		fmt.Fprintf(stderr, "toolmux: reload of %s (%s) refused: %v\ntoolmux: the configuration in use stays\n", r.path, why, err)
		r.status.ended(why, &api.ReloadError{Kind: kind, Message: err.Error()})
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
	// The limits per caller apply to the next call (budgets carry over).
	r.g.Limits().Set(ratelimit.FromConfig(cfg.RateLimits))
	// What each caller sees (groups.NAME.tools), from the next request
	// on: the file was checked, so it does not fail.
	if err := r.vis.set(cfg); err != nil {
		fmt.Fprintf(stderr, "toolmux: reload: the groups' tools: %v; those in use stay\n", err)
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
	r.status.ended(why, nil)
}

// reloadStatus is how the reloads went, for /api/info and the metrics.
type reloadStatus struct {
	mu   sync.Mutex
	info api.ReloadInfo
}

// newReloadStatus returns the status of the reloads of path; nil without
// a file (nothing to report).
func newReloadStatus(path string) *reloadStatus {
	if path == "" {
		return nil
	}
	return &reloadStatus{info: api.ReloadInfo{Path: path}}
}

func (s *reloadStatus) began() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.Running = true
}

func (s *reloadStatus) setPending(p bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.Pending = p
}

// ended records a reload's end: refused, with why, or applied.
func (s *reloadStatus) ended(trigger string, refused *api.ReloadError) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.Running = false
	if refused != nil {
		s.info.Refused++
	} else {
		s.info.Applied++
	}
	s.info.Last = &api.ReloadOutcome{At: time.Now().UTC(), Trigger: trigger, Error: refused}
}

// infoFunc is snapshot for api.Options.Reload; nil without a file.
func (s *reloadStatus) infoFunc() func() *api.ReloadInfo {
	if s == nil {
		return nil
	}
	return s.snapshot
}

// snapshot is the status now, for /api/info.
func (s *reloadStatus) snapshot() *api.ReloadInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.info
	return &in
}

// counts are the status's counters, for the metrics.
func (s *reloadStatus) counts() metrics.Reloads {
	s.mu.Lock()
	defer s.mu.Unlock()
	return metrics.Reloads{Applied: s.info.Applied, Refused: s.info.Refused,
		LastRefused: s.info.Last != nil && s.info.Last.Error != nil}
}
