package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

func init() {
	// go-redis logs dial failures itself; queuectl reports them once.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command failed: a server, a missing queue, a refused action
	exitUsage = 2 // bad flags, an unknown command, a malformed argument
)

// usageError is a mistake on the command line; run exits with exitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// globals are the flags before the command.
type globals struct {
	pg, redis  string
	sqlite     string
	queue      string
	schema     string
	prefix     string
	priorities string
	timeout    time.Duration
}

// cli is one run of queuectl.
type cli struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	g              globals
	set            map[string]bool // the global flags given
}

// terminal reports whether stdin is an interactive terminal, for
// confirmations; tests replace it.
var terminal = isTerminal

// command is one of queuectl's commands. run parses the command's own
// flags and arguments (a usageError for a bad one) before it opens the
// store.
type command struct {
	name, args, summary string
	run                 func(c *cli, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"stats", "[-o table|json]", "job counts per state, ready jobs per priority, paused", (*cli).stats},
		{"ls", "--state S [--priority P] [--target T] [--key-prefix K] [--oldest] [--limit N] [--after CURSOR] [--payload] [-o table|json]", "list jobs in a state, a page at a time (a filtered page reads at most 200 000 jobs, then says partial)", (*cli).ls},
		{"show", "ID | --key KEY [--payload] [-o table|json]", "one job in detail", (*cli).show},
		{"retry", "ID | --state dead|cancelled [--priority P] [--target T] [--key-prefix K] [--yes]", "run a dead (or cancelled) job again, or every one matching", (*cli).retry},
		{"rm", "ID", "delete a job that is not running", (*cli).rm},
		{"cancel", "ID", "cancel a queued, scheduled or running job", (*cli).cancel},
		{"pause", "", "stop every process of the queue claiming jobs (enqueues continue)", (*cli).pause},
		{"resume", "", "let the queue's processes claim again", (*cli).resume},
		{"targets", "[list | suspend NAME [--for D] | resume NAME | disable NAME [--reason R] | enable NAME]", "the targets' health, and actions on them", (*cli).targets},
		{"migrate", "", "create or update pgstore's tables (PostgreSQL only)", (*cli).migrate},
	}
}

// run is queuectl with its arguments (without the program name), its
// standard streams, and the exit code it returns.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	err := c.main(args)
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "queuectl: %s (queuectl -h for usage)\n", escapeHidden(ue.msg))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "queuectl: %s\n", escapeHidden(oneLine(err.Error())))
		return exitError
	}
}

func (c *cli) main(args []string) error {
	fs := flag.NewFlagSet("queuectl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.g.pg, "pg", "", "PostgreSQL URL of a pgstore database")
	fs.StringVar(&c.g.redis, "redis", "", "Redis address of a redisstore (host:port or redis://...)")
	fs.StringVar(&c.g.sqlite, "sqlite", "", "path of a sqlitestore database file")
	fs.StringVar(&c.g.queue, "queue", "default", "the queue's name (queue.WithName)")
	fs.StringVar(&c.g.schema, "schema", "", "pgstore's schema (pgstore.WithSchema); default: the search_path's")
	fs.StringVar(&c.g.prefix, "prefix", "queue", "redisstore's key prefix (redisstore.WithPrefix)")
	fs.StringVar(&c.g.priorities, "priorities", "high=0,normal=5,low=10", "the queue's priority levels as name=weight, highest first (queue.WithPriorities)")
	fs.DurationVar(&c.g.timeout, "timeout", 10*time.Second, "how long to wait for the server")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(fs)
			return err
		}
		return usagef("%v", err)
	}
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	rest := fs.Args()
	if len(rest) == 0 {
		c.usage(fs)
		return usagef("no command")
	}
	name := rest[0]
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd.run(c, rest[1:])
		}
	}
	if name == "help" {
		c.usage(fs)
		return nil
	}
	return usagef("unknown command %q: want one of %s", name, commandNames())
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, cmd := range commands {
		names[i] = cmd.name
	}
	return strings.Join(names, ", ")
}

func (c *cli) usage(fs *flag.FlagSet) {
	w := c.stderr
	fmt.Fprintln(w, "usage: queuectl (--pg URL | --redis ADDR | --sqlite FILE) [--queue NAME] [--schema S | --prefix P] <command> [flags]")
	fmt.Fprintln(w, "\nGlobal flags (before the command):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintln(w, "\nCommands:")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", cmd.name, cmd.summary)
		if cmd.args != "" {
			fmt.Fprintf(w, "           %s\n", cmd.args)
		}
	}
}

// parse parses a command's flags, which may come before, between and
// after its positional arguments, and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, usagef("%s: flags: %s", fs.Name(), flagList(fs))
			}
			if bad, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
				if _, err := strconv.Atoi(bad); err == nil {
					return nil, usagef("%s: bad job ID %q: want a positive integer", fs.Name(), bad)
				}
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func flagList(fs *flag.FlagSet) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	return strings.Join(names, " ")
}

// jobID parses the one positional argument of cmd as a job ID.
func jobID(cmd string, pos []string) (int64, error) {
	if len(pos) != 1 {
		return 0, usagef("%s: want one job ID, got %d arguments", cmd, len(pos))
	}
	id, err := strconv.ParseInt(pos[0], 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("%s: bad job ID %q: want a positive integer", cmd, pos[0])
	}
	return id, nil
}

// outputFlag adds -o to fs.
func outputFlag(fs *flag.FlagSet) *string {
	return fs.String("o", "table", "output format: table or json")
}

func checkOutput(cmd, o string) error {
	if o != "table" && o != "json" {
		return usagef("%s: -o %q: want table or json", cmd, o)
	}
	return nil
}

// oneLine keeps an error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// isTerminal reports whether r is an interactive terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
