package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// cmdReachable reports whether PostgreSQL (QUEUE_PG_URL) and Redis
// (QUEUE_REDIS_ADDR) accept a TCP connection, so that a caller can skip
// the rehearsal, and say so, on a machine without them.
func cmdReachable(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("reachable: unexpected argument %q", args[0])
	}
	pg, err := pgAddr(os.Getenv("QUEUE_PG_URL"))
	if err != nil {
		return err
	}
	rd := redisAddr(os.Getenv("QUEUE_REDIS_ADDR"))
	var errs []error
	for name, addr := range map[string]string{"PostgreSQL (QUEUE_PG_URL)": pg, "Redis (QUEUE_REDIS_ADDR)": rd} {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s at %s: %w", name, addr, err))
			continue
		}
		c.Close()
	}
	return errors.Join(errs...)
}

func pgAddr(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("QUEUE_PG_URL %q: not a postgres:// URL with a host", raw)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "5432"), nil
	}
	return u.Host, nil
}

func redisAddr(raw string) string {
	if strings.Contains(raw, "://") {
		if u, err := url.Parse(raw); err == nil && u.Host != "" {
			if u.Port() == "" {
				return net.JoinHostPort(u.Hostname(), "6379")
			}
			return u.Host
		}
	}
	return raw
}
