package gpud

import (
	"strconv"
	"strings"
)

// Class is a request's priority class. Higher classes are served first; requests of one
// class are served in arrival order.
type Class string

// The four classes, highest first.
const (
	// Critical is for deadline-critical work (WinningPoSt): its waiting asks compute holders
	// to yield. Only the peers in access.critical_uids or access.critical_groups may ask for
	// it.
	Critical Class = "critical"
	// High is for time-bound work (WindowPoSt).
	High Class = "high"
	// Normal is the default: regular proofs (C2).
	Normal Class = "normal"
	// Background is for batch work that may wait for everything else.
	Background Class = "background"
)

// Classes lists the four classes, highest first.
var Classes = []Class{Critical, High, Normal, Background}

// ParseClass reads a class name as gpud's tools do: one of the four, ignoring case and
// surrounding spaces. Another name gives an *Error with CodeInvalidRequest.
func ParseClass(s string) (Class, error) {
	t := strings.TrimSpace(s)
	for _, c := range Classes {
		if strings.EqualFold(string(c), t) {
			return c, nil
		}
	}
	return "", invalid("unknown class %q (expected critical, high, normal or background)", s)
}

// Valid reports whether c is one of the four classes as the wire spells them.
func (c Class) Valid() bool {
	switch c {
	case Critical, High, Normal, Background:
		return true
	}
	return false
}

// String returns the class's wire name.
func (c Class) String() string { return string(c) }

// AnyDevice is the device selector that lets gpud choose (the default).
const AnyDevice = "any"

// DeviceIndex returns the device selector for gpud's device index i ("0", "1", …).
func DeviceIndex(i uint32) string { return strconv.FormatUint(uint64(i), 10) }

// normalizeDevice checks a device selector as gpud reads one ("any", an index, or a UUID of
// 4 to 96 letters, digits, '-' and '_') and returns its wire form.
func normalizeDevice(s string) (string, error) {
	t := strings.TrimSpace(s)
	if t == "" || strings.EqualFold(t, AnyDevice) {
		return AnyDevice, nil
	}
	digits := true
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			digits = false
			break
		}
	}
	if digits {
		n, err := strconv.ParseUint(t, 10, 32)
		if err != nil {
			return "", invalid("invalid device %q (the index is too large)", s)
		}
		return strconv.FormatUint(n, 10), nil
	}
	if len(t) >= 4 && len(t) <= 96 {
		ok := true
		for i := 0; i < len(t); i++ {
			c := t[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				ok = false
				break
			}
		}
		if ok {
			return t, nil
		}
	}
	return "", invalid("invalid device %q (expected \"any\", an index such as 0, or a UUID such as GPU-…)", s)
}
