package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the units ParseSize takes, lower-cased: K, M, G, T (with
// or without B) are decimal, as media are sold (a DVD's 4.7 GB is
// 4,700,000,000 bytes); Ki, Mi, Gi, Ti (with or without B) are binary.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
}

// ParseSize parses a size such as 4.7G, 700MB, 64MiB or 1048576 into
// bytes, rounded down. K, M, G and T are powers of 1000, as on a DVD's
// label; Ki, Mi, Gi and Ti powers of 1024; a trailing B changes nothing.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult, ok := sizeUnits[unit]
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || num == "" {
		return 0, fmt.Errorf("size %q: want a number and a unit, e.g. 4.7G (decimal: K, M, G, T) or 4GiB (binary: Ki, Mi, Gi, Ti)", s)
	}
	b := math.Floor(v * mult)
	if b < 1 || b > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: out of range", s)
	}
	return int64(b), nil
}
