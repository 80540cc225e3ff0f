// Package bench measures github.com/queuekit/queue side by side with the
// libraries users would pick instead, in one run on one machine.
//
// It is its own module so that none of the peers' dependencies (client-go,
// river, asynq, pond, ants, workerpool) reach the core. The qbench command
// (cmd/qbench) drives it and writes a markdown report with SVG charts.
//
// Three families of measurements live here:
//
//   - in-process throughput (inproc.go): N no-op jobs through each system
//     with P producers and W workers;
//   - the scheduled path (sched.go): lateness of delayed jobs, and the
//     schedule rate and heap cost of jobs held for an hour;
//   - durable engines (durable.go): river against pgstore on PostgreSQL and
//     asynq against redisstore on Redis.
//
// Each measurement case is a Task; Run executes one in this process, and
// the command re-executes itself once per Task so that peak RSS is per
// system.
package bench
