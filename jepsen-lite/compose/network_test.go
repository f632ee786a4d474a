package compose

import (
	"slices"
	"testing"
)

func TestIsolatedMapsOnlySingleNodeCuts(t *testing.T) {
	cases := []struct {
		name  string
		comps [][]int
		nodes int
		want  []int
		ok    bool
	}{
		{"isolate one", [][]int{{1}, {0, 2}}, 3, []int{1}, true},
		{"majority first", [][]int{{2, 0}, {1}}, 3, []int{1}, true},
		{"two singletons of five", [][]int{{4}, {0, 1, 2}, {3}}, 5, []int{3, 4}, true},
		{"bridge leaves a node out", [][]int{{2}, {0}}, 3, nil, false},
		{"minority of two", [][]int{{0, 1}, {2, 3, 4}}, 5, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := isolated(c.comps, c.nodes)
			if (err == nil) != c.ok {
				t.Fatalf("isolated(%v) error %v, want ok=%v", c.comps, err, c.ok)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("isolated(%v) = %v, want %v", c.comps, got, c.want)
			}
		})
	}
}
