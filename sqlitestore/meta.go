package sqlitestore

import (
	"database/sql"

	"github.com/queuekit/queue/queuetype"
)

// encodeMeta returns the job's metadata as stored: NULL until Meta lands.
func encodeMeta[T any](job *queuetype.Job[T]) (sql.NullString, error) { return sql.NullString{}, nil }

// decodeMeta sets the job's metadata from its column.
func decodeMeta[T any](job *queuetype.Job[T], m sql.NullString) error { return nil }
