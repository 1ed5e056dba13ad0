// Package index implements a segment's sparse offset index (.index) and
// time index (.timeindex) in Kafka's on-disk format.
//
// An offset index entry is 8 bytes, big-endian: the offset relative to the
// segment's base offset (uint32) and the position in the .log file (uint32)
// where the batch holding that offset starts. A time index entry is 12
// bytes: a timestamp (int64) and a relative offset (uint32). Files have no
// header and no checksum; both indexes are derived from the log and can
// always be rebuilt from it.
//
// # Life cycle
//
// The active segment's indexes are opened active: the file is grown
// (sparse) to a maximum size and memory-mapped, and entries are written
// through the mapping, each page allocated for real first, so that a full
// disk fails an append with ENOSPC rather than the process with SIGBUS.
// When the segment rolls, Seal trims each file to its entries and maps it
// read-only; when a truncation makes an old segment active again, Unseal
// grows it back.
// Lookups use Kafka's warm-section binary search, which first searches the
// last 8 KiB of entries, where almost all lookups from followers and
// consumers land.
//
// # Opening: never trust the file length
//
// A preallocated file's length says nothing about how many entries it holds,
// and after a crash the entries themselves may be torn. Open therefore
// derives the entry count from the contents: the entries are the longest
// run of entries that obey the index rules, and every byte after them must
// be zero. The rules are those every index Kafka writes obeys:
//
//   - offset index: relative offsets and positions fit in an int32 and
//     strictly increase, and no position is 0 (Kafka never indexes a
//     segment's first batch), so a zero entry is always unused;
//   - time index: timestamps are non-negative and strictly increase,
//     relative offsets fit in an int32 and never decrease; an all-zero entry
//     is unused, so an entry for timestamp 0 at the base offset is never
//     written (it would tell a lookup nothing the empty index does not);
//   - the file is a whole number of entries and at most 2^31-1 bytes.
//
// Anything else fails with an error matching ErrCorrupt that names the file
// and the entry; the caller then removes the file and rebuilds the index by
// reopening it, which creates an empty one, and appending an entry for each
// indexed batch of the log. Reset drops all entries for a rebuild of an
// index that opened cleanly, as Kafka's segment recovery does.
//
// # Concurrency
//
// An index is safe for concurrent use. Lookups hold a read lock; appends,
// truncation, sealing and closing hold the write lock, so a lookup never
// sees a mapping being replaced.
package index
