package sqlitestore

import (
	"database/sql"

	"github.com/queuekit/queue/queuetype"
)

// A job's Meta is kept in the meta column as the JSON text of its
// MarshalJSON, NULL when it is empty, so that jobs without metadata cost
// nothing more.

// encodeMeta checks the job's metadata (Meta.Check's rules, which
// Enqueue applies) and returns it as stored.
func encodeMeta[T any](job *queuetype.Job[T]) (sql.NullString, error) {
	if job.Meta.IsZero() {
		return sql.NullString{}, nil
	}
	if err := job.Meta.Check(); err != nil {
		return sql.NullString{}, err
	}
	b, err := job.Meta.MarshalJSON()
	if err != nil {
		return sql.NullString{}, err
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

// decodeMeta sets the job's metadata from its column.
func decodeMeta[T any](job *queuetype.Job[T], m sql.NullString) error {
	return metaFrom(&job.Meta, m)
}

func metaFrom(dst *queuetype.Meta, m sql.NullString) error {
	*dst = queuetype.Meta{}
	if !m.Valid || m.String == "" {
		return nil
	}
	return dst.UnmarshalJSON([]byte(m.String))
}
