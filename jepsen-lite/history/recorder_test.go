package history

import (
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

func TestRecorderWritesWhatItKeeps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	r, err := NewRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				r.Add(Op{Type: Invoke, F: FEnqueue, Process: p, Value: string(rune('a'+p)) + string(rune('0'+i%10))})
				r.Add(Op{Type: OK, F: FEnqueue, Process: p, MessageID: "0-1", Deliveries: []Delivery{{MessageID: "0-1", Epoch: 3}}})
			}
		}()
	}
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	mem := r.Ops()
	disk, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(mem) != 800 || !reflect.DeepEqual(mem, disk) {
		t.Fatalf("file and memory differ: %d in memory, %d on disk", len(mem), len(disk))
	}
	for i, op := range disk {
		if op.Index != int64(i) {
			t.Fatalf("op %d has index %d", i, op.Index)
		}
		if i > 0 && op.Time < disk[i-1].Time {
			t.Fatalf("time went backwards at op %d", i)
		}
	}
}
