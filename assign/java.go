package assign

import (
	"cmp"
	"encoding/binary"
	"unicode/utf16"
	"unicode/utf8"
)

// This file reproduces the few Java behaviours Kafka's assignors depend on:
// String.compareTo order, String.hashCode and HashMap iteration order.

// compareJava compares two strings as Java's String.compareTo does, by UTF-16
// code units. That is byte order for UTF-8 except when a character at or above
// U+10000 meets one in U+E000..U+FFFF, which UTF-16 orders the other way.
func compareJava(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	if a[i] < utf8.RuneSelf || b[i] < utf8.RuneSelf {
		return cmp.Compare(int(a[i]), int(b[i]))
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	ua, ub := utf16Units(ra), utf16Units(rb)
	for k := 0; k < len(ua) && k < len(ub); k++ {
		if ua[k] != ub[k] {
			return cmp.Compare(int(ua[k]), int(ub[k]))
		}
	}
	return cmp.Compare(len(ua), len(ub))
}

func utf16Units(r rune) []uint16 {
	if r >= 0x10000 {
		hi, lo := utf16.EncodeRune(r)
		return []uint16{uint16(hi), uint16(lo)}
	}
	return []uint16{uint16(r)}
}

// javaHash is Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over
// UTF-16 code units, in int32 arithmetic.
func javaHash(s string) int32 {
	var h int32
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			h = 31*h + int32(s[i])
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		for _, u := range utf16Units(r) {
			h = 31*h + int32(u)
		}
		i += size
	}
	return h
}

// javaHashMapOrder returns the indexes of keys in the order a java.util.HashMap
// with default capacity and load factor iterates them after they were put in
// index order: by bucket (the spread hash masked by the table size), then by
// insertion order within a bucket, which resizes preserve. Bins that Java would
// turn into trees (eight or more keys in one bucket) are not modelled; with a
// load factor of 0.75 they practically never occur for distinct member ids.
func javaHashMapOrder(keys []string) []int {
	hashes := make([]int32, len(keys))
	for i, k := range keys {
		hashes[i] = javaHash(k)
	}
	return javaHashOrder(hashes, javaGrownCapacity(len(keys)))
}

// javaGrownCapacity is the table size of a java.util.HashMap made with new
// HashMap<>() after n distinct keys were put: 16, doubled whenever more than
// three quarters full.
func javaGrownCapacity(n int) int {
	capacity := 16
	for n > capacity*3/4 {
		capacity *= 2
	}
	return capacity
}

// javaCopyCapacity is the table size of a java.util.HashSet made from a
// collection of n elements (new HashSet<>(c)): the power of two at least
// max(n/.75f + 1, 16), computed in float as Java does.
func javaCopyCapacity(n int) int {
	want := max(int(float32(n)/0.75)+1, 16)
	capacity := 1
	for capacity < want {
		capacity *= 2
	}
	return capacity
}

// javaHashOrder returns the indexes of keys with the given hash codes in the
// order a java.util.HashMap of the given (final) capacity iterates them after
// they were put in index order: by bucket, then by insertion within a bucket,
// which resizes preserve.
func javaHashOrder(hashes []int32, capacity int) []int {
	buckets := make([]int32, len(hashes))
	counts := make([]int, capacity+1)
	for i, h := range hashes {
		b := javaBucket(h, int32(capacity))
		buckets[i] = b
		counts[b+1]++
	}
	for i := 1; i <= capacity; i++ {
		counts[i] += counts[i-1]
	}
	order := make([]int, len(hashes))
	for i := range hashes {
		b := buckets[i]
		order[counts[b]] = i
		counts[b]++
	}
	return order
}

// javaBucket is the bucket of a key with hash code h in a java.util.HashMap
// table of the given power-of-two capacity: the hash spread by h ^ (h >>> 16).
func javaBucket(h int32, capacity int32) int32 {
	u := uint32(h)
	return int32((u ^ u>>16) & uint32(capacity-1))
}

// uuidHash is Kafka's Uuid.hashCode: the two halves of msb ^ lsb xored.
func uuidHash(id [16]byte) int32 {
	x := uuidHalf(id[:8]) ^ uuidHalf(id[8:])
	return int32(x>>32) ^ int32(x)
}

// compareUUID is Kafka's Uuid.compareTo: the most significant half, then
// the least, each as a signed long.
func compareUUID(a, b [16]byte) int {
	if c := cmp.Compare(uuidHalf(a[:8]), uuidHalf(b[:8])); c != 0 {
		return c
	}
	return cmp.Compare(uuidHalf(a[8:]), uuidHalf(b[8:]))
}

func uuidHalf(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }
