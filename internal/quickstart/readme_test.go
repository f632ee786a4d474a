package quickstart

import (
	"reflect"
	"strings"
	"testing"
)

const sample = "# x\n\n## Quick start (demo)\n\n```sh\nmake run   # prints \"raftq: up\"\n```\n\ntext\n\n" +
	"```console\n$ bin/raftq receive jobs\nID   RECEIVES  RECEIPT  BODY\n0-1  1         AQABAQI  hello world\n$ bin/raftq ack AQABAQI\nRECEIPT  RESULT\nAQABAQI  acked\n```\n\n" +
	"## Tests\n\n```sh\nmake test\n```\n"

func TestParseReadsOnlyTheSection(t *testing.T) {
	steps, err := Parse(sample, "## Quick start")
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{
		{Background: true, Cmd: `make run   # prints "raftq: up"`, Until: "raftq: up"},
		{Cmd: "bin/raftq receive jobs", Want: []string{"ID   RECEIVES  RECEIPT  BODY", "0-1  1         AQABAQI  hello world"}},
		{Cmd: "bin/raftq ack AQABAQI", Want: []string{"RECEIPT  RESULT", "AQABAQI  acked"}},
	}
	if !reflect.DeepEqual(steps, want) {
		t.Fatalf("steps\n%#v\nwant\n%#v", steps, want)
	}
	if _, err := Parse("## Quick start\n```go\nx\n```\n", "## Quick start"); err == nil {
		t.Fatal("a go block in the quick start was accepted")
	}
}

func TestCompareChecksStableTextAndShapes(t *testing.T) {
	want := []string{"ID   RECEIVES  RECEIPT  BODY", "0-1  1         AQABAQI  hello world"}
	vars := map[string]string{}
	// Another receipt (term 3, not 2) is the same shape: accepted and
	// remembered for the ack that uses it.
	if err := Compare(want, "ID   RECEIVES  RECEIPT  BODY\n0-1  1         AQABAQM  hello world\n", vars); err != nil {
		t.Fatal(err)
	}
	if vars["AQABAQI"] != "AQABAQM" {
		t.Fatalf("vars %v", vars)
	}
	if got := Substitute("bin/raftq ack AQABAQI", vars); got != "bin/raftq ack AQABAQM" {
		t.Fatalf("Substitute = %q", got)
	}
	for _, bad := range []string{
		"ID   RECEIVES  RECEIPT  BODY\n0-1  2         AQABAQI  hello world\n", // a stable column differs
		"ID   RECEIVES  RECEIPT  BODY\n0-1  1         AQABAQI  hello\n",       // the body differs
		"ID   RECEIVES  RECEIPT  BODY\n0-1  1         not-a-receipt  hello world\n",
		"ID   RECEIVES  RECEIPT  BODY\n",                                  // a line missing
		"raftq: queue \"jobs\" not found\n",                               // an error
		"ID   RECEIVES  RECEIPT  BODY\n0-1  1  AQABAQI  hello world\nx\n", // a line more
	} {
		if err := Compare(want, bad, map[string]string{}); err == nil {
			t.Errorf("Compare accepted %q", bad)
		}
	}
	status := []string{"node n1, meta leader n3", "", "SHARD  LEADER  TERM", "0      n3      2"}
	if err := Compare(status, "node n2, meta leader n2\n\nSHARD  LEADER  TERM\n0      n1      4\n", map[string]string{}); err != nil {
		t.Fatalf("status with other leaders: %v", err)
	}
	if err := Compare(status, "node n2, meta leader -\n\nSHARD  LEADER  TERM\n0      n1      4\n", map[string]string{}); err == nil || !strings.Contains(err.Error(), `"-"`) {
		t.Fatalf("status without a meta leader accepted: %v", err)
	}
}
