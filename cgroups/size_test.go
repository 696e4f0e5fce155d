package cgroups_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/cgroups"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "0K": 0, "1": 1, "1b": 1, "512B": 512, "007": 7,
		"1K": 1 << 10, "1k": 1 << 10, "1KB": 1 << 10, "1KiB": 1 << 10, "1kib": 1 << 10,
		"256M": 256 << 20, "256m": 256 << 20, "256MiB": 256 << 20, "256mb": 256 << 20,
		"1G": 1 << 30, "1g": 1 << 30, "1GiB": 1 << 30, "2T": 2 << 40, "2TiB": 2 << 40,
		"9223372036854775807": math.MaxInt64, "8388607T": 8388607 << 40,
	}
	for in, want := range good {
		got, err := cgroups.ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                         "empty",
		"-1":                       "negative",
		"-1G":                      "negative",
		"+1":                       "does not start with a number",
		"G":                        "does not start with a number",
		" 1G":                      "does not start with a number",
		"1.5G":                     "fractional",
		"1,5G":                     "fractional",
		"1 G":                      "unknown unit",
		"1X":                       "unknown unit",
		"1Gi":                      "unknown unit",
		"1P":                       "unknown unit",
		"9223372036854775808":      "too large",
		"8388608T":                 "too large",
		"99999999999999999999999G": "too large",
	}
	for in, want := range bad {
		if n, err := cgroups.ParseSize(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSize(%q) = %d, %v; want an error containing %q", in, n, err, want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1: "1", 1000: "1000", 1024: "1K", 1536: "1536", 3 << 19: "1536K", 256 << 20: "256M", 1 << 30: "1G", 5 << 40: "5T"} {
		if got := cgroups.FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q; want %q", n, got, want)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1", "256M", "1GiB", "1.5G", "-1", "9223372036854775807", "8388607T", "1kb", "", "12x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := cgroups.ParseSize(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("ParseSize(%q) = %d with error %v", s, n, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d < 0", s, n)
		}
		if s == "" || s[0] < '0' || s[0] > '9' || strings.ContainsAny(s, ".,-+ ") {
			t.Fatalf("ParseSize(%q) accepted a malformed size", s)
		}
		// A letter suffix other than B multiplies by a power of 1024.
		if suffix := strings.TrimLeft(s, "0123456789"); suffix != "" && !strings.EqualFold(suffix, "b") && n%1024 != 0 {
			t.Fatalf("ParseSize(%q) = %d, not a multiple of 1024", s, n)
		}
		for _, again := range []string{strconv.FormatInt(n, 10), cgroups.FormatSize(n)} {
			if m, err := cgroups.ParseSize(again); err != nil || m != n {
				t.Fatalf("ParseSize(%q) = %d, but ParseSize(%q) = %d, %v", s, n, again, m, err)
			}
		}
	})
}
