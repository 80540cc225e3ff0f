package queue

import (
	"slices"
	"testing"
)

func fifoIDs(f *fifo[int]) []int64 {
	var ids []int64
	for _, j := range f.jobs() {
		ids = append(ids, j.ID)
	}
	return ids
}

// TestFIFO checks the parked-job list's order through pushes, drops,
// removals and compaction, that spent slots hold no job, and that an
// empty list keeps only a small buffer.
func TestFIFO(t *testing.T) {
	var f fifo[int]
	var want []int64
	next := int64(1)
	push := func(n int) {
		for range n {
			f.push(&Job[int]{ID: next, Payload: int(next)})
			want = append(want, next)
			next++
		}
	}
	check := func(step string) {
		t.Helper()
		if got := fifoIDs(&f); !slices.Equal(got, want) || f.len() != len(want) {
			t.Fatalf("%s: jobs %v (len %d), want %v", step, got, f.len(), want)
		}
		for i, j := range f.buf[:f.head] {
			if j != (Job[int]{}) {
				t.Fatalf("%s: spent slot %d holds %+v", step, i, j)
			}
		}
		if n := len(f.buf); n < cap(f.buf) {
			if tail := f.buf[n:cap(f.buf)]; slices.ContainsFunc(tail, func(j Job[int]) bool { return j != (Job[int]{}) }) {
				t.Fatalf("%s: a slot past the end holds a job", step)
			}
		}
	}

	push(5)
	check("push 5")
	f.drop(2)
	want = want[2:]
	check("drop 2")
	push(40) // grows past the spent front, then compacts it away
	check("push 40")
	for range 30 {
		f.drop(1)
		want = want[1:]
		push(1)
	}
	check("a backlog moving through")
	if c := cap(f.buf); c > 4*f.len() {
		t.Errorf("cap %d for %d jobs: the buffer grew with the traffic, not the backlog", c, f.len())
	}
	removed := f.removeIf(func(j *Job[int]) bool { return j.ID%3 == 0 }, nil)
	for _, j := range removed {
		if j.ID%3 != 0 || j.Payload != int(j.ID) {
			t.Errorf("removed %+v", j)
		}
	}
	want = slices.DeleteFunc(want, func(id int64) bool { return id%3 == 0 })
	check("removeIf")
	f.drop(f.len())
	want = nil
	check("drop all")
	if f.buf != nil || f.head != 0 {
		t.Errorf("a large empty buffer is kept: cap %d, head %d", cap(f.buf), f.head)
	}
	push(1)
	f.drop(1)
	want = nil
	if f.buf == nil || f.head != 0 {
		t.Errorf("a one-job buffer is not kept for the next job")
	}
	push(2)
	check("reuse")
}
