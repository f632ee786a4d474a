package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testenv"
)

// The test binary doubles as a helper run inside a namespace (`ip netns
// exec`): JL_HELPER=listen:ADDR serves TCP until killed, JL_HELPER=dial:ADDR
// exits 0 if it can connect within a second.
func TestMain(m *testing.M) {
	if h := os.Getenv("JL_HELPER"); h != "" {
		mode, addr, _ := strings.Cut(h, ":")
		switch mode {
		case "listen":
			l, err := net.Listen("tcp", addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
			for {
				c, err := l.Accept()
				if err != nil {
					os.Exit(4)
				}
				_ = c.Close()
			}
		case "dial":
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				os.Exit(1)
			}
			_ = c.Close()
			os.Exit(0)
		case "udprecv":
			// Exit 0 on the first datagram, 1 if none came within 3 s.
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
			fmt.Println("listening")
			_ = pc.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, _, err := pc.ReadFrom(make([]byte, 64)); err != nil {
				os.Exit(1)
			}
			os.Exit(0)
		case "udpsend":
			c, err := net.Dial("udp", addr)
			if err != nil {
				os.Exit(3)
			}
			for range 20 {
				_, _ = c.Write([]byte("x"))
				time.Sleep(50 * time.Millisecond)
			}
			os.Exit(0)
		}
		os.Exit(5)
	}
	os.Exit(m.Run())
}

func helper(ns, mode, addr string) *exec.Cmd {
	self, _ := os.Executable()
	cmd := exec.Command("ip", "netns", "exec", ns, self)
	cmd.Env = append(os.Environ(), "JL_HELPER="+mode+":"+addr)
	return cmd
}

func canDial(ns, addr string) bool { return helper(ns, "dial", addr).Run() == nil }

func canDialFromRoot(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func mustCreate(t *testing.T, n int) *Net {
	t.Helper()
	if err := Require(); err != nil {
		testenv.SkipOrFail(t, "netns backend unavailable: "+err.Error())
	}
	nw, err := Create(context.Background(), n)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := nw.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return nw
}

func namespaces(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	return string(out)
}

func TestPartitionCutsNodesButNotTheHarness(t *testing.T) {
	nw := mustCreate(t, 3)
	addrs := make([]string, 3)
	for i, ns := range nw.Nodes {
		addrs[i] = ns.IP + ":7999"
		l := helper(ns.Name, "listen", addrs[i])
		if err := l.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Process.Kill(); _ = l.Wait() })
	}
	// Wait for the listeners.
	deadline := time.Now().Add(5 * time.Second)
	for _, a := range addrs {
		for !canDialFromRoot(a) {
			if time.Now().After(deadline) {
				t.Fatalf("listener %s never came up", a)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !canDial(nw.Nodes[0].Name, addrs[1]) {
		t.Fatal("n1 cannot reach n2 before any partition")
	}
	ctx := context.Background()
	// Bridge: n1 sees both sides, n2 and n3 cannot see each other.
	if err := nw.Partition(ctx, [][]int{{1}, {2}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		from, to int
		want     bool
	}{
		{1, 2, false}, {2, 1, false}, {0, 1, true}, {0, 2, true}, {1, 0, true},
	}
	for _, tt := range tests {
		if got := canDial(nw.Nodes[tt.from].Name, addrs[tt.to]); got != tt.want {
			t.Errorf("n%d -> n%d reachable = %v, want %v", tt.from+1, tt.to+1, got, tt.want)
		}
	}
	for _, a := range addrs {
		if !canDialFromRoot(a) {
			t.Errorf("harness cannot reach %s during a partition", a)
		}
	}
	if err := nw.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if !canDial(nw.Nodes[1].Name, addrs[2]) {
		t.Error("n2 cannot reach n3 after heal")
	}
}

func TestDestroyAndSweepLeaveNothing(t *testing.T) {
	if err := Require(); err != nil {
		testenv.SkipOrFail(t, "netns backend unavailable: "+err.Error())
	}
	ctx := context.Background()
	nw, err := Create(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(namespaces(t), nw.Hub) {
		t.Fatalf("hub %s missing after create", nw.Hub)
	}
	// A process left running inside the dead run's namespace.
	orphan := helper(nw.Nodes[0].Name, "listen", nw.Nodes[0].IP+":7998")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = orphan.Wait(); close(exited) }()
	for deadline := time.Now().Add(5 * time.Second); !canDialFromRoot(nw.Nodes[0].IP + ":7998"); {
		if time.Now().After(deadline) {
			t.Fatal("orphan listener never came up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A run that died: its state file names a pid that is gone.
	if err := os.WriteFile(nw.state, []byte(fmt.Sprintf("pid %d\nnetns %s\nnetns %s\nnetns %s\n", 1<<22+12345, nw.Hub, nw.Nodes[0].Name, nw.Nodes[1].Name)), 0o644); err != nil {
		t.Fatal(err)
	}
	swept, err := Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, id := range swept {
		found = found || id == nw.ID
	}
	if !found {
		t.Fatalf("sweep removed %v, not %s", swept, nw.ID)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = orphan.Process.Kill()
		t.Error("sweep left a process running in a dead run's namespace")
	}
	list := namespaces(t)
	for _, name := range []string{nw.Hub, nw.Nodes[0].Name, nw.Nodes[1].Name} {
		if strings.Contains(list, name) {
			t.Errorf("namespace %s left after sweep", name)
		}
	}
	if out, _ := exec.Command("ip", "link", "show", nw.uplink()).CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("uplink %s left after sweep: %s", nw.uplink(), out)
	}
	// A live run's network is left alone.
	live := mustCreate(t, 1)
	if _, err := Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(namespaces(t), live.Hub) {
		t.Error("sweep removed a live run's network")
	}
}

// udpReaches reports whether a datagram sent from namespace from reaches a
// listener in namespace to. UDP, unlike a TCP connect, needs only one
// direction, so it tells a one-way cut from a full one.
func udpReaches(t *testing.T, from, to NS) bool {
	t.Helper()
	addr := to.IP + ":7997"
	recv := helper(to.Name, "udprecv", addr)
	out, err := recv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	// Send only once the receiver is bound, or early datagrams are lost
	// for the wrong reason.
	if _, err := out.Read(make([]byte, 16)); err != nil {
		_ = recv.Process.Kill()
		_ = recv.Wait()
		t.Fatalf("udp receiver in %s: %v", to.Name, err)
	}
	if err := helper(from.Name, "udpsend", addr).Run(); err != nil {
		t.Fatalf("udp sender in %s: %v", from.Name, err)
	}
	return recv.Wait() == nil
}

func TestCutOneWayDropsOnlyOneDirection(t *testing.T) {
	nw := mustCreate(t, 3)
	ctx := context.Background()
	n1, n2, n3 := nw.Nodes[0], nw.Nodes[1], nw.Nodes[2]
	if !udpReaches(t, n1, n2) || !udpReaches(t, n2, n1) {
		t.Fatal("n1 and n2 cannot exchange datagrams before any cut")
	}
	if err := nw.CutOneWay(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if udpReaches(t, n1, n2) {
		t.Error("n1 -> n2 still delivered after CutOneWay(n1, n2)")
	}
	if !udpReaches(t, n2, n1) {
		t.Error("n2 -> n1 dropped: CutOneWay(n1, n2) cut the other direction too")
	}
	if !udpReaches(t, n1, n3) || !udpReaches(t, n3, n2) {
		t.Error("CutOneWay(n1, n2) cut a link it does not name")
	}
	for _, ns := range nw.Nodes {
		l := helper(ns.Name, "listen", ns.IP+":7996")
		if err := l.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Process.Kill(); _ = l.Wait() })
	}
	for deadline := time.Now().Add(5 * time.Second); !canDialFromRoot(n2.IP + ":7996"); {
		if time.Now().After(deadline) {
			t.Fatal("the harness cannot reach n2 during a one-way cut")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := nw.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if !udpReaches(t, n1, n2) {
		t.Error("n1 -> n2 still dropped after Heal")
	}
}
