package dashboard

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// The job lists: dead jobs (with retry and delete) and one job's detail
// need an admin API the queue does not have yet. The dashboard asks for
// them through Jobs, so that the admin API plugs in with WithJobs and an
// adapter of a few lines; until then the page shows where they will go.

// ErrNotFound is what a Jobs implementation returns (or wraps) for a job
// it does not hold; the dashboard answers 404 Not Found.
var ErrNotFound = errors.New("dashboard: job not found")

// Jobs lists and acts on individual jobs for the dashboard. Its methods
// are called from HTTP handlers, concurrently, with the request's context.
type Jobs interface {
	// Dead returns up to limit dead jobs, newest first.
	Dead(ctx context.Context, limit int) ([]JobInfo, error)
	// Job returns the job with the given ID, or ErrNotFound.
	Job(ctx context.Context, id int64) (JobInfo, error)
	// Retry runs the dead job with the given ID again, or returns
	// ErrNotFound.
	Retry(ctx context.Context, id int64) error
	// Delete removes the job with the given ID, or returns ErrNotFound.
	Delete(ctx context.Context, id int64) error
}

// JobInfo describes one job without its payload, which the dashboard
// never shows.
type JobInfo struct {
	ID        int64     `json:"id"`                   // the job's ID
	Key       string    `json:"key,omitempty"`        // its pending key, if any
	Target    string    `json:"target,omitempty"`     // its target, if any
	Priority  string    `json:"priority,omitempty"`   // its priority label
	State     string    `json:"state"`                // ready, scheduled, running, dead, ...
	Attempt   int       `json:"attempt"`              // runs made so far
	LastError string    `json:"last_error,omitempty"` // the error of its last run, if it failed
	Updated   time.Time `json:"updated,omitzero"`     // when it entered its state
}

// deadLimit is how many dead jobs the page lists.
const deadLimit = 100

func (h *Handler) serveDead(w http.ResponseWriter, r *http.Request) {
	if h.cfg.jobs == nil {
		fail(w, http.StatusNotImplemented, "job lists need the admin API (WithJobs)")
		return
	}
	jobs, err := h.cfg.jobs.Dead(r.Context(), deadLimit)
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	if jobs == nil {
		jobs = []JobInfo{}
	}
	writeJSON(w, http.StatusOK, jobs)
}

func (h *Handler) serveJob(w http.ResponseWriter, r *http.Request) {
	if h.cfg.jobs == nil {
		fail(w, http.StatusNotImplemented, "job detail needs the admin API (WithJobs)")
		return
	}
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	j, err := h.cfg.jobs.Job(r.Context(), id)
	if !jobErr(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// jobAction serves POST api/jobs/{id}/retry and .../delete.
func (h *Handler) jobAction(w http.ResponseWriter, r *http.Request) {
	if h.cfg.jobs == nil {
		fail(w, http.StatusNotImplemented, "job actions need the admin API (WithJobs)")
		return
	}
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	var err error
	switch r.PathValue("action") {
	case "retry":
		err = h.cfg.jobs.Retry(r.Context(), id)
	case "delete":
		err = h.cfg.jobs.Delete(r.Context(), id)
	default:
		fail(w, http.StatusNotFound, "unknown action")
		return
	}
	if jobErr(w, err) {
		writeJSON(w, http.StatusOK, struct {
			ID int64 `json:"id"`
		}{id})
	}
}

func jobID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		fail(w, http.StatusBadRequest, "bad job ID")
		return 0, false
	}
	return id, true
}

// jobErr answers err, if any, and reports whether there was none.
func jobErr(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrNotFound):
		fail(w, http.StatusNotFound, "job not found")
	default:
		fail(w, http.StatusInternalServerError, err.Error())
	}
	return false
}
