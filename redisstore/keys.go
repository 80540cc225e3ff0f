package redisstore

import (
	"fmt"
	"strconv"
	"unicode"
)

// Positions of the fixed keys in a job script's KEYS (0-based here).
const (
	kMeta = iota
	kData
	kLease
	kRun
	kSched
	kKeys
	kReruns
	kGroups
	kDead
	kCount
	kWake
	kSeen
	kUnique
	kReadyIdx
	kPaused
	kCancel
	kDeadKeys
	kHeld
	kInboxes
	nFixedKeys
)

// seenBits is how many job IDs one seen bitmap covers (128 KiB each).
const seenBits = 1 << 20

// keyspace names the keys of one queue on one shard. Every key starts with
// the hash tag "{prefix:name}", so a queue lives in one Cluster slot and
// every script is Cluster-safe.
type keyspace struct {
	tag    string   // "{prefix:name}"
	fixed  []string // the script key layout, seen placeholder included
	leader string
}

func newKeyspace(prefix, name string, labels []string) keyspace {
	tag := "{" + prefix + ":" + name + "}"
	names := [nFixedKeys]string{
		kMeta: "meta", kData: "data", kLease: "lease", kRun: "running", kSched: "scheduled",
		kKeys: "keys", kReruns: "reruns", kGroups: "groups", kDead: "dead", kCount: "count",
		kWake: "wake", kSeen: "seen:0", kUnique: "unique",
		kReadyIdx: "readyidx", kPaused: "paused", kCancel: "cancel", kDeadKeys: "deadkeys",
		kHeld: "held", kInboxes: "inboxes",
	}
	ks := keyspace{tag: tag, leader: tag + ":leader"}
	for _, n := range names {
		ks.fixed = append(ks.fixed, tag+":"+n)
	}
	for _, l := range labels {
		ks.fixed = append(ks.fixed, tag+":ready:"+l)
	}
	return ks
}

// ids is the key of the shard's ID sequence.
func (k keyspace) ids() string { return k.tag + ":ids" }

// seen returns the bitmap key and bit offset recording that the job with
// sequence number seq was added.
func (k keyspace) seen(seq int64) (string, int64) {
	return k.seenKey(seq / seenBits), seq % seenBits
}

// seenKey is the key of the seen bitmap with index bucket (seq/seenBits).
func (k keyspace) seenKey(bucket int64) string {
	return k.tag + ":seen:" + strconv.FormatInt(bucket, 10)
}

// regBits is the width of a block's registration in a seen bitmap (see
// regOffset): the low 52 bits of the registering process's token, which a
// Lua number holds exactly.
const regBits = 52

// regType is regBits as a BITFIELD type.
const regType = "u52"

// regOffset returns the bit offset, in the seen bitmap with index bucket,
// of the registration of the ID block whose last sequence number is blk.
// The registrations follow the bitmap's seenBits seen bits, 64 bits each,
// one slot per block that has a number in the bitmap's range: blocks are
// 256 consecutive numbers, so blk/idBlock differs between any two, and
// the blocks reaching into the range have blk/idBlock in
// [bucket·seenBits/idBlock, (bucket+1)·seenBits/idBlock]: 4097 slots. The
// add-one script reads the registration and sets the job's seen bit with
// one BITFIELD (see shard.reserve).
func regOffset(bucket, blk int64) int64 {
	return seenBits + (blk/idBlock-bucket*(seenBits/idBlock))*64
}

// blocksPerKey is how many ID blocks one registration hash holds: few
// enough for Redis's compact hash encoding.
const blocksPerKey = 128

// blocks returns the key of the hash registering the ID block whose last
// sequence number is blk (see shard.reserve).
func (k keyspace) blocks(blk int64) string {
	return k.tag + ":blocks:" + strconv.FormatInt(blk/(blocksPerKey*idBlock), 10)
}

// validTagPart reports why s cannot be part of the hash tag, or "".
func validTagPart(s string) string {
	if s == "" {
		return "must not be empty"
	}
	for _, r := range s {
		switch {
		case r == '{' || r == '}':
			return fmt.Sprintf("must not contain %q: it would break the key's hash tag", r)
		case unicode.IsControl(r) || unicode.IsSpace(r):
			return "must not contain spaces or control characters"
		}
	}
	return ""
}
