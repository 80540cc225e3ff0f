//go:build !race

package sqlitestore_test

const raceSlow = false
