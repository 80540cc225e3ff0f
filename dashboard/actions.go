package dashboard

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"time"

	"github.com/queuekit/queue"
)

// TokenHeader is the request header that carries the dashboard's CSRF
// token on every action. The page reads the token from api/state, which
// only a same-origin script can read.
const TokenHeader = "X-Dashboard-Token"

// maxSuspend bounds the suspension an action may ask for.
const maxSuspend = 24 * time.Hour

// action wraps an action's handler with the checks every POST passes, in
// this order: actions are enabled (else 403), the request is not
// cross-origin by its Sec-Fetch-Site or Origin header (else 403), the body
// is JSON (else 415: a cross-site HTML form cannot send it), and it
// carries the token (else 403). The body is limited to 4 KiB.
func (h *Handler) action(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.cfg.actions {
			fail(w, http.StatusForbidden, "the dashboard is read-only: the host did not enable actions")
			return
		}
		if err := h.crossOri.Check(r); err != nil {
			fail(w, http.StatusForbidden, "cross-origin request refused")
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			fail(w, http.StatusUnsupportedMediaType, "the body must be application/json")
			return
		}
		got := r.Header.Get(TokenHeader)
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 {
			fail(w, http.StatusForbidden, "missing or wrong "+TokenHeader)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		next(w, r)
	}
}

// targetRequest is the body of a target action.
type targetRequest struct {
	Target  string  `json:"target"`
	Seconds float64 `json:"seconds,omitempty"` // suspend: how long; 0 is the queue's default
	Reason  string  `json:"reason,omitempty"`  // disable: why
}

// targetAction serves POST api/targets/{action}: suspend, resume,
// disable or enable (which resumes a disabled target) one target, and
// answers with the target's health afterwards.
func (h *Handler) targetAction(w http.ResponseWriter, r *http.Request) {
	var req targetRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "bad request body")
		return
	}
	if req.Target == "" {
		fail(w, http.StatusBadRequest, "no target")
		return
	}
	var err error
	switch act := r.PathValue("action"); act {
	case "suspend":
		d := time.Duration(req.Seconds * float64(time.Second))
		if req.Seconds < 0 || d > maxSuspend {
			fail(w, http.StatusBadRequest, "seconds must be between 0 and 86400")
			return
		}
		err = h.src.Suspend(req.Target, d)
	case "disable":
		reason := req.Reason
		if reason == "" {
			reason = "disabled from the dashboard"
		}
		err = h.src.Disable(req.Target, errors.New(reason))
	case "resume", "enable":
		err = h.src.Resume(req.Target)
	default:
		fail(w, http.StatusNotFound, "unknown action")
		return
	}
	switch {
	case errors.Is(err, queue.ErrUnknownTarget):
		fail(w, http.StatusNotFound, err.Error())
		return
	case err != nil:
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	if rec := h.cfg.recorder; rec != nil {
		rec.remember(req.Target)
	}
	t, _ := h.src.Target(req.Target)
	writeJSON(w, http.StatusOK, targetView{TargetStatus: t, Health: health(t, time.Now())})
}
