package testcluster

import "testing"

// A reserved port is refused to every other reservation, in this process
// too, until its holder lets go.
func TestReservePortIsExclusive(t *testing.T) {
	dir := t.TempDir()
	first, ok := reservePort(dir, "20001")
	if !ok {
		t.Fatal("first reservation refused")
	}
	if again, ok := reservePort(dir, "20001"); ok {
		_ = again.Close()
		t.Fatal("a reserved port was reserved again")
	}
	if other, ok := reservePort(dir, "20002"); !ok {
		t.Fatal("another port was refused")
	} else {
		_ = other.Close()
	}
	_ = first.Close()
	again, ok := reservePort(dir, "20001")
	if !ok {
		t.Fatal("a released port stays refused")
	}
	_ = again.Close()
}

// Ports of one test are distinct and held: none can be reserved again
// while the test runs.
func TestFreePortsAreReserved(t *testing.T) {
	ports := freePorts(t, 20)
	seen := map[string]bool{}
	dir := portDir()
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %s handed out twice", p)
		}
		seen[p] = true
		if c, ok := reservePort(dir, p); ok {
			_ = c.Close()
			t.Fatalf("port %s is not reserved", p)
		}
	}
}
