package gpud

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// SizeError is a size string that ParseSize could not read. It matches ErrInvalidRequest.
type SizeError struct {
	// Input is the string as given.
	Input string
	// Why says what is wrong with it.
	Why string
}

// Error returns the same text as gpud_proto's parse_size.
func (e *SizeError) Error() string {
	return fmt.Sprintf("invalid size %q: %s (examples: 12GiB, 512MiB, 1.5GiB, 4096)", e.Input, e.Why)
}

// Is makes a size error match ErrInvalidRequest: it is a bad argument.
func (e *SizeError) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == CodeInvalidRequest
}

var sizeUnits = map[string]uint64{
	"b":   1,
	"k":   1 << 10,
	"kb":  1000,
	"kib": 1 << 10,
	"m":   1 << 20,
	"mb":  1000000,
	"mib": 1 << 20,
	"g":   1 << 30,
	"gb":  1000000000,
	"gib": 1 << 30,
	"t":   1 << 40,
	"tb":  1000000000000,
	"tib": 1 << 40,
}

// ParseSize reads a byte size with the semantics of gpud_proto's parse_size: a number
// (integer or decimal, at most 9 decimals) and an optional unit, case-insensitive, with
// optional spaces around and between them: B, KiB, MiB, GiB, TiB (binary), KB, MB, GB, TB
// (decimal), or bare K, M, G, T (binary). "12GiB", "512 mib", "1.5GiB", "4096" and "2G" are
// sizes; a fractional byte count is rounded down. Sizes over 2^64-1 bytes are refused.
func ParseSize(input string) (uint64, error) {
	fail := func(why string) (uint64, error) {
		return 0, &SizeError{Input: input, Why: why}
	}
	s := strings.TrimSpace(input)
	split := len(s)
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			split = i
			break
		}
	}
	number, unit := s[:split], s[split:]
	if number == "" {
		return fail("no number")
	}
	unit = asciiLower(strings.TrimSpace(unit))
	multiplier := uint64(1)
	if unit != "" {
		m, ok := sizeUnits[unit]
		if !ok {
			return fail("unknown unit")
		}
		multiplier = m
	}
	whole, frac, decimal := strings.Cut(number, ".")
	if !decimal {
		n, err := strconv.ParseUint(number, 10, 64)
		if err != nil {
			return fail("number too large")
		}
		hi, lo := bits.Mul64(n, multiplier)
		if hi != 0 {
			return fail("size too large")
		}
		return lo, nil
	}
	if strings.Contains(frac, ".") {
		return fail("more than one decimal point")
	}
	var w uint64
	if whole != "" {
		n, err := strconv.ParseUint(whole, 10, 64)
		if err != nil {
			return fail("number too large")
		}
		w = n
	}
	if len(frac) > 9 {
		return fail("too many decimals")
	}
	var digits uint64
	if frac != "" {
		n, err := strconv.ParseUint(frac, 10, 64)
		if err != nil {
			return fail("bad decimals")
		}
		digits = n
	}
	scale := uint64(1)
	for i := 0; i < len(frac); i++ {
		scale *= 10
	}
	hi, wholeBytes := bits.Mul64(w, multiplier)
	if hi != 0 {
		return fail("size too large")
	}
	// digits < 10^9 and multiplier <= 2^40: the product's high word is below scale.
	hi, lo := bits.Mul64(digits, multiplier)
	fracBytes, _ := bits.Div64(hi, lo, scale)
	sum, carry := bits.Add64(wholeBytes, fracBytes, 0)
	if carry != 0 {
		return fail("size too large")
	}
	return sum, nil
}

// FormatSize writes a byte count with a binary unit, as gpud shows sizes: "12.0 GiB",
// "512.0 MiB", "100 B".
func FormatSize(bytes uint64) string {
	names := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	value := float64(bytes)
	unit := 0
	for value >= 1024 && unit+1 < len(names) {
		value /= 1024
		unit++
	}
	if unit == 0 {
		return fmt.Sprintf("%d B", bytes)
	}
	return fmt.Sprintf("%.1f %s", value, names[unit])
}

// asciiLower lowercases ASCII letters only, as Rust's to_ascii_lowercase does.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}
