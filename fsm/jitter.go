package fsm

// splitmix64 is a fixed, well-mixed 64-bit hash (Steele et al.): replicas
// derive the same "random" numbers from the same inputs, with no random
// source of their own.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// jitter is the random number for one message in one command of an entry.
func jitter(seed uint64, cmdIdx int, id uint64) uint64 {
	return splitmix64(splitmix64(seed^uint64(cmdIdx)) ^ id)
}

// backoff is exponential backoff with full jitter: uniform in
// [0, min(maxMs, baseMs*2^(attempt-1))].
func backoff(baseMs, maxMs int64, attempt uint32, r uint64) int64 {
	ceil := maxMs
	if attempt == 0 {
		attempt = 1
	}
	if attempt-1 < 62 {
		if b := baseMs << (attempt - 1); b>>(attempt-1) == baseMs && b < ceil {
			ceil = b
		}
	}
	if ceil <= 0 {
		return 0
	}
	return int64(r % uint64(ceil+1))
}
