// Command forwarder is a BitTorrent tracker that forwards its clients'
// announces to upstream trackers through a queue.Queue: the library's
// first user.
//
//	go run ./examples/forwarder -demo 20s
//	go run ./examples/forwarder -listen :6969 -upstream http://tracker.example/announce -upstream udp://other.example:6969
//	go run ./examples/forwarder -listen 0.0.0.0:6969,[::]:6969 -store postgres://user@db:5432/forwarder -upstream ...
//
// Every queue setting is a flag and an environment variable (QueueConfig);
// -h lists them with their defaults.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/examples/internal/storeflag"
)

// settings are the command's own flags, beyond QueueConfig.
type settings struct {
	listen    listFlag // -listen: one or more addresses
	upstreams []string
	interval  time.Duration
	timeout   time.Duration
	demo      time.Duration
	verbose   bool
	store     string // -store: memory, postgres://…, redis://… or sqlite:///path
	forward   ForwardMode
	maxPeers  int
	trustIP   prefixList
	otel      string        // -otel: "" or stdout
	http      string        // -http: fast (httpserve.go) or std (net/http alone)
	budget    time.Duration // -forward-budget; 0 turns the budget off
	procs     procsFlag     // -procs: auto, or a fixed GOMAXPROCS
	traceOut  io.Writer     // where -otel stdout writes (run's stdout)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	qc, s, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "forwarder:", err)
		return 2
	}
	s.traceOut = stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if s.demo > 0 {
		err = runDemo(ctx, qc, s, stdout)
	} else {
		err = serve(ctx, qc, s, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "forwarder:", err)
		return 1
	}
	return 0
}

// parseArgs reads the environment, then the flags (which win).
func parseArgs(args []string, stderr io.Writer) (QueueConfig, settings, error) {
	qc := DefaultQueueConfig()
	s := settings{listen: listFlag{vals: []string{"127.0.0.1:6969"}}, http: httpFast, interval: 30 * time.Minute, timeout: 10 * time.Second, maxPeers: defaultMaxPeers, budget: defaultForwardBudget}
	if err := qc.FromEnv(""); err != nil {
		return qc, s, err
	}
	if err := s.fromEnv(); err != nil {
		return qc, s, err
	}
	fs := flag.NewFlagSet("forwarder", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: forwarder [flags]\n\n"+
			"A BitTorrent tracker that forwards announces to upstream trackers through a queue.\n"+
			"Flags may be written with one dash or two; each can also be set by the environment\n"+
			"variable named in its description (a flag wins over its variable).\n\n")
		fs.PrintDefaults()
	}
	qc.RegisterFlags(fs)
	fs.Var(&s.listen, "listen", "`ADDR` serving /announce, /scrape, /stats and /metrics; comma-separated or repeated for several, e.g. 127.0.0.1:6969,[::1]:6969 (env FORWARDER_LISTEN)")
	fs.Func("upstream", "upstream tracker: URL or NAME=URL, with http://, https:// or udp://host:port; repeat for more (env FORWARDER_UPSTREAMS, comma-separated)", func(v string) error {
		s.upstreams = append(s.upstreams, v)
		return nil
	})
	fs.DurationVar(&s.interval, "interval", s.interval, "announce interval given to clients (env FORWARDER_INTERVAL)")
	fs.DurationVar(&s.timeout, "upstream-timeout", s.timeout, "timeout of one announce to an upstream (env FORWARD_TIMEOUT)")
	fs.DurationVar(&s.demo, "demo", 0, "run the self-contained demo for this long and exit: simulated upstreams and clients on 127.0.0.1 (e.g. 20s)")
	fs.BoolVar(&s.verbose, "v", false, "verbose: the server also logs every job's outcome (debug level) besides the queue's state changes; the demo logs queue events (target suspended, disabled, jobs dead-lettered) to stderr")
	fs.StringVar(&s.store, "store", s.store, storeflag.Usage+" (env FORWARDER_STORE)")
	fs.Var(&s.forward, "forward", "what an upstream's interval spaces out, `MODE` peer (the default: every local peer reaches every upstream, one announce per peer per interval) or torrent (one announce per torrent per interval; upstreams learn few local peers) (env FORWARDER_FORWARD)")
	fs.DurationVar(&s.budget, "forward-budget", s.budget, "forward only with the CPU the announces leave: narrow the forwards run at once while the Go scheduler's p99 latency is above `LATENCY`; 0 turns the budget off (env FORWARDER_FORWARD_BUDGET)")
	fs.IntVar(&s.maxPeers, "max-peers", s.maxPeers, "hold at most `N` local peers; past it the least recently seen is evicted (env FORWARDER_MAX_PEERS)")
	fs.Var(&s.trustIP, "trust-ip-from", "believe the ip parameter from clients in these `CIDR`s (comma-separated), besides loopback, which always is (env FORWARDER_TRUST_IP_FROM)")
	fs.StringVar(&s.otel, "otel", s.otel, "trace every announce with OpenTelemetry: `EXPORTER` stdout writes each span as a JSON line on stdout, one trace per announce (its request, its jobs' create and run spans) (env FORWARDER_OTEL)")
	fs.StringVar(&s.http, "http", s.http, "the announce path's HTTP server, `SERVER` fast (plain GET /announce requests answered without net/http's per-request goroutine, everything else handed to net/http) or std (every request through net/http; -otel implies it) (env FORWARDER_HTTP)")
	fs.Var(&s.procs, "procs", "run goroutines on `N` CPUs (GOMAXPROCS), or auto: one while one CPU serves the load, doubled up to the CPUs the process may use while the load keeps them busy (a GOMAXPROCS environment variable fixes the count as well; -demo keeps the runtime's count) (env FORWARDER_PROCS)")
	envUpstreams := s.upstreams
	s.upstreams = nil
	if err := fs.Parse(args); err != nil {
		return qc, s, err
	}
	if fs.NArg() > 0 {
		return qc, s, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if len(s.upstreams) == 0 {
		s.upstreams = envUpstreams
	}
	if s.demo > 0 {
		// The demo has its own preset; flags given on the command line
		// still win over it.
		preset := demoQueueConfig()
		pfs := flag.NewFlagSet("demo", flag.ContinueOnError)
		preset.RegisterFlags(pfs)
		var err error
		fs.Visit(func(f *flag.Flag) {
			if pfs.Lookup(f.Name) != nil && err == nil {
				err = pfs.Set(f.Name, f.Value.String())
			}
		})
		qc = preset
		if err != nil {
			return qc, s, err
		}
	}
	if err := qc.Validate(); err != nil {
		return qc, s, err
	}
	if s.otel != "" && s.otel != "stdout" {
		return qc, s, fmt.Errorf("-otel %q: the one exporter is stdout", s.otel)
	}
	if s.http != httpFast && s.http != httpStd {
		return qc, s, fmt.Errorf("-http %q: want %s or %s", s.http, httpFast, httpStd)
	}
	if s.budget < 0 {
		return qc, s, fmt.Errorf("-forward-budget %s: must be positive, or 0 to turn the budget off", s.budget)
	}
	if s.maxPeers < 1 {
		return qc, s, fmt.Errorf("-max-peers %d: must be at least 1", s.maxPeers)
	}
	if s.demo <= 0 && len(s.upstreams) == 0 {
		return qc, s, errors.New("no upstreams: give -upstream URL (or FORWARDER_UPSTREAMS), or try -demo 20s")
	}
	return qc, s, nil
}

// The values of -http.
const (
	httpFast = "fast" // announceServer: plain announces served from the connection's buffer
	httpStd  = "std"  // net/http's server alone
)

func (s *settings) fromEnv() error {
	if v := os.Getenv("FORWARDER_LISTEN"); v != "" {
		s.listen = listFlag{}
		if err := s.listen.Set(v); err != nil {
			return fmt.Errorf("environment variable FORWARDER_LISTEN=%q: %w", v, err)
		}
		s.listen.given = false // a -listen flag replaces the variable's list
	}
	if v := os.Getenv("FORWARDER_TRUST_IP_FROM"); v != "" {
		if err := s.trustIP.Set(v); err != nil {
			return fmt.Errorf("environment variable FORWARDER_TRUST_IP_FROM=%q: %w", v, err)
		}
	}
	s.otel = os.Getenv("FORWARDER_OTEL")
	if v := os.Getenv("FORWARDER_HTTP"); v != "" {
		if v != httpFast && v != httpStd {
			return fmt.Errorf("environment variable FORWARDER_HTTP=%q: want %s or %s", v, httpFast, httpStd)
		}
		s.http = v
	}
	if v := os.Getenv("FORWARDER_STORE"); v != "" {
		s.store = v
	}
	if v := os.Getenv("FORWARDER_FORWARD"); v != "" {
		if err := s.forward.Set(v); err != nil {
			return fmt.Errorf("environment variable FORWARDER_FORWARD: %w", err)
		}
	}
	if v := os.Getenv("FORWARDER_MAX_PEERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("environment variable FORWARDER_MAX_PEERS=%q: not a positive integer", v)
		}
		s.maxPeers = n
	}
	if v := os.Getenv("FORWARDER_UPSTREAMS"); v != "" {
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				s.upstreams = append(s.upstreams, u)
			}
		}
	}
	if v := os.Getenv("FORWARDER_PROCS"); v != "" {
		if err := s.procs.Set(v); err != nil {
			return fmt.Errorf("environment variable FORWARDER_PROCS=%q: %w", v, err)
		}
	}
	if v := os.Getenv("FORWARDER_FORWARD_BUDGET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("environment variable FORWARDER_FORWARD_BUDGET=%q: not a duration >= 0", v)
		}
		s.budget = d
	}
	for name, dst := range map[string]*time.Duration{"FORWARDER_INTERVAL": &s.interval, "FORWARD_TIMEOUT": &s.timeout} {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("environment variable %s=%q: not a positive duration", name, v)
			}
			*dst = d
		}
	}
	return nil
}

// serve runs the forwarder until ctx ends, on every -listen address.
func serve(ctx context.Context, qc QueueConfig, s settings, stderr io.Writer) error {
	lns, err := listenAll(s.listen.vals)
	if err != nil {
		return err
	}
	return serveOn(ctx, qc, s, lns, stderr)
}

// serveOn runs the forwarder on lns, which it closes, until ctx ends. ctx
// is the signal context and is passed to Start on purpose: SIGINT or
// SIGTERM shuts the queue down at once instead of draining it (the
// library's quick start shows the draining pattern). Forwards are best
// effort: an interrupted or queued one is dropped with the in-memory
// store, or kept in PostgreSQL or Redis (-store) for the next start, and
// every client announces again within its interval anyway.
//
// It logs at info level (its addresses, upstreams' state changes, jobs
// dead-lettered); -v adds every job's outcome (debug level).
func serveOn(ctx context.Context, qc QueueConfig, s settings, lns []net.Listener, stderr io.Writer) error {
	level := slog.LevelInfo
	if s.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	tr, err := newTracing(s.otel, s.traceOut)
	if err != nil {
		closeAll(lns)
		return err
	}
	defer tr.shutdown(context.Background())
	f, closeStore, err := newServer(ctx, qc, s, logger, tr.opts...)
	if err != nil {
		closeAll(lns)
		return err
	}
	defer closeStore()
	if err := f.Start(ctx); err != nil {
		closeAll(lns)
		return err
	}
	pc, procsMode, stopProcs := startProcs(s.procs.n, func(from, to int) {
		logger.Debug("forwarder processors", "from", from, "to", to)
	})
	defer stopProcs()
	if err := registerProcsMetrics(f.reg, pc); err != nil {
		closeAll(lns)
		return err
	}
	// IdleTimeout: a kept-alive connection waiting for its next
	// request is closed as the announce path's own are (listenAll
	// turns TCP keep-alive probes off).
	srv := &http.Server{Handler: tr.wrap(f.Handler()), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10,
		IdleTimeout: announceIdleTimeout}
	errc := make(chan error, len(lns)+1)
	serveLn, shutdown := srv.Serve, srv.Shutdown
	if s.otel == "" && s.http != httpStd {
		// Plain announces are answered without net/http's per-request
		// goroutine (httpserve.go); everything else, and every traced
		// announce, goes through srv. -http std leaves it all to srv.
		as := newAnnounceServer(f.ServeAnnounce, srv)
		go func() { errc <- as.ServeSlow() }()
		serveLn, shutdown = as.Serve, as.Shutdown
	}
	for _, ln := range lns {
		logger.Info("forwarder listening", "addr", ln.Addr().String(), "upstreams", len(f.ordered), "store", storeKind(s.store), "procs", procsMode)
		go func() { errc <- serveLn(ln) }()
	}
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutdown(sctx)
	f.Shutdown(sctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// newServer builds the server mode's forwarder from the settings, with
// its store; closeStore releases the store once the queue has stopped.
func newServer(ctx context.Context, qc QueueConfig, s settings, logger *slog.Logger, extra ...queue.Option) (f *Forwarder, closeStore func(), err error) {
	client := newHTTPClient(s.timeout)
	var ups []*Upstream
	for _, spec := range s.upstreams {
		up, err := ParseUpstream(spec, client)
		if err != nil {
			return nil, nil, err
		}
		ups = append(ups, up)
	}
	opts, err := qc.Options()
	if err != nil {
		return nil, nil, err
	}
	opts = append(append(opts, queue.WithJobTimeout(s.timeout)), extra...)
	store, closeStore, err := storeflag.Open[fwdJob](ctx, s.store)
	if err != nil {
		return nil, nil, err
	}
	f, err = NewForwarder(Options{Upstreams: ups, Interval: s.interval, Forward: s.forward, MaxPeers: s.maxPeers, Logger: logger, Store: store, TrustIPFrom: s.trustIP,
		ForwardBudget: s.budget, NoForwardBudget: s.budget == 0}, opts...)
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return f, closeStore, nil
}
