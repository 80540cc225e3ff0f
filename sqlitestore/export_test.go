package sqlitestore

// Changes returns a channel that receives when the file changed (another
// connection committed, seen by the DB's data_version watch), for tests
// that wait for other processes' writes; stop ends the watch.
func Changes(db *DB) (changed <-chan struct{}, stop func()) {
	c := make(chan struct{}, 1)
	w := db.addWatcher(func() { kick(c) })
	return c, func() { db.removeWatcher(w) }
}
