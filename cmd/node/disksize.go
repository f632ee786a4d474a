package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/raftq/raftq/cluster"
)

// parseSize reads a byte count: a number with an optional unit, binary
// (KiB, MiB, GiB, TiB) or decimal (kB, MB, GB, TB), or B; "64MiB", "1.5GiB".
func parseSize(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a number and a unit, e.g. 512MiB", s)
	}
	mult := map[string]float64{
		"": 1, "B": 1,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)", s, unit)
	}
	return uint64(v * mult), nil
}

// parseReserve reads --disk-reserve: comma-separated sizes and
// percentages of the filesystem, of which the largest applies; "0"
// refuses nothing.
func parseReserve(s string) (cluster.DiskReserve, error) {
	var r cluster.DiskReserve
	for _, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		if p, ok := strings.CutSuffix(term, "%"); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil || v < 0 || v >= 100 {
				return r, fmt.Errorf("--disk-reserve %q: a percentage must be within [0, 100)", term)
			}
			r.Percent = max(r.Percent, v)
			continue
		}
		v, err := parseSize(term)
		if err != nil {
			return r, fmt.Errorf("--disk-reserve: %w", err)
		}
		r.Bytes = max(r.Bytes, v)
	}
	return r, nil
}
