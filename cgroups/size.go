package cgroups

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The byte-count syntax of memory limits lives here, next to
// [Limits.Memory], because both the sandbox package (whose error
// messages name a memory limit) and the tent CLI's textual parsers
// (package sandbox/policy, which re-exports these two functions) need
// it, and the sandbox package must not import the policy package (that
// would link the YAML decoder into every program embedding sandbox).
// Parser and formatter stay together: FormatSize's output must always be
// accepted by ParseSize.

// sizeUnits maps the accepted suffixes, lower-cased, to their multiplier.
// K, M, G and T are powers of 1024 in every spelling (as in Docker).
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

const sizeSyntax = "want a whole number of bytes with an optional K, M, G or T suffix (powers of 1024), e.g. 256M or 1G"

// ParseSize parses a byte count: a non-negative whole number with an
// optional suffix K, M, G or T (powers of 1024; also written k, KB, KiB,
// and so on, in any case) or B. "0" is zero. Fractions ("1.5G"), signs,
// spaces and values above math.MaxInt64 are rejected. Its errors
// describe what is wrong without repeating the value: callers name the
// flag or field and quote the value.
func ParseSize(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty size: " + sizeSyntax)
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	digits, suffix := s[:i], s[i:]
	switch {
	case strings.HasPrefix(s, "-"):
		return 0, errors.New("size is negative: " + sizeSyntax)
	case digits == "":
		return 0, errors.New("size does not start with a number: " + sizeSyntax)
	case strings.HasPrefix(suffix, ".") || strings.HasPrefix(suffix, ","):
		return 0, errors.New("fractional sizes are not supported: use a smaller unit, e.g. 1536M for 1.5G")
	}
	mult, ok := sizeUnits[strings.ToLower(suffix)]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q: %s", suffix, sizeSyntax)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, errors.New("size is too large: the maximum is 2^63-1 bytes (about 8388607T)")
	}
	return n * mult, nil
}

// FormatSize formats n in the largest unit that divides it exactly, the
// inverse of [ParseSize]: 268435456 is "256M", 1000 is "1000".
func FormatSize(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
