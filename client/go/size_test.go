package gpud

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	good := map[string]uint64{
		// gpud_proto's own cases.
		"12GiB": 12 << 30, "512MiB": 512 << 20, "512 mib": 512 << 20, "1.5GiB": 3 << 29,
		"4096": 4096, "2G": 2 << 30, "1GB": 1000000000, "0": 0,
		// Units, case, spaces.
		"1B": 1, "1b": 1, "1K": 1024, "1k": 1024, "1KB": 1000, "1KiB": 1024, "1M": 1 << 20,
		"1MB": 1000000, "1T": 1 << 40, "1TB": 1000000000000, "1TiB": 1 << 40, "1gIb": 1 << 30,
		" 12 GiB ": 12 << 30, "\u00a012KiB\u3000": 12 << 10, "\t7\n": 7, "00012": 12,
		// Decimals: rounded down, at most 9 digits, either side may be empty.
		"0.5KiB": 512, "1.": 1, ".5KiB": 512, ".": 0, "0.1B": 0, "1.999999999B": 1,
		"0.000000001GiB": 1, "0.25MiB": 256 << 10, "1.5": 1, "2.5KB": 2500,
		// The largest sizes.
		"18446744073709551615":   1<<64 - 1,
		"18446744073709551615B":  1<<64 - 1,
		"16777215TiB":            16777215 << 40,
		"16777215.999999999TiB":  16777215<<40 + 1099511626676,
		"17179869183.999999999G": 17179869183<<30 + 1073741822,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                          "no number",
		"   ":                       "no number",
		"GiB":                       "no number",
		"-1":                        "no number",
		"+1":                        "no number",
		"12 parsecs":                "unknown unit",
		"1 G i B":                   "unknown unit",
		"1e3":                       "unknown unit",
		"1,5GiB":                    "unknown unit",
		"1\u212a":                   "unknown unit", // KELVIN SIGN lowercases to k outside ASCII
		"1.2.3GiB":                  "more than one decimal point",
		"99999999999999999999":      "number too large",
		"99999999999999999999.":     "number too large",
		"20000000TiB":               "size too large",
		"16777216TiB":               "size too large",
		"18446744073709551616":      "number too large",
		"18446744073709551615.5KiB": "size too large",
		"18446744073.709551615G":    "size too large",
		"1.0000000001GiB":           "too many decimals",
	}
	for in, why := range bad {
		got, err := ParseSize(in)
		var se *SizeError
		if err == nil || !errors.As(err, &se) || se.Why != why || se.Input != in {
			t.Errorf("ParseSize(%q) = %d, %v; want the error %q", in, got, err, why)
			continue
		}
		if !strings.HasPrefix(err.Error(), "invalid size ") || !strings.HasSuffix(err.Error(), "(examples: 12GiB, 512MiB, 1.5GiB, 4096)") {
			t.Errorf("message %q", err)
		}
		if !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%q: not an invalid request", in)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for in, want := range map[uint64]string{12 << 30: "12.0 GiB", 512 << 20: "512.0 MiB", 100: "100 B", 1536: "1.5 KiB", 3 << 40: "3.0 TiB", 2048 << 40: "2048.0 TiB"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestClassesAndDevices(t *testing.T) {
	for in, want := range map[string]Class{"critical": Critical, " HIGH ": High, "Normal": Normal, "background": Background} {
		if got, err := ParseClass(in); err != nil || got != want {
			t.Errorf("ParseClass(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseClass("urgent"); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("ParseClass(urgent): %v", err)
	}
	for in, want := range map[string]string{"": "any", "any": "any", " ANY ": "any", "0": "0", "007": "7", "4294967295": "4294967295",
		"GPU-5e1a0000-0000-4000-8000-000000000000": "GPU-5e1a0000-0000-4000-8000-000000000000", "gpu_1": "gpu_1"} {
		if got, err := normalizeDevice(in); err != nil || got != want {
			t.Errorf("device %q = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"4294967296", "../etc", "abc", "GPU 1", strings.Repeat("a", 97), "-1x", "é123"} {
		if _, err := normalizeDevice(in); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("device %q: %v", in, err)
		}
	}
	if DeviceIndex(3) != "3" {
		t.Error("DeviceIndex")
	}
}
