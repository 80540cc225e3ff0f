package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/pgstore"
)

// stats prints the job counts per state, the ready jobs per priority and
// whether the queue is paused.
func (c *cli) stats(args []string) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	out := outputFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("stats: unexpected argument %q", pos[0])
	}
	if err := checkOutput("stats", *out); err != nil {
		return err
	}
	return c.withAdmin("stats", func(b *backend) error {
		counts, err := b.adm.Counts(c.ctx)
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		paused, err := b.adm.Paused(c.ctx)
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		st, err := b.store.Stats(c.ctx)
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		r := statsReport{Queue: c.g.queue, Backend: b.kind, Where: b.where, Paused: paused,
			Counts: counts, ReadyByPriority: st.ReadyByPriority, PendingKeys: st.PendingKeys}
		if b.kind == "redis" { // Redis deletes a job once it is done or cancelled
			r.NotKept = []admin.State{admin.Done, admin.Cancelled}
			for _, s := range r.NotKept {
				delete(r.Counts, s)
			}
		}
		cfg, _ := c.priorityConfig()
		for _, p := range cfg.Priorities {
			r.priorities = append(r.priorities, p.Name)
		}
		if *out == "json" {
			return writeJSON(c.stdout, r)
		}
		return r.table(c.stdout)
	})
}

// jobFilter adds the filter flags to fs.
func jobFilter(fs *flag.FlagSet) *admin.Filter {
	f := &admin.Filter{}
	fs.Func("state", "jobs in this state: "+stateList(), func(s string) error {
		f.State = admin.State(s)
		return nil
	})
	fs.StringVar(&f.Priority, "priority", "", "only jobs of this priority label")
	fs.StringVar(&f.Target, "target", "", "only jobs of this target")
	fs.StringVar(&f.KeyPrefix, "key-prefix", "", "only jobs whose key starts with this")
	return f
}

func stateList() string {
	names := make([]string, len(admin.States))
	for i, s := range admin.States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// checkPriority validates --priority for cmd against --priorities.
func (c *cli) checkPriority(cmd, p string) error {
	if p == "" {
		return nil
	}
	cfg, err := c.priorityConfig()
	if err != nil {
		return err
	}
	var names []string
	for _, l := range cfg.Priorities {
		if l.Name == p {
			return nil
		}
		names = append(names, l.Name)
	}
	return usagef("%s: --priority %q: not one of the queue's levels %s (see --priorities)", cmd, p, strings.Join(names, ", "))
}

// checkState validates --state for cmd.
func checkState(cmd string, s admin.State) error {
	if s == "" {
		return usagef("%s: --state is required: one of %s", cmd, stateList())
	}
	for _, k := range admin.States {
		if s == k {
			return nil
		}
	}
	return usagef("%s: --state %q: want one of %s", cmd, string(s), stateList())
}

// ls prints a page of the jobs in a state, and the cursor of the next.
func (c *cli) ls(args []string) error {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	q := admin.Query{}
	f := jobFilter(fs)
	fs.BoolVar(&q.Oldest, "oldest", false, "oldest first (default newest first)")
	fs.IntVar(&q.Limit, "limit", 20, fmt.Sprintf("jobs per page, 1..%d", admin.MaxLimit))
	fs.StringVar(&q.After, "after", "", "the cursor printed by the previous page")
	fs.BoolVar(&q.Payload, "payload", false, "include the payloads")
	out := outputFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("ls: unexpected argument %q", pos[0])
	}
	if err := checkState("ls", f.State); err != nil {
		return err
	}
	if err := c.checkPriority("ls", f.Priority); err != nil {
		return err
	}
	if q.Limit < 1 || q.Limit > admin.MaxLimit {
		return usagef("ls: --limit %d: want 1..%d", q.Limit, admin.MaxLimit)
	}
	if err := checkOutput("ls", *out); err != nil {
		return err
	}
	q.Filter = *f
	return c.withAdmin("ls", func(b *backend) error {
		page, err := c.lsPage(b, q)
		if errors.Is(err, admin.ErrInvalid) {
			return usagef("ls: %v", err)
		}
		if err != nil {
			return fmt.Errorf("ls: %w", err)
		}
		if *out == "json" {
			return writeJSON(c.stdout, pageView(page))
		}
		return writeJobTable(c.stdout, page, q.Payload)
	})
}

// lsPages bounds the calls one ls makes to fill a filtered page: each
// examines at most admin.MaxExamined jobs, so ls reads at most
// lsPages × MaxExamined (200 000) jobs of the state before it prints what
// it found and the cursor to go on from.
const lsPages = 20

// lsPage lists q, following partial pages (a filtered List that examined
// admin.MaxExamined jobs without filling the page) until the page fills,
// the state ends or lsPages calls were made, reporting progress on
// stderr. The page it returns is partial when it stopped at lsPages.
func (c *cli) lsPage(b *backend, q admin.Query) (admin.Page, error) {
	var out admin.Page
	for calls := 1; ; calls++ {
		p, err := b.adm.List(c.ctx, q)
		if err != nil {
			return admin.Page{}, err
		}
		out.Jobs = append(out.Jobs, p.Jobs...)
		out.Examined += p.Examined
		out.Next, out.Partial = p.Next, p.Partial
		if !p.Partial || calls == lsPages {
			return out, nil
		}
		fmt.Fprintf(c.stderr, "ls: %d jobs examined, %d matching so far...\n", out.Examined, len(out.Jobs))
		q.After, q.Limit = p.Next, q.Limit-len(p.Jobs)
	}
}

// show prints one job.
func (c *cli) show(args []string) error {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	key := fs.String("key", "", "the job holding this key (pending or running), or else the newest ended one")
	payload := fs.Bool("payload", false, "include the payload")
	out := outputFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	var id int64
	if *key == "" || len(pos) > 0 {
		if id, err = jobID("show", pos); err != nil {
			return err
		}
		if *key != "" {
			return usagef("show: give a job ID or --key, not both")
		}
	}
	if err := checkOutput("show", *out); err != nil {
		return err
	}
	return c.withAdmin("show", func(b *backend) error {
		var j admin.JobInfo
		if *key != "" {
			j, err = b.adm.GetKey(c.ctx, *key, *payload)
		} else {
			j, err = b.adm.Get(c.ctx, id, *payload)
		}
		if err != nil {
			return c.jobErr("show", id, *key, err)
		}
		if *out == "json" {
			return writeJSON(c.stdout, view(j))
		}
		return writeJob(c.stdout, j, *payload)
	})
}

// jobErr words an admin error about job id (or key) for cmd.
func (c *cli) jobErr(cmd string, id int64, key string, err error) error {
	what := fmt.Sprintf("job %d", id)
	if key != "" {
		what = fmt.Sprintf("no job with key %q", key)
	}
	switch {
	case errors.Is(err, admin.ErrNotFound) && key != "":
		return fmt.Errorf("%s: %s in queue %q", cmd, what, c.g.queue)
	case errors.Is(err, admin.ErrNotFound):
		return fmt.Errorf("%s: %s not found in queue %q", cmd, what, c.g.queue)
	case errors.Is(err, admin.ErrState):
		return fmt.Errorf("%s: %s: %v", cmd, what, err)
	}
	return fmt.Errorf("%s: %w", cmd, err)
}

// retry runs one dead or cancelled job again, or every one matching a
// filter after a confirmation.
func (c *cli) retry(args []string) error {
	fs := flag.NewFlagSet("retry", flag.ContinueOnError)
	f := jobFilter(fs)
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	filtered := *f != (admin.Filter{})
	if len(pos) > 0 || !filtered {
		id, err := jobID("retry", pos)
		if err != nil {
			return err
		}
		if filtered {
			return usagef("retry: give a job ID or --state with filters, not both")
		}
		return c.withAdmin("retry", func(b *backend) error {
			if err := b.adm.Retry(c.ctx, id); err != nil {
				return c.jobErr("retry", id, "", err)
			}
			fmt.Fprintf(c.stdout, "job %d is ready to run again\n", id)
			return nil
		})
	}
	if f.State != admin.Dead && f.State != admin.Cancelled {
		return usagef("retry: --state %q: want dead or cancelled", string(f.State))
	}
	if err := c.checkPriority("retry", f.Priority); err != nil {
		return err
	}
	if !*yes && !terminal(c.stdin) {
		return usagef("retry: retrying every matching job needs --yes when stdin is not a terminal")
	}
	return c.withAdmin("retry", func(b *backend) error {
		if !*yes {
			n, err := c.count(b, *f)
			if err != nil {
				return fmt.Errorf("retry: %w", err)
			}
			if n == 0 {
				fmt.Fprintf(c.stdout, "no %s jobs match in queue %q\n", f.State, c.g.queue)
				return nil
			}
			fmt.Fprintf(c.stdout, "retry %d %s jobs%s of queue %q? [y/N] ", n, f.State, describe(*f), c.g.queue)
			line, _ := bufio.NewReader(c.stdin).ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
				return errors.New("retry: not confirmed; nothing retried")
			}
		}
		n, err := b.adm.RetryMatch(c.ctx, *f)
		fmt.Fprintf(c.stdout, "%d jobs ready to run again\n", n)
		if err != nil {
			return fmt.Errorf("retry: %w", err)
		}
		return nil
	})
}

// count counts the jobs matching f, a page at a time.
func (c *cli) count(b *backend, f admin.Filter) (int, error) {
	q := admin.Query{Filter: f, Oldest: true, Limit: admin.MaxLimit}
	n := 0
	for {
		p, err := b.adm.List(c.ctx, q)
		if err != nil {
			return n, err
		}
		n += len(p.Jobs)
		if p.Next == "" {
			return n, nil
		}
		q.After = p.Next
	}
}

// describe words f's filters other than the state.
func describe(f admin.Filter) string {
	var parts []string
	if f.Priority != "" {
		parts = append(parts, "priority "+printable(f.Priority))
	}
	if f.Target != "" {
		parts = append(parts, "target "+printable(f.Target))
	}
	if f.KeyPrefix != "" {
		parts = append(parts, "key prefix "+printable(f.KeyPrefix))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// rm deletes one job.
func (c *cli) rm(args []string) error {
	return c.byID("rm", args, func(b *backend, id int64) error {
		if err := b.adm.Delete(c.ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "job %d deleted\n", id)
		return nil
	})
}

// cancel cancels one job, running or not.
func (c *cli) cancel(args []string) error {
	return c.byID("cancel", args, func(b *backend, id int64) error {
		before, err := b.adm.Get(c.ctx, id, false)
		if err != nil {
			return err
		}
		if err := b.adm.Cancel(c.ctx, id); err != nil {
			return err
		}
		if before.State == admin.Running {
			fmt.Fprintf(c.stdout, "job %d is running: its context is cancelled, and it ends cancelled when its handler returns\n", id)
			return nil
		}
		fmt.Fprintf(c.stdout, "job %d cancelled\n", id)
		return nil
	})
}

// byID runs the command cmd, whose one argument is a job ID.
func (c *cli) byID(cmd string, args []string, f func(b *backend, id int64) error) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := jobID(cmd, pos)
	if err != nil {
		return err
	}
	return c.withAdmin(cmd, func(b *backend) error {
		if err := f(b, id); err != nil {
			return c.jobErr(cmd, id, "", err)
		}
		return nil
	})
}

// pause stops claims on every process of the queue.
func (c *cli) pause(args []string) error {
	return c.noArgs("pause", args, func(b *backend) error {
		if err := b.adm.Pause(c.ctx); err != nil {
			return fmt.Errorf("pause: %w", err)
		}
		fmt.Fprintf(c.stdout, "queue %q paused: no process claims its jobs until queuectl resume\n", c.g.queue)
		return nil
	})
}

// resume lets the queue's processes claim again.
func (c *cli) resume(args []string) error {
	return c.noArgs("resume", args, func(b *backend) error {
		if err := b.adm.Resume(c.ctx); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		fmt.Fprintf(c.stdout, "queue %q resumed\n", c.g.queue)
		return nil
	})
}

func (c *cli) noArgs(cmd string, args []string, f func(b *backend) error) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("%s: unexpected argument %q", cmd, pos[0])
	}
	return c.withAdmin(cmd, f)
}

// targets lists the targets or acts on one.
func (c *cli) targets(args []string) error {
	fs := flag.NewFlagSet("targets", flag.ContinueOnError)
	d := fs.Duration("for", 0, "suspend: how long (default 5m, the library's default WithSuspend: queuectl does not know the queue's)")
	reason := fs.String("reason", "disabled with queuectl", "disable: why")
	out := outputFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	action := "list"
	if len(pos) > 0 {
		action, pos = pos[0], pos[1:]
	}
	var name string
	switch action {
	case "list":
		if len(pos) != 0 {
			return usagef("targets list: unexpected argument %q", pos[0])
		}
		if err := checkOutput("targets", *out); err != nil {
			return err
		}
	case "suspend", "resume", "disable", "enable":
		if len(pos) != 1 || pos[0] == "" {
			return usagef("targets %s: want one target name", action)
		}
		name = pos[0]
		if *d < 0 {
			return usagef("targets suspend: --for %s: must be ≥ 0", *d)
		}
	default:
		return usagef("targets: unknown action %q: want list, suspend, resume, disable or enable", action)
	}
	return c.withAdmin("targets", func(b *backend) error {
		if !b.adm.HasTargets() {
			return fmt.Errorf("targets: %w (%s)", errNoAdmin, b.kind)
		}
		var err error
		switch action {
		case "list":
			ts, err := b.adm.TargetList(c.ctx)
			if err != nil {
				return fmt.Errorf("targets: %w", err)
			}
			if *out == "json" {
				return writeJSON(c.stdout, ts)
			}
			return writeTargets(c.stdout, ts)
		case "suspend":
			err = b.adm.Suspend(c.ctx, name, *d)
		case "resume":
			err = b.adm.ResumeTarget(c.ctx, name)
		case "disable":
			err = b.adm.Disable(c.ctx, name, *reason)
		case "enable":
			err = b.adm.Enable(c.ctx, name)
		}
		if err != nil {
			return fmt.Errorf("targets %s %s: %w", action, printable(name), err)
		}
		fmt.Fprintf(c.stdout, "target %s: %s done\n", printable(name), action)
		return nil
	})
}

// migrate creates or updates pgstore's tables.
func (c *cli) migrate(args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("migrate: unexpected argument %q", pos[0])
	}
	if err := c.checkTarget(); err != nil {
		return err
	}
	if c.g.pg == "" {
		return usagef("migrate: only PostgreSQL has migrations (--pg); Redis needs none")
	}
	pool, err := c.dial()
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx := c.ctx
	start := time.Now()
	if err := pgstore.Migrate(ctx, pool, c.pgOptions()...); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	schema, err := c.checkMigrated(ctx, pool)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintf(c.stdout, "schema %q is at migration %d (%s)\n", schema, latestMigration(), time.Since(start).Round(time.Millisecond))
	return nil
}
