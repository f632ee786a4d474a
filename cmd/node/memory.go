package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryBudgetAuto is --memory-budget's default: the budget is found, in
// order, in GOMEMLIMIT, the cgroup's memory limit, and the machine's RAM.
const memoryBudgetAuto = "auto"

// Where the cgroup memory limit is (v2, then v1).
var cgroupLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// memoryBudget resolves --memory-budget into bytes (0: no budget) and
// says where the figure came from.
func memoryBudget(flag string) (uint64, string, error) {
	switch strings.TrimSpace(flag) {
	case "0":
		return 0, "--memory-budget 0", nil
	case memoryBudgetAuto, "":
	default:
		n, err := parseSize(flag)
		if err != nil {
			return 0, "", fmt.Errorf("--memory-budget: %w", err)
		}
		if n < 64<<20 {
			return 0, "", fmt.Errorf("--memory-budget %s: at least 64MiB (0 disables)", flag)
		}
		return n, "--memory-budget", nil
	}
	// GOMEMLIMIT, as the runtime parsed it: math.MaxInt64 when unset.
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return uint64(l), "GOMEMLIMIT", nil
	}
	for _, f := range cgroupLimitFiles {
		if n, ok := cgroupLimit(f); ok {
			return n, f, nil
		}
	}
	if n, ok := memTotal(); ok {
		return n, "/proc/meminfo MemTotal", nil
	}
	return 0, "none found", nil
}

// cgroupLimit reads a cgroup memory limit file; "max" and v1's huge
// "unlimited" values are no limit.
func cgroupLimit(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n == 0 || n >= 1<<60 {
		return 0, false
	}
	return n, true
}

func memTotal() (uint64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
