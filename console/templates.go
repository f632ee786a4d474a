package console

import (
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
)

// pageNames are the templates under web/, each rendered inside layout.html.
var pageNames = []string{"cluster", "queues", "queue", "dlq", "message", "schedules", "login"}

var funcs = template.FuncMap{
	"q":   url.QueryEscape,
	"u64": u64,
	"join": func(ss []string) string {
		return strings.Join(ss, ", ")
	},
	"shards":    shardList,
	"nodeState": nodeState,
	"dur": func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return d.String()
	},
	"age": age,
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"rate": rate,
	"body": func(b []byte) string {
		const maxShown = 4096
		s := string(b)
		if len(s) > maxShown {
			return s[:maxShown] + fmt.Sprintf("... (%d bytes in all)", len(b))
		}
		return s
	},
	"misfire": func(m client.Misfire) string {
		return map[client.Misfire]string{client.MisfireFireOnce: "fire-once", client.MisfireSkip: "skip", client.MisfireCatchUp: "catch-up"}[m]
	},
	"grants": func(gs []client.Grant) string {
		out := make([]string, len(gs))
		for i, g := range gs {
			out[i] = g.String()
		}
		return strings.Join(out, " ")
	},
}

func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(webFS, "web/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: parse layout: %w", err)
	}
	out := make(map[string]*template.Template, len(pageNames))
	for _, n := range pageNames {
		t, err := template.Must(base.Clone()).ParseFS(webFS, "web/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse page %s: %w", n, err)
		}
		out[n] = t
	}
	return out, nil
}

// nodeState is a node's state as raftq cluster nodes shows it.
func nodeState(n client.NodeInfo) string {
	switch {
	case n.Retired:
		return "retired"
	case n.Draining:
		return n.State + ",draining"
	}
	return n.State
}

// shardList is "0,2,5", or "-" for none.
func shardList(ids []uint32) string {
	if len(ids) == 0 {
		return "-"
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprint(id)
	}
	return strings.Join(out, ",")
}
