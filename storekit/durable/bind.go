package durable

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// queueNameRE is what a durable store accepts as a queue name
// (queue.WithName): a letter, digit or underscore, then up to 62 of those
// or . : -. The name must fit a PostgreSQL identifier's 63 bytes and a
// Redis hash tag (no braces, no spaces), and be the same rule on both
// stores so that a queue can move from one to the other.
var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$`)

// queueNameRule says queueNameRE in words, for the error.
const queueNameRule = "use 1 to 63 letters, digits, '_', '.', ':' or '-', starting with a letter, digit or '_'"

// Bind checks the configuration a queue gives its store in Init and
// returns it with the defaults queue.New would fill in for a
// configuration built by hand: a logger that discards, the system clock
// and no reports. pkg names the store in the errors.
func Bind(pkg string, cfg storekit.Config) (storekit.Config, error) {
	if !queueNameRE.MatchString(cfg.Name) {
		return cfg, fmt.Errorf("%s: queue name %q is not valid: %s", pkg, cfg.Name, queueNameRule)
	}
	if len(cfg.Priorities) == 0 {
		return cfg, errors.New(pkg + ": no priorities")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = queuetype.SystemClock{}
	}
	if cfg.Report == nil {
		cfg.Report = func(queuetype.Event) {}
	}
	return cfg, nil
}

// NewWorkerID returns a name for this process that is unique among the
// processes sharing a store: host-pid-random.
func NewWorkerID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
