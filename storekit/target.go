package storekit

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxTargetLen bounds Job.Target, in bytes.
const MaxTargetLen = 1024

// TargetProblem returns what is wrong with a job's Target, or "": a
// target is a name, which the durable stores keep as text and in their
// indexes and metrics use as a label value, so it must be valid UTF-8,
// hold no NUL byte and be at most MaxTargetLen bytes.
func TargetProblem(target string) string {
	switch {
	case len(target) > MaxTargetLen:
		return fmt.Sprintf("Target is %d bytes long; it must be at most %d", len(target), MaxTargetLen)
	case !utf8.ValidString(target):
		return fmt.Sprintf("Target %q is not valid UTF-8", target)
	case strings.IndexByte(target, 0) >= 0:
		return fmt.Sprintf("Target %q holds a NUL byte", target)
	}
	return ""
}
