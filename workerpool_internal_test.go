package queue

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

func TestWorkerSize(t *testing.T) {
	assert.Equal(t, uintptr(256), unsafe.Sizeof(worker[int]{}), "workers on other cores share no cache line")
}
