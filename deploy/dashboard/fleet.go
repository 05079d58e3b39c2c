package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// FleetOptions turn on the fleet pages (under /fleet): the first cluster
// is then the fleet's management cluster, whose fleet.ferry.dev objects
// they show and change as the dashboard's user.
type FleetOptions struct {
	// Namespace holds the fleet's objects; centre.DefaultNamespace
	// (ferry-fleet) if empty.
	Namespace string
	// Registry is the centre's registry (host[:port]): what a promotion
	// resolves a tag in, where receipts are kept and bundles are made
	// from.
	Registry string
	// Remote says how to reach Registry.
	Remote artifact.RemoteOptions
	// Spool holds carry bundles while they are written and sent (each
	// removed once sent) and, as the centre's Spool, the packages they
	// are made from (a cache); the system's temporary folder if empty.
	Spool string
}

// fleetActions are the centre's verbs the fleet pages call, each with a
// client acting as the dashboard's user (centre.Centre has them; tests
// fake them where a registry is not worth its set-up).
type fleetActions interface {
	// Import reads a carried member's signed report.
	Import(ctx context.Context, data []byte) (*fleetv1.Member, error)
	// Bundle writes a carried member's carry bundle of package pkg to out.
	Bundle(ctx context.Context, member, pkg, out string) (*centre.BundleResult, error)
	// Promote puts ref (a digest or a tag) on a track's channel.
	Promote(ctx context.Context, track, channel, ref, by string) (*fleetv1.ReleaseTrack, error)
	// Rollback pins a placement's previous version.
	Rollback(ctx context.Context, placement, by string) (*fleetv1.Placement, error)
	// Desired is what a member should run now: what a connected
	// member's sync is answered, what a carried member's bundle carries.
	Desired(ctx context.Context, member string) (*wire.Desired, error)
}

// fleetScheme reads core and fleet.ferry.dev/v1alpha1 objects.
var fleetScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	_ = fleetv1.AddToScheme(s)
	return s
}()

// newFleetClient is a client of the management cluster as cfg's user.
func newFleetClient(cfg *rest.Config) (client.WithWatch, error) {
	return client.NewWithWatch(cfg, client.Options{Scheme: fleetScheme})
}

// fleetNamespace is where the fleet's objects are.
func (s *Server) fleetNamespace() string {
	if s.opts.Fleet == nil || s.opts.Fleet.Namespace == "" {
		return centre.DefaultNamespace
	}
	return s.opts.Fleet.Namespace
}

// fleetActor is the request's actor in the management cluster, with its
// fleet client and actions; if there is none, the request has been
// answered.
func (s *Server) fleetActor(w http.ResponseWriter, r *http.Request) (*actor, bool) {
	a, err := s.actor(r, s.opts.Clusters[0])
	if err == nil {
		err = a.fleet(s)
	}
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	return a, true
}

// fleet makes the actor's fleet client and actions on first use.
func (a *actor) fleet(s *Server) error {
	a.fleetMu.Lock()
	defer a.fleetMu.Unlock()
	if a.fc != nil {
		return nil
	}
	fc, err := s.fleetClient(a.cfg)
	if err != nil {
		return fmt.Errorf("a client of the management cluster: %w", err)
	}
	a.fc, a.acts = fc, s.fleetActions(fc)
	return nil
}

// may asks the API server whether the request's user may verb the
// fleet's resource (its subresource, if any; of name, or of any name for
// ""), as `kubectl auth can-i` asks: a SelfSubjectAccessReview in the
// fleet's namespace. Not allowed is an error saying so, answered 403.
// The carry verbs ask it before they act: they use the dashboard's own
// credentials to the centre's registry, where the API server would only
// have refused the user's write afterwards, or never.
func (s *Server) may(r *http.Request, a *actor, verb, resource, subresource, name string) error {
	ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: s.fleetNamespace(), Verb: verb,
			Group: fleetv1.GroupVersion.Group, Resource: resource, Subresource: subresource, Name: name}}}
	res, err := a.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(r.Context(), ssar, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("ask the API server what %s may do: %w", s.by(r, a), err)
	}
	if res.Status.Allowed {
		return nil
	}
	what := resource
	if subresource != "" {
		what += "/" + subresource
	}
	if name != "" {
		what += " of " + strings.TrimSuffix(resource, "s") + " " + name
	}
	return &forbidden{msg: fmt.Sprintf("%s may not %s %s in namespace %s", s.by(r, a), verb, what, s.fleetNamespace())}
}

// forbidden is a verb the user may not use (403).
type forbidden struct{ msg string }

func (f *forbidden) Error() string { return f.msg }

// by is who the request's user is, as a rollout's history records it:
// the session's user with a login, else the kubeconfig's user as the API
// server names it (a SelfSubjectReview, asked once).
func (s *Server) by(r *http.Request, a *actor) string {
	if u := sessionOf(r).user; u != "" {
		return u
	}
	a.fleetMu.Lock()
	who := a.who
	a.fleetMu.Unlock()
	if who != "" {
		return who
	}
	who = "kubeconfig"
	ssr, err := a.cs.AuthenticationV1().SelfSubjectReviews().Create(r.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err == nil && ssr.Status.UserInfo.Username != "" {
		who = ssr.Status.UserInfo.Username
	}
	a.fleetMu.Lock()
	a.who = who
	a.fleetMu.Unlock()
	return who
}

// The states of a member's package, as the pages say them.
const (
	stateReady    = "Ready"
	stateUpdating = "Updating"
	stateNotReady = "NotReady"
	stateRefused  = "Refused"
)

// packageState says where a member's package stands: refused, not Ready,
// Ready at an older digest than the centre asks for (updating), or Ready.
func packageState(p fleetv1.MemberPackage) string {
	switch {
	case p.Refused:
		return stateRefused
	case !p.Ready:
		return stateNotReady
	case p.Target != "" && p.Digest != p.Target:
		return stateUpdating
	}
	return stateReady
}

// memberRow is one Member as the pages show it.
type memberRow struct {
	Name     string
	Labels   []string
	Mode     string
	LastSeen string
	Seen     string // RFC 3339, for the title
	Ready    string
	Stale    bool
	Revoked  bool
	Agent    string
	Packages []memberPackageRow
}

type memberPackageRow struct {
	Name, Version, Short, State, Message string
}

func newMemberRow(m *fleetv1.Member) memberRow {
	row := memberRow{Name: m.Name, Mode: m.Spec.Mode, Revoked: m.Spec.Revoked, Agent: m.Status.Agent, Ready: "Unknown", LastSeen: "never"}
	if row.Mode == "" {
		row.Mode = fleetv1.Connected
	}
	for k, v := range m.Labels {
		row.Labels = append(row.Labels, k+"="+v)
	}
	slices.Sort(row.Labels)
	if t := m.Status.LastSeen; t != nil {
		row.LastSeen, row.Seen = age(t.Time)+" ago", t.UTC().Format("2006-01-02T15:04:05Z")
	}
	if c := meta.FindStatusCondition(m.Status.Conditions, fleetv1.MemberReady); c != nil {
		row.Ready = string(c.Status)
	}
	row.Stale = meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1.MemberStale)
	for _, p := range m.Status.Packages {
		msg := p.Message
		if p.Reason != "" {
			msg = p.Reason + ": " + msg
		}
		row.Packages = append(row.Packages, memberPackageRow{Name: p.Name, Version: p.Version, Short: shortDigest(p.Digest), State: packageState(p), Message: msg})
	}
	return row
}

// fleetCounts are the members page's totals.
type fleetCounts struct {
	Members, Connected, Carried, Ready, NotReady, Stale, Revoked int
}

func (c *fleetCounts) add(row *memberRow) {
	c.Members++
	if row.Mode == fleetv1.Carried {
		c.Carried++
	} else {
		c.Connected++
	}
	switch row.Ready {
	case "True":
		c.Ready++
	default:
		c.NotReady++
	}
	if row.Stale {
		c.Stale++
	}
	if row.Revoked {
		c.Revoked++
	}
}

type fleetView struct {
	view
	Namespace string
	Selector  string
	Counts    fleetCounts
	Members   []memberRow
	Error     string
	Notice    string
}

// From is empty: the import form comes back to the members page.
func (v *fleetView) From() string { return "" }

// fleetPage lists the members, those a label selector selects if one is
// given, with their totals.
func (s *Server) fleetPage(w http.ResponseWriter, r *http.Request) {
	s.fleetPageWith(w, r, http.StatusOK, "")
}

// fleetPageWith renders the members page with status and an error line.
func (s *Server) fleetPageWith(w http.ResponseWriter, r *http.Request, status int, errLine string) {
	v := &fleetView{view: s.view(r, "Fleet"), Namespace: s.fleetNamespace(), Selector: strings.TrimSpace(r.URL.Query().Get("selector")), Error: errLine}
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	v.Notice = s.takeFlash(r)
	members, st, err := s.listMembers(r.Context(), a, v.Selector)
	if err != nil {
		v.Error = strings.TrimPrefix(v.Error+"; ", "; ") + err.Error()
		status = max(status, st)
	}
	v.Members = make([]memberRow, 0, len(members))
	for i := range members {
		v.Members = append(v.Members, newMemberRow(&members[i]))
		v.Counts.add(&v.Members[len(v.Members)-1])
	}
	s.renderStatus(w, r, status, "fleet", v)
}

// listMembers are the members selector selects, by name, or one line of
// why not and its status.
func (s *Server) listMembers(ctx context.Context, a *actor, selector string) ([]fleetv1.Member, int, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("label selector %.64q: %.200s", selector, oneLine(err.Error()))
	}
	var list fleetv1.MemberList
	if err := a.fc.List(ctx, &list, client.InNamespace(s.fleetNamespace()), client.MatchingLabelsSelector{Selector: sel}, fromWatchCache()); err != nil {
		return nil, statusOf(err), s.fleetError("list the members", err)
	}
	slices.SortFunc(list.Items, func(x, y fleetv1.Member) int { return strings.Compare(x.Name, y.Name) })
	return list.Items, 0, nil
}

// fromWatchCache lets the API server answer a list from its watch cache
// (resourceVersion "0": as fresh as its watch), as informers' first lists
// do, rather than by a quorum read of etcd, which costs it several times
// more for the fleet's thousand Members (docs/performance.md); what a
// member reports is no fresher than its last heartbeat anyway. A page of
// one object, read right after an action changed it, reads it
// consistently.
func fromWatchCache() client.ListOption {
	return &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}
}

// fleetError is one line of what failed; a fleet API the management
// cluster lacks is said so.
func (s *Server) fleetError(what string, err error) error {
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) && strings.Contains(err.Error(), "the server could not find the requested resource") {
		return fmt.Errorf("%s: the cluster %s has no fleet API (fleet.ferry.dev/v1alpha1): is it the fleet's management cluster (ferry fleet serve)?", what, s.opts.Clusters[0].Name)
	}
	return fmt.Errorf("%s in namespace %s: %s", what, s.fleetNamespace(), oneLine(err.Error()))
}

// statusOf is the HTTP status an error answers with: the API server's
// (403 stays 403), else 502.
func statusOf(err error) int {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Code != 0 {
		return int(se.Status().Code)
	}
	if meta.IsNoMatchError(err) {
		return http.StatusNotFound
	}
	return http.StatusBadGateway
}

// matrixColumn is one package of the matrix: its track and channels.
type matrixColumn struct {
	Package  string
	Track    string
	Channels []string
}

type matrixCell struct {
	Version, Short, State, Message string
}

type matrixRow struct {
	Member *memberRow
	Cells  []*matrixCell
}

type matrixView struct {
	view
	Selector string
	Columns  []matrixColumn
	Rows     []matrixRow
	Error    string
}

// matrixPage is packages × members: each member's version and state of
// each package, the tracks' packages first, then those deployed by hand.
func (s *Server) matrixPage(w http.ResponseWriter, r *http.Request) {
	v := &matrixView{view: s.view(r, "Fleet matrix"), Selector: strings.TrimSpace(r.URL.Query().Get("selector"))}
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	members, status, err := s.listMembers(ctx, a, v.Selector)
	if err != nil {
		v.Error = err.Error()
		s.renderStatus(w, r, status, "matrix", v)
		return
	}
	var tracks fleetv1.ReleaseTrackList
	if err := a.fc.List(ctx, &tracks, client.InNamespace(s.fleetNamespace()), fromWatchCache()); err != nil {
		v.Error = s.fleetError("list the tracks", err).Error() // the members' own packages are still shown
	}
	slices.SortFunc(tracks.Items, func(x, y fleetv1.ReleaseTrack) int { return strings.Compare(x.Name, y.Name) })
	col := map[string]int{}
	for i := range tracks.Items {
		t := &tracks.Items[i]
		pkg := t.PackageName()
		if _, ok := col[pkg]; ok {
			continue
		}
		c := matrixColumn{Package: pkg, Track: t.Name}
		for _, ch := range t.Spec.Channels {
			c.Channels = append(c.Channels, ch.Name+" "+firstOf(ch.Version, shortDigest(ch.Digest)))
		}
		col[pkg] = len(v.Columns)
		v.Columns = append(v.Columns, c)
	}
	var byHand []string
	for _, m := range members {
		for _, p := range m.Status.Packages {
			if _, ok := col[p.Name]; !ok && !slices.Contains(byHand, p.Name) {
				byHand = append(byHand, p.Name)
			}
		}
	}
	slices.Sort(byHand)
	for _, name := range byHand {
		col[name] = len(v.Columns)
		v.Columns = append(v.Columns, matrixColumn{Package: name})
	}
	rows := make([]memberRow, len(members))
	for i := range members {
		rows[i] = newMemberRow(&members[i])
		row := matrixRow{Member: &rows[i], Cells: make([]*matrixCell, len(v.Columns))}
		for _, p := range members[i].Status.Packages {
			c := &matrixCell{Version: p.Version, Short: shortDigest(p.Digest), State: packageState(p), Message: p.Message}
			if c.Version == "" {
				c.Version = c.Short
			}
			row.Cells[col[p.Name]] = c
		}
		v.Rows = append(v.Rows, row)
	}
	s.render(w, r, "matrix", v)
}

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// flash keeps a line for the session's next page (after a redirect).
type flash struct {
	mu    sync.Mutex
	lines map[string]string // by session id
}

// setFlash keeps msg for the request's session's next page.
func (s *Server) setFlash(r *http.Request, msg string) {
	s.flashes.mu.Lock()
	defer s.flashes.mu.Unlock()
	if s.flashes.lines == nil {
		s.flashes.lines = map[string]string{}
	}
	if len(s.flashes.lines) > 10000 { // sessions that never came back
		clear(s.flashes.lines)
	}
	s.flashes.lines[sessionOf(r).id] = oneLine(msg)
}

// takeFlash is the line kept for the request's session, once.
func (s *Server) takeFlash(r *http.Request) string {
	s.flashes.mu.Lock()
	defer s.flashes.mu.Unlock()
	id := sessionOf(r).id
	msg := s.flashes.lines[id]
	delete(s.flashes.lines, id)
	return msg
}
