package pgstore_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queuekit/queue/storetest"
)

// proxiedPool returns a pool on the test server that connects through p,
// so that a test can cut its connections (or refuse new ones) without
// touching the shared server. It is closed when the test ends.
func proxiedPool(t *testing.T, p *storetest.Proxy, maxConns int32) *pgxpool.Pool {
	t.Helper()
	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return newPool(t, pgURL(), maxConns, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Host = host
		cfg.ConnConfig.Port = uint16(n)
		cfg.ConnConfig.Fallbacks = nil
	})
}
