package fleet_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tasklog/jsjournal"
)

var bg = context.Background()

// startNATS starts an embedded JetStream server for one test, as
// serve --nats-listen does, its data in dir, on port (0: any).
func startNATS(t *testing.T, dir string, port int) *fleet.Server {
	t.Helper()
	s, err := fleet.StartServer(fleet.ServerOptions{Listen: fmt.Sprintf("127.0.0.1:%d", port), StoreDir: dir, Name: "fleet-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func natsPort(s *fleet.Server) int { return s.Addr().(*net.TCPAddr).Port }

// open connects to the fleet on s (a connection of its own, as a worker
// process has), closed at the end of the test.
func open(t *testing.T, s *fleet.Server, o fleet.Options) *fleet.Fleet {
	t.Helper()
	f, err := fleet.Connect(bg, s.ClientURL(), t.Name(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// effects is the judge of side effects: the lines the append tool wrote.
type effects struct {
	mu    sync.Mutex
	lines []string
	// started is told of every call of append as it starts.
	started chan string
	// hold makes every call of append wait until the call is cancelled,
	// after writing its line (a tool whose effect happened and whose
	// worker then vanished).
	hold bool
}

func newEffects() *effects { return &effects{started: make(chan string, 100)} }

func (e *effects) count(line string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, l := range e.lines {
		if l == line {
			n++
		}
	}
	return n
}

// source is a tool source of fx: append (not idempotent: declared
// neither read-only nor idempotent) and peek (read-only), which both
// count their calls in lines ("peek:LINE" for peek).
func (e *effects) source() *funcsource.Source {
	type appendArgs struct {
		Line string `json:"line"`
	}
	return funcsource.New("fx",
		funcsource.Func("append", "Appends a line.", func(ctx context.Context, in appendArgs) (string, error) {
			e.mu.Lock()
			e.lines = append(e.lines, in.Line)
			hold := e.hold
			e.mu.Unlock()
			select {
			case e.started <- in.Line:
			default:
			}
			if hold {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return "appended " + in.Line, nil
		}),
		funcsource.Func("peek", "Looks at a line (read-only).", func(ctx context.Context, in appendArgs) (string, error) {
			e.mu.Lock()
			e.lines = append(e.lines, "peek:"+in.Line)
			hold := e.hold
			e.mu.Unlock()
			select {
			case e.started <- "peek:" + in.Line:
			default:
			}
			if hold {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return "saw " + in.Line, nil
		}, funcsource.ReadOnly()))
}

var appendTask = regexp.MustCompile(`(append|peek) (\S+)`)

// appendModel is a scripted model: a task "append LINE" makes one call of
// fx__append, then answers "appended LINE | tool said: …" ("peek LINE":
// fx__peek, "peeked LINE | …"). turnDelay
// slows the answering turn.
func appendModel(t *testing.T, turnDelay time.Duration) *llmtest.Server {
	return llmtest.OpenAI(t, func(_ int, req llmtest.Request) llmtest.Reply {
		r := scriptAppend(req)
		if len(r.Calls) == 0 {
			r.Delay = turnDelay
		}
		return r
	})
}

// scriptAppend is appendModel's reply to req.
func scriptAppend(req llmtest.Request) llmtest.Reply {
	task, assistants, results := req.Dialogue()
	mm := appendTask.FindStringSubmatch(task)
	switch {
	case mm == nil:
		return llmtest.Reply{Content: "no task I know"}
	case assistants == 0:
		return llmtest.Reply{Calls: []llmtest.Call{{Name: "fx__" + mm[1], Args: fmt.Sprintf(`{"line": %q}`, mm[2])}}}
	}
	last := ""
	if len(results) > 0 {
		last = results[len(results)-1]
	}
	return llmtest.Reply{Content: mm[1] + "ed " + mm[2] + " | tool said: " + strings.Join(strings.Fields(last), " ")}
}

// node is a worker as `toolmux worker` assembles one: its own connection,
// journal, task log (on the journal), event hub (on the fleet's events
// stream), call ledger and runtime.
type node struct {
	f       *fleet.Fleet
	j       *jsjournal.Journal
	rt      *toolmux.Runtime
	w       *fleet.Worker
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
	// close stops the worker and closes its runtime, before the NATS
	// server it uses is shut down (a test that starts a server after its
	// nodes calls it itself: cleanups run last first).
	close func()
}

// nodeOptions are the variants of a node.
type nodeOptions struct {
	// url is the NATS server's URL for the node (a proxy's); "": the
	// server's.
	url string
	// unfenced leaves the worker without its journal's claims
	// (WorkerOptions.Journal nil): it does not learn of a run lost.
	unfenced bool
	// creds are the worker's own, as a member of the fleet.
	creds *fleet.Credentials
	// cfg changes the worker's configuration.
	cfg func(*config.Config)
}

// newNode assembles a worker named name; start runs it. The runtime is
// closed at the end of the test.
func newNode(t *testing.T, s *fleet.Server, o fleet.Options, name string, model *llmtest.Server, fx *effects, wo fleet.WorkerOptions, no ...nodeOptions) *node {
	t.Helper()
	var nopt nodeOptions
	if len(no) > 0 {
		nopt = no[0]
	}
	url := s.ClientURL()
	if nopt.url != "" {
		url = nopt.url
	}
	var co fleet.ConnectOptions
	if nopt.creds != nil {
		co = fleet.ConnectOptions{Credentials: nopt.creds, Role: fleet.RoleWorker}
	}
	f, err := fleet.ConnectWith(bg, url, name, o, co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	n := &node{f: f}
	if n.j, err = n.f.OpenJournal(bg); err != nil {
		t.Fatal(err)
	}
	store := fleet.NewEventStore(n.f, name)
	hub, err := stream.NewHub(bg, stream.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	m, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: model.BaseURL(), Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Builtin.Enabled = false
	cfg.DataDir = t.TempDir()
	cfg.TaskLog.Enabled = true
	if nopt.cfg != nil {
		nopt.cfg(cfg)
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("FLEET_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("worker", name)
	}
	ledger := n.f.Ledger(fleet.LedgerOptions{Worker: name, Logger: log})
	n.rt, err = toolmux.Open(bg, cfg, toolmux.Options{Logger: log, Model: m, Mode: policy.ModeYolo, Events: hub,
		Sources:    []manager.Source{fx.source()},
		TaskLog:    []tasklog.Option{tasklog.WithJournal(n.j)},
		Middleware: []pipeline.Middleware{ledger.Middleware}})
	if err != nil {
		t.Fatal(err)
	}
	n.close = sync.OnceFunc(func() {
		n.stop()
		n.rt.Close(bg)
		hub.Close(bg)
		n.j.Close()
	})
	t.Cleanup(n.close)
	wo.Name, wo.Runner, wo.Journal, wo.Events = name, n.rt, n.j, store
	if nopt.unfenced {
		wo.Journal = nil
	}
	wo.Logger = log
	if n.w, err = n.f.NewWorker(bg, wo); err != nil {
		t.Fatal(err)
	}
	return n
}

// start runs the worker until stop.
func (n *node) start() *node {
	ctx, cancel := context.WithCancel(bg)
	n.cancel, n.done = cancel, make(chan struct{})
	go func() { defer close(n.done); n.w.Run(ctx) }()
	return n
}

// stop ends the worker's Run (drains it) and waits for it.
func (n *node) stop() {
	if n.cancel == nil || n.stopped {
		return
	}
	n.stopped = true
	n.cancel()
	<-n.done
}

// waitFor waits for a run to reach a state that ok accepts.
func waitFor(t *testing.T, f *fleet.Fleet, id string, ok func(*fleet.Run) bool) *fleet.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	var last *fleet.Run
	err := f.Watch(ctx, func(r *fleet.Run) bool {
		last = r
		return !ok(r)
	}, id)
	if err != nil {
		t.Fatalf("run %s: %v (last state %+v)", id, err, last)
	}
	return last
}

func wait(t *testing.T, f *fleet.Fleet, id string) *fleet.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	r, err := f.Wait(ctx, id)
	if err != nil {
		t.Fatalf("run %s: %v (last state %+v)", id, err, r)
	}
	return r
}

// proxy is a TCP proxy to a NATS server that a test can freeze: while
// frozen, nothing passes either way (a network partition the
// connections do not notice, as a worker behind a stalled link).
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	frozen bool
	thawed *sync.Cond
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	p.thawed = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *proxy) url() string { return "nats://" + p.l.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(u, c) })
		p.wg.Go(func() { p.pipe(c, u) })
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.frozen {
				p.thawed.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *proxy) freeze(on bool) {
	p.mu.Lock()
	p.frozen = on
	p.mu.Unlock()
	p.thawed.Broadcast()
}

func (p *proxy) close() {
	p.freeze(false)
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
