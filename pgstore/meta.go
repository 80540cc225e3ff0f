package pgstore

import "github.com/queuekit/queue"

// loadMeta returns job id's metadata from its meta column (nil: none). A
// value that is not a JSON object of strings (written to the table by
// hand) is logged and read as no metadata: the job still runs.
func (s *Store[T]) loadMeta(id int64, b []byte) queue.Meta {
	var m queue.Meta
	if b == nil {
		return m
	}
	if err := m.UnmarshalJSON(b); err != nil {
		s.cfg.Logger.Warn("pgstore: a job's meta column is not a JSON object of strings; handed out without metadata",
			"job", id, "err", err)
		return queue.Meta{}
	}
	return m
}
