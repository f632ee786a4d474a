package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/client"
)

// callTimeout bounds the API calls of one page or refresh; a redrive,
// rate-limited by the server (100 messages per second by default), gets
// longer.
const (
	callTimeout    = 10 * time.Second
	redriveTimeout = time.Minute
)

// view is what every page template gets.
type view struct {
	Title, Nav   string
	Who          string
	LoggedIn     bool
	RequireLogin bool
	CSRF         string
	Node         string
	Flash        flash
	Poll         string // the JSON endpoint the page's script polls
	Error        string // the API's refusal of the page's main call
	Data         any
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /console/{$}", c.page("cluster", c.clusterPage))
	m.HandleFunc("GET /console/queues", c.page("queues", c.queuesPage))
	m.HandleFunc("GET /console/queue", c.page("queue", c.queuePage))
	m.HandleFunc("GET /console/dlq", c.page("dlq", c.dlqPage))
	m.HandleFunc("GET /console/message", c.page("message", c.messagePage))
	m.HandleFunc("GET /console/schedules", c.page("schedules", c.schedulesPage))
	m.HandleFunc("POST /console/queue/pause", c.action(c.pauseQueue))
	m.HandleFunc("POST /console/queue/resume", c.action(c.pauseQueue))
	m.HandleFunc("POST /console/dlq/redrive", c.redrive)
	m.HandleFunc("POST /console/dlq/discard", c.action(c.discard))
	m.HandleFunc("POST /console/schedule", c.action(c.scheduleAction))
	m.HandleFunc("GET /console/api/cluster", c.api(c.clusterAPI))
	m.HandleFunc("GET /console/api/queues", c.api(c.queuesAPI))
	m.HandleFunc("GET /console/api/queue", c.api(c.queueAPI))
	m.HandleFunc("GET /console/login", c.loginForm)
	m.HandleFunc("POST /console/login", c.login)
	m.HandleFunc("POST /console/logout", c.logout)
	m.Handle("GET /console/static/", c.static)
	// GET only, so the mux answers any other method on a console path
	// with 405.
	m.HandleFunc("GET /console/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "console: no such page: "+r.URL.Path, http.StatusNotFound)
	})
	c.mux = m
}

// apiError renders a refused or failed call as the API's status code and
// message, e.g. "PERMISSION_DENIED: ...".
func apiError(err error) string {
	if st, ok := status.FromError(err); ok && st.Code() != codes.OK && st.Code() != codes.Unknown {
		return codeName(st.Code()) + ": " + err.Error()
	}
	return err.Error()
}

// codeName spells a gRPC code as the API's documentation does.
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// httpStatus is the HTTP status of a page whose main call failed with err.
func httpStatus(err error) int {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable, codes.DeadlineExceeded:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadGateway
}

// session finds the caller's session. Where no login is needed a caller
// without one gets an anonymous session (it carries the CSRF token).
// ok is false when the caller must log in first.
func (c *Console) session(w http.ResponseWriter, r *http.Request) (se *session, ok bool, err error) {
	if ck, err := r.Cookie(c.cookie); err == nil {
		se = c.sessions.get(ck.Value)
	}
	if se != nil {
		return se, se.loggedIn || !c.o.RequireLogin, nil
	}
	if c.o.RequireLogin {
		return nil, false, nil
	}
	se, err = c.sessions.create(nil, client.Principal{Name: "anonymous"}, false)
	if err != nil {
		return nil, false, err
	}
	c.setCookie(w, se)
	return se, true, nil
}

func (c *Console) setCookie(w http.ResponseWriter, se *session) {
	http.SetCookie(w, &http.Cookie{Name: c.cookie, Value: se.id, Path: Prefix, HttpOnly: true, Secure: c.o.Secure,
		SameSite: http.SameSiteStrictMode, Expires: se.expires})
}

// clientOf is the client a session's calls go through.
func (c *Console) clientOf(ctx context.Context, se *session) (*client.Client, error) {
	if se.cl != nil {
		return se.cl, nil
	}
	return c.anonClient(ctx)
}

func (c *Console) newView(se *session, title, nav string) *view {
	v := &view{Title: title, Nav: nav, RequireLogin: c.o.RequireLogin, Node: c.o.NodeID}
	if se != nil {
		v.Who, v.LoggedIn, v.CSRF = se.principal.Name, se.loggedIn, se.csrf
		v.Flash = c.sessions.takeFlash(se)
	}
	return v
}

type pageFunc func(ctx context.Context, r *http.Request, cl *client.Client, v *view) (status int)

// page serves a GET page: the caller's session and client, then fn.
func (c *Console) page(name string, fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se, ok, err := c.session(w, r)
		if err != nil {
			http.Error(w, "console: "+err.Error()+fmt.Sprintf(" (limit %d); try again later", c.o.MaxSessions), http.StatusServiceUnavailable)
			return
		}
		if !ok {
			http.Redirect(w, r, Prefix+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		v := c.newView(se, "", name)
		code := http.StatusOK
		cl, err := c.clientOf(ctx, se)
		if err != nil {
			v.Error, code = apiError(err), httpStatus(err)
		} else {
			code = fn(ctx, r, cl, v)
		}
		c.render(w, code, name, v)
	}
}

func (c *Console) render(w http.ResponseWriter, code int, name string, v *view) {
	t := c.pages[name]
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "layout", v); err != nil {
		c.o.Logger.Error("console: render", "page", name, "err", err)
		http.Error(w, "console: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// form reads a POST of a live session: the body bounded, the CSRF token
// and, when the browser sends one, the Origin checked. On failure it has
// answered.
func (c *Console) form(w http.ResponseWriter, r *http.Request) (*session, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, fmt.Sprintf("console: request body over %d bytes", MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return nil, false
		}
		http.Error(w, "console: bad form: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	if !sameOrigin(r) {
		http.Error(w, "console: cross-origin request refused (Origin "+r.Header.Get("Origin")+")", http.StatusForbidden)
		return nil, false
	}
	var se *session
	if ck, err := r.Cookie(c.cookie); err == nil {
		se = c.sessions.get(ck.Value)
	}
	if se == nil || (c.o.RequireLogin && !se.loggedIn) {
		http.Error(w, "console: no session (log in again at "+Prefix+"login)", http.StatusUnauthorized)
		return nil, false
	}
	if !se.csrfOK(r.PostForm.Get("csrf")) {
		http.Error(w, "console: missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
		return nil, false
	}
	return se, true
}

// back is where a form returns to: its "back" field if it is a console
// path, else the console's first page.
func back(r *http.Request) string {
	b := r.PostForm.Get("back")
	if strings.HasPrefix(b, Prefix) && !strings.HasPrefix(b, "//") && !strings.ContainsAny(b, "\\\r\n") {
		return b
	}
	return Prefix
}

// actionFunc does a form's action; cl dials (or reuses) the caller's
// client, called once the form's fields are checked.
type actionFunc func(ctx context.Context, r *http.Request, cl func() (*client.Client, error)) (notice string, err error)

// action serves a POST that changes something through the API, then
// returns to the page the form came from with what happened.
func (c *Console) action(fn actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se, ok := c.form(w, r)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		var f flash
		var err error
		f.Notice, err = fn(ctx, r, func() (*client.Client, error) { return c.clientOf(ctx, se) })
		if err != nil {
			f = flash{Error: apiError(err)}
		}
		c.sessions.setFlash(se, f)
		http.Redirect(w, r, back(r), http.StatusSeeOther)
	}
}

// badInput is a console-side refusal of a form field, shown like the
// API's own.
func badInput(format string, a ...any) error {
	return status.Errorf(codes.InvalidArgument, format, a...)
}

func required(r *http.Request, field string) (string, error) {
	v := strings.TrimSpace(r.Form.Get(field))
	if v == "" {
		return "", badInput("%s is required", field)
	}
	return v, nil
}

// ---- login ----

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	v := c.newView(nil, "Log in", "login")
	v.Data = loginData{Next: safeNext(r.URL.Query().Get("next"))}
	c.render(w, http.StatusOK, "login", v)
}

type loginData struct{ Next string }

func safeNext(n string) string {
	if strings.HasPrefix(n, Prefix) && !strings.HasPrefix(n, "//") && !strings.ContainsAny(n, "\\\r\n") {
		return n
	}
	return Prefix
}

// login checks an API key with WhoAmI and, if the node takes it, starts a
// session holding it. The login form needs no CSRF token (there is no
// session yet); SameSite=Strict and the Origin check keep other sites from
// logging a browser in.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	fail := func(code int, msg string) {
		v := c.newView(nil, "Log in", "login")
		v.Error = msg
		v.Data = loginData{Next: safeNext(r.PostForm.Get("next"))}
		c.render(w, code, "login", v)
	}
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, fmt.Sprintf("console: request body over %d bytes", MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "console: bad form: "+err.Error(), http.StatusBadRequest)
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "console: cross-origin request refused (Origin "+r.Header.Get("Origin")+")", http.StatusForbidden)
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" {
		fail(http.StatusBadRequest, "enter an API key (raftq keys create NAME --grant ROLE:QUEUES prints one, rqk_...)")
		return
	}
	if !strings.HasPrefix(token, "rqk_") || len(token) > 512 {
		fail(http.StatusBadRequest, "that is not an API key: a key starts with rqk_ (raftq keys create prints it once)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	cl, err := c.o.Dial(ctx, token)
	if err != nil {
		fail(httpStatus(err), "login refused: "+apiError(err))
		return
	}
	p, err := cl.WhoAmI(ctx)
	if err != nil {
		_ = cl.Close()
		fail(httpStatus(err), "login refused: "+apiError(err))
		return
	}
	se, err := c.sessions.create(cl, p, true)
	if err != nil {
		_ = cl.Close()
		fail(http.StatusServiceUnavailable, fmt.Sprintf("login refused: %d console sessions are open, the limit; log out of one or wait for one to expire (idle ones end after %v)", c.o.MaxSessions, c.o.SessionIdle))
		return
	}
	if ck, err := r.Cookie(c.cookie); err == nil {
		c.sessions.drop(ck.Value) // an anonymous session before it
	}
	c.setCookie(w, se)
	c.o.Logger.Info("console login", "principal", p.Name)
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	se, ok := c.form(w, r)
	if !ok {
		return
	}
	c.sessions.drop(se.id)
	http.SetCookie(w, &http.Cookie{Name: c.cookie, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true, Secure: c.o.Secure, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// ---- cluster ----

type replicaView struct {
	Node            string
	Leader          bool
	Commit, Applied uint64
	Snapshot        string // "index (term t)" of the replica's latest snapshot, "-" for none
	Lag             string // the leader's commit index minus this replica's applied index
	Reached         bool
}

type shardView struct {
	ID         uint32
	Leader     string
	LeaderAddr string
	Term       uint64
	Commit     uint64
	Applied    uint64
	Replicas   []replicaView
	Latency    []latencySample
	LastMean   string
	LastP99    string
	LastCount  float64
}

type clusterData struct {
	Status    *client.ClusterStatus
	Nodes     []client.NodeInfo
	NodesErr  string
	Shards    []shardView
	Unreached []string
}

// cluster gathers the cluster page: this node's view (Status), the node
// list (Nodes) and every member's own indexes (StatusAt each), from which
// each follower's lag behind its leader.
func (c *Console) cluster(ctx context.Context, cl *client.Client) (*clusterData, error) {
	st, err := cl.Status(ctx)
	if err != nil {
		return nil, err
	}
	d := &clusterData{Status: st}
	if d.Nodes, err = cl.Nodes(ctx); err != nil {
		d.NodesErr = apiError(err)
	}
	views := map[string]*client.ClusterStatus{st.NodeID: st}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, m := range st.Members {
		if m.NodeID == st.NodeID || m.GRPCAddr == "" || m.State != "alive" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := cl.StatusAt(sctx, m.GRPCAddr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				d.Unreached = append(d.Unreached, m.NodeID+": "+apiError(err))
				return
			}
			views[m.NodeID] = v
		}()
	}
	wg.Wait()
	sort.Strings(d.Unreached)
	lat := c.samples.latency()
	for _, s := range st.Shards {
		sv := shardView{ID: s.ID, Leader: s.LeaderID, LeaderAddr: s.LeaderAddr, Term: s.Term, Commit: s.CommitIndex, Applied: s.AppliedIndex}
		var leaderCommit uint64
		haveLeader := false
		if lv := views[s.LeaderID]; lv != nil {
			for _, ls := range lv.Shards {
				if ls.ID == s.ID {
					leaderCommit, haveLeader = ls.CommitIndex, true
					sv.Term = max(sv.Term, ls.Term)
				}
			}
		}
		reps := slices.Clone(s.Replicas)
		sort.Strings(reps)
		for _, rep := range reps {
			rv := replicaView{Node: rep, Leader: rep == s.LeaderID, Lag: "-", Snapshot: "-"}
			if v := views[rep]; v != nil {
				for _, x := range v.Shards {
					if x.ID == s.ID {
						rv.Commit, rv.Applied, rv.Reached = x.CommitIndex, x.AppliedIndex, true
						if x.LastSnapshotIndex > 0 {
							rv.Snapshot = fmt.Sprintf("%d (term %d)", x.LastSnapshotIndex, x.LastSnapshotTerm)
						}
					}
				}
				if haveLeader {
					if leaderCommit >= rv.Applied {
						rv.Lag = strconv.FormatUint(leaderCommit-rv.Applied, 10)
					} else {
						rv.Lag = "0" // asked after the leader: it applied more since
					}
				}
			}
			sv.Replicas = append(sv.Replicas, rv)
		}
		id := strconv.FormatUint(uint64(s.ID), 10)
		sv.Latency = lat[id]
		sv.LastMean, sv.LastP99 = "-", "-"
		if n := len(sv.Latency); n > 0 {
			l := sv.Latency[n-1]
			sv.LastMean, sv.LastP99, sv.LastCount = fmtSeconds(l.Mean), fmtSeconds(l.P99), l.Count
		}
		d.Shards = append(d.Shards, sv)
	}
	return d, nil
}

func (c *Console) clusterPage(ctx context.Context, _ *http.Request, cl *client.Client, v *view) int {
	v.Title, v.Poll = "Cluster", Prefix+"api/cluster"
	d, err := c.cluster(ctx, cl)
	if err != nil {
		v.Error = apiError(err)
		return httpStatus(err)
	}
	v.Data = d
	return http.StatusOK
}

// ---- queues ----

type queueRow struct {
	Info  client.QueueInfo
	Stats client.QueueStats
	Err   string
	Rates rates
}

type queuesData struct {
	Rows  []queueRow
	Total int
	Shown int
}

func (c *Console) queues(ctx context.Context, cl *client.Client) (*queuesData, error) {
	qs, err := cl.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].Name < qs[j].Name })
	d := &queuesData{Total: len(qs)}
	if len(qs) > MaxListed {
		qs = qs[:MaxListed]
	}
	d.Shown = len(qs)
	d.Rows = make([]queueRow, len(qs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8) // at most 8 QueueStats calls at once per caller
	for i, q := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			row := queueRow{Info: q}
			st, err := cl.Stats(ctx, q.Name)
			if err != nil {
				row.Err = apiError(err)
			} else {
				row.Stats = st
				row.Rates = c.samples.lastRates(q.Name)
			}
			d.Rows[i] = row
		}()
	}
	wg.Wait()
	return d, nil
}

func (c *Console) queuesPage(ctx context.Context, _ *http.Request, cl *client.Client, v *view) int {
	v.Title, v.Poll = "Queues", Prefix+"api/queues"
	d, err := c.queues(ctx, cl)
	if err != nil {
		v.Error = apiError(err)
		return httpStatus(err)
	}
	v.Data = d
	return http.StatusOK
}

type queueData struct {
	Info    client.QueueInfo
	Stats   client.QueueStats
	Rates   rates
	Sampled bool
	Window  string
	Every   string
}

func (c *Console) queuePage(ctx context.Context, r *http.Request, cl *client.Client, v *view) int {
	name := strings.TrimSpace(r.URL.Query().Get("name"))
	v.Title = "Queue"
	if name == "" {
		v.Error = "no queue named: /console/queue?name=QUEUE"
		return http.StatusBadRequest
	}
	v.Title = "Queue " + name
	q, err := cl.GetQueue(ctx, name)
	if err != nil {
		v.Error = apiError(err)
		return httpStatus(err)
	}
	st, err := cl.Stats(ctx, name)
	if err != nil {
		v.Error = apiError(err)
		return httpStatus(err)
	}
	v.Poll = Prefix + "api/queue?name=" + url.QueryEscape(name)
	v.Data = &queueData{Info: q, Stats: st, Rates: c.samples.lastRates(st.Name),
		Sampled: c.samples.queue(st.Name) != nil, Window: c.o.Window.String(), Every: c.o.SampleEvery.String()}
	return http.StatusOK
}

func (c *Console) pauseQueue(ctx context.Context, r *http.Request, dial func() (*client.Client, error)) (string, error) {
	name, err := required(r, "name")
	if err != nil {
		return "", err
	}
	cl, err := dial()
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(r.URL.Path, "/pause") {
		if _, err := cl.PauseQueue(ctx, name); err != nil {
			return "", err
		}
		return "paused " + name + ": receives return nothing until it is resumed", nil
	}
	if _, err := cl.ResumeQueue(ctx, name); err != nil {
		return "", err
	}
	return "resumed " + name, nil
}

// ---- dead letters ----

// dlqPageSize is how many dead messages one page lists.
const dlqPageSize = 50

type dlqData struct {
	Queue, Type, ErrorText, Page, Next string
	Messages                           []*client.MessageInfo
	Stats                              client.QueueStats
	Plan                               *client.RedrivePlan
	PlanTo                             string
	PlanIDs                            string
}

func deadFilter(typ, errText string) *client.DeadFilter {
	if typ == "" && errText == "" {
		return nil
	}
	return &client.DeadFilter{Type: typ, ErrorContains: errText}
}

func (c *Console) dlqPage(ctx context.Context, r *http.Request, cl *client.Client, v *view) int {
	q := r.URL.Query()
	d := &dlqData{Queue: strings.TrimSpace(q.Get("queue")), Type: strings.TrimSpace(q.Get("type")),
		ErrorText: q.Get("error"), Page: q.Get("page")}
	v.Title, v.Data = "Dead letters", d
	if d.Queue == "" {
		v.Error = "no queue named: /console/dlq?queue=QUEUE (or pick one on the queues page)"
		return http.StatusBadRequest
	}
	v.Title = "Dead letters of " + d.Queue
	return c.fillDLQ(ctx, cl, v, d)
}

func (c *Console) fillDLQ(ctx context.Context, cl *client.Client, v *view, d *dlqData) int {
	st, err := cl.Stats(ctx, d.Queue)
	if err != nil {
		v.Error = apiError(err)
		return httpStatus(err)
	}
	d.Stats = st
	ms, next, err := cl.ListDeadMatching(ctx, d.Queue, deadFilter(d.Type, d.ErrorText), dlqPageSize, d.Page)
	if err != nil {
		v.Error = apiError(err)
		return httpStatus(err)
	}
	d.Messages, d.Next = ms, next
	v.Poll = Prefix + "api/queue?name=" + url.QueryEscape(d.Queue)
	return http.StatusOK
}

// redrive is the DLQ page's redrive form: with dry_run it shows what would
// move (RedriveDryRun) and a button that redrives exactly that filter;
// without, it redrives and returns to the DLQ page with the count.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request) {
	se, ok := c.form(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), redriveTimeout)
	defer cancel()
	f := r.PostForm
	d := &dlqData{Queue: strings.TrimSpace(f.Get("queue")), Type: strings.TrimSpace(f.Get("type")), ErrorText: f.Get("error"),
		PlanTo: strings.TrimSpace(f.Get("to")), PlanIDs: strings.TrimSpace(f.Get("ids"))}
	opts, err := redriveOptions(d)
	var cl *client.Client
	if err == nil {
		cl, err = c.clientOf(ctx, se)
	}
	if err == nil && f.Get("dry_run") != "" {
		var plan client.RedrivePlan
		if plan, err = cl.RedriveDryRun(ctx, d.Queue, opts); err == nil {
			v := c.newView(se, "Redrive "+d.Queue+" (dry run)", "dlq")
			d.Plan = &plan
			v.Data = d
			code := c.fillDLQ(ctx, cl, v, d)
			c.render(w, code, "dlq", v)
			return
		}
	}
	var fl flash
	if err == nil {
		var n uint64
		if n, err = cl.Redrive(ctx, d.Queue, opts); err == nil {
			where := ""
			if d.PlanTo != "" {
				where = " to " + d.PlanTo
			}
			fl.Notice = fmt.Sprintf("redrove %d message(s)%s", n, where)
		}
	}
	if err != nil {
		fl.Error = apiError(err)
	}
	c.sessions.setFlash(se, fl)
	http.Redirect(w, r, Prefix+"dlq?"+url.Values{"queue": {d.Queue}, "type": {d.Type}, "error": {d.ErrorText}}.Encode(), http.StatusSeeOther)
}

// redriveOptions checks the redrive form as `raftq dlq redrive` checks its
// flags.
func redriveOptions(d *dlqData) (client.RedriveOptions, error) {
	if d.Queue == "" {
		return client.RedriveOptions{}, badInput("queue is required")
	}
	if d.PlanTo == d.Queue {
		return client.RedriveOptions{}, badInput("to %s is the queue itself: leave it empty to redrive in place", d.PlanTo)
	}
	o := client.RedriveOptions{Target: d.PlanTo, Filter: deadFilter(d.Type, d.ErrorText)}
	if d.PlanIDs != "" {
		o.IDs = splitIDs(d.PlanIDs)
		if o.Filter != nil {
			return client.RedriveOptions{}, badInput("give message ids or a filter, not both")
		}
	}
	return o, nil
}

// splitIDs reads message ids separated by commas or white space.
func splitIDs(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

func (c *Console) discard(ctx context.Context, r *http.Request, dial func() (*client.Client, error)) (string, error) {
	q, err := required(r, "queue")
	if err != nil {
		return "", err
	}
	ids := splitIDs(strings.Join(r.PostForm["ids"], ","))
	if len(ids) == 0 {
		return "", badInput("tick the dead messages of %s to discard", q)
	}
	cl, err := dial()
	if err != nil {
		return "", err
	}
	n, err := cl.Discard(ctx, q, ids...)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("discarded %d message(s)", n), nil
}

// ---- message ----

type messageData struct {
	ID  string
	Msg *client.MessageInfo
}

func (c *Console) messagePage(ctx context.Context, r *http.Request, cl *client.Client, v *view) int {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	d := &messageData{ID: id}
	v.Title, v.Data = "Message", d
	if id == "" {
		return http.StatusOK // the look-up form alone
	}
	m, err := cl.GetMessage(ctx, id)
	if err != nil {
		v.Error = apiError(err)
		return httpStatus(err)
	}
	d.Msg = m
	v.Title = "Message " + id
	return http.StatusOK
}

// ---- schedules ----

func (c *Console) schedulesPage(ctx context.Context, _ *http.Request, cl *client.Client, v *view) int {
	v.Title = "Schedules"
	ss, err := cl.ListSchedules(ctx)
	if err != nil {
		v.Error = apiError(err)
		return httpStatus(err)
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].Name < ss[j].Name })
	v.Data = ss
	return http.StatusOK
}

func (c *Console) scheduleAction(ctx context.Context, r *http.Request, dial func() (*client.Client, error)) (string, error) {
	name, err := required(r, "name")
	if err != nil {
		return "", err
	}
	a := r.PostForm.Get("do")
	if a != "pause" && a != "resume" && a != "trigger" {
		return "", badInput("unknown schedule action %q: want pause, resume or trigger", a)
	}
	cl, err := dial()
	if err != nil {
		return "", err
	}
	switch a {
	case "pause":
		_, err = cl.PauseSchedule(ctx, name)
		return "paused schedule " + name, err
	case "resume":
		_, err = cl.ResumeSchedule(ctx, name)
		return "resumed schedule " + name, err
	default: // trigger
		_, err = cl.TriggerSchedule(ctx, name)
		return "triggered schedule " + name + ": it fires once now", err
	}
}
