//go:build race

package sqlitestore_test

// raceSlow scales the multi-process tests: under -race the translated
// SQLite runs instrumented, 10–50 times slower.
const raceSlow = true
