package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
)

// versions names digests by the versions the fleet's objects record for
// them (channels, promotions, rollouts), for the pages to show.
type versions map[string]string

func (vs versions) add(digest, version string) {
	if digest != "" && version != "" && vs[digest] == "" {
		vs[digest] = version
	}
}

func (vs versions) addTrack(t *fleetv1.ReleaseTrack) {
	for _, c := range t.Spec.Channels {
		vs.add(c.Digest, c.Version)
	}
	for _, p := range t.Status.Promotions {
		vs.add(p.Digest, p.Version)
	}
}

// name is "1.2.0 (abcdef012345)", or the short digest alone.
func (vs versions) name(digest string) string {
	if digest == "" {
		return ""
	}
	if v := vs[digest]; v != "" {
		return v + " (" + shortDigest(digest) + ")"
	}
	return shortDigest(digest)
}

// placementRow is one Placement as the list shows it.
type placementRow struct {
	Name, Track, Follows, Version, Phase, Message string
	Wave, Members                                 int
}

type placementsView struct {
	view
	Placements []placementRow
	Tracks     []trackRow
	Error      string
}

type trackRow struct {
	Name, Repository, Package string
	Channels                  []string
}

// rolloutsPage lists the placements and the tracks.
func (s *Server) rolloutsPage(w http.ResponseWriter, r *http.Request) {
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	v := &placementsView{view: s.view(r, "Rollouts")}
	var errs []string
	var pl fleetv1.PlacementList
	if err := a.fc.List(ctx, &pl, client.InNamespace(s.fleetNamespace())); err != nil {
		errs = append(errs, s.fleetError("list the placements", err).Error())
	}
	var tl fleetv1.ReleaseTrackList
	if err := a.fc.List(ctx, &tl, client.InNamespace(s.fleetNamespace())); err != nil {
		errs = append(errs, s.fleetError("list the tracks", err).Error())
	}
	v.Error = strings.Join(errs, "; ")
	slices.SortFunc(pl.Items, func(x, y fleetv1.Placement) int { return strings.Compare(x.Name, y.Name) })
	slices.SortFunc(tl.Items, func(x, y fleetv1.ReleaseTrack) int { return strings.Compare(x.Name, y.Name) })
	for _, p := range pl.Items {
		row := placementRow{Name: p.Name, Track: p.Spec.Track, Follows: "channel " + p.Spec.Channel, Version: firstOf(p.Status.Version, shortDigest(p.Status.Digest)),
			Phase: p.Status.Phase, Message: p.Status.Message, Wave: p.Status.Wave, Members: len(p.Status.Members)}
		if p.Spec.Digest != "" {
			row.Follows = "pinned " + shortDigest(p.Spec.Digest)
		}
		v.Placements = append(v.Placements, row)
	}
	for i := range tl.Items {
		t := &tl.Items[i]
		row := trackRow{Name: t.Name, Repository: t.Spec.Repository, Package: t.PackageName()}
		for _, c := range t.Spec.Channels {
			row.Channels = append(row.Channels, c.Name+" "+firstOf(c.Version, shortDigest(c.Digest)))
		}
		v.Tracks = append(v.Tracks, row)
	}
	s.render(w, r, "rollouts", v)
}

// placementView is a placement's rollout in progress and its history.
type placementView struct {
	view
	Name, Track, Follows      string
	Target, Current, Previous string
	RollbackTo                string
	Phase, Message            string
	Wave                      int
	Members                   []placedRow
	History                   []historyRow
	Notice, Error             string
}

type placedRow struct {
	Name, Target, State, Since, Message string
	Wave                                int
}

type historyRow struct {
	Action, From, To, By, Started, Finished, Result, Message string
	Members                                                  []string
}

func (s *Server) placementPage(w http.ResponseWriter, r *http.Request) {
	s.placementView(w, r, http.StatusOK, s.takeFlash(r), "")
}

// placementView renders the request's {name} placement, with a notice or
// an error line.
func (s *Server) placementView(w http.ResponseWriter, r *http.Request, status int, notice, errLine string) {
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	name := r.PathValue("name")
	v := &placementView{view: s.view(r, "Placement "+name), Name: name, Notice: notice, Error: errLine}
	var p fleetv1.Placement
	if err := a.fc.Get(ctx, client.ObjectKey{Namespace: s.fleetNamespace(), Name: name}, &p); err != nil {
		v.Error = strings.TrimPrefix(v.Error+"; ", "; ") + s.fleetError("placement "+name, err).Error()
		s.renderStatus(w, r, max(status, statusOf(err)), "placement", v)
		return
	}
	vs := versions{}
	vs.add(p.Status.Digest, p.Status.Version)
	for _, h := range p.Status.History {
		vs.add(h.To, h.Version)
	}
	var t fleetv1.ReleaseTrack
	if err := a.fc.Get(ctx, client.ObjectKey{Namespace: s.fleetNamespace(), Name: p.Spec.Track}, &t); err == nil {
		vs.addTrack(&t)
	}
	v.Track, v.Follows = p.Spec.Track, "channel "+p.Spec.Channel
	if p.Spec.Digest != "" {
		v.Follows = "pinned to " + vs.name(p.Spec.Digest)
	}
	v.Target, v.Current, v.Previous = vs.name(p.Status.Digest), vs.name(p.Status.Current), vs.name(p.Status.Previous)
	// The centre rolls back to what every member last ran Ready while a
	// rollout is under way or halted, else to the version before it.
	v.RollbackTo = v.Previous
	if p.Status.Current != "" && p.Status.Digest != p.Status.Current {
		v.RollbackTo = v.Current
	}
	v.Phase, v.Wave, v.Message = p.Status.Phase, p.Status.Wave, p.Status.Message
	for _, m := range p.Status.Members {
		row := placedRow{Name: m.Name, Target: vs.name(m.Target), State: m.State, Message: m.Message, Wave: m.Wave}
		if m.Since != nil {
			row.Since = age(m.Since.Time) + " ago"
		}
		v.Members = append(v.Members, row)
	}
	for _, h := range p.Status.History {
		row := historyRow{Action: h.Action, From: vs.name(h.From), To: vs.name(h.To), By: h.By, Started: when(&h.Started), Finished: when(h.Finished),
			Result: h.Result, Message: h.Message, Members: h.Members}
		v.History = append(v.History, row)
	}
	s.renderStatus(w, r, status, "placement", v)
}

// when is t as the history tables show it.
func when(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z") + " (" + age(t.Time) + " ago)"
}

// rollback asks the centre to pin the placement's previous version, as
// the session's user.
func (s *Server) rollback(w http.ResponseWriter, r *http.Request) {
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	by := s.by(r, a)
	p, err := a.acts.Rollback(r.Context(), name, by)
	if err != nil {
		s.log.Warn("dashboard fleet rollback refused", "placement", name, "user", by, "error", err)
		s.placementView(w, r, actionStatus(err), "", "rollback: "+oneLine(err.Error()))
		return
	}
	s.log.Info("dashboard fleet rollback", "placement", name, "user", by, "digest", p.Spec.Digest)
	s.setFlash(r, fmt.Sprintf("rollback asked by %s: placement %s is pinned to %s, which goes to every member at once", by, name, shortDigest(p.Spec.Digest)))
	http.Redirect(w, r, "/fleet/placements/"+url.PathEscape(name), http.StatusSeeOther)
}

// trackView is a track's channels, its promotions and its promote form.
type trackView struct {
	view
	Name, Repository, Package string
	Channels                  []fleetv1.Channel
	Promotions                []promotionRow
	Placements                []string
	Channel, Ref              string // the form's, kept after an error
	Notice, Error             string
}

type promotionRow struct {
	Channel, Version, Digest, By, At string
}

func (s *Server) trackPage(w http.ResponseWriter, r *http.Request) {
	s.trackView(w, r, http.StatusOK, &trackView{Notice: s.takeFlash(r)})
}

func (s *Server) trackView(w http.ResponseWriter, r *http.Request, status int, v *trackView) {
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	v.Name = r.PathValue("name")
	v.view = s.view(r, "Track "+v.Name)
	var t fleetv1.ReleaseTrack
	if err := a.fc.Get(ctx, client.ObjectKey{Namespace: s.fleetNamespace(), Name: v.Name}, &t); err != nil {
		v.Error = strings.TrimPrefix(v.Error+"; ", "; ") + s.fleetError("track "+v.Name, err).Error()
		s.renderStatus(w, r, max(status, statusOf(err)), "track", v)
		return
	}
	v.Repository, v.Package, v.Channels = t.Spec.Repository, t.PackageName(), t.Spec.Channels
	for _, p := range t.Status.Promotions {
		v.Promotions = append(v.Promotions, promotionRow{Channel: p.Channel, Version: p.Version, Digest: p.Digest, By: p.By, At: when(&p.At)})
	}
	var pl fleetv1.PlacementList
	if err := a.fc.List(ctx, &pl, client.InNamespace(s.fleetNamespace())); err == nil {
		for _, p := range pl.Items {
			if p.Spec.Track == v.Name {
				v.Placements = append(v.Placements, p.Name)
			}
		}
		slices.Sort(v.Placements)
	}
	s.renderStatus(w, r, status, "track", v)
}

// channelName is a channel's name as the ReleaseTrack's schema has it.
var channelName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// promote asks the centre to put a version (a digest, or a tag of the
// track's repository) on a channel, as the session's user.
func (s *Server) promote(w http.ResponseWriter, r *http.Request) {
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	v := &trackView{Channel: strings.TrimSpace(r.PostFormValue("channel")), Ref: strings.TrimSpace(r.PostFormValue("ref"))}
	switch {
	case !channelName.MatchString(v.Channel) || len(v.Channel) > 63:
		v.Error = fmt.Sprintf("promote: channel %.64q is not a channel's name (lower-case letters, digits and -, at most 63)", v.Channel)
	case v.Ref == "" || len(v.Ref) > 200 || strings.ContainsAny(v.Ref, " /"):
		v.Error = "promote: name the version by its digest (sha256:…) or a tag of the track's repository"
	}
	if v.Error != "" {
		s.trackView(w, r, http.StatusBadRequest, v)
		return
	}
	// The tag is resolved in the centre's registry with the dashboard's
	// credentials: only for a user who may update the track.
	if err := s.may(r, a, "update", "releasetracks", "", name); err != nil {
		v.Error = "promote: " + oneLine(err.Error())
		s.trackView(w, r, actionStatus(err), v)
		return
	}
	by := s.by(r, a)
	t, err := a.acts.Promote(r.Context(), name, v.Channel, v.Ref, by)
	if err != nil {
		s.log.Warn("dashboard fleet promote refused", "track", name, "channel", v.Channel, "ref", v.Ref, "user", by, "error", err)
		v.Error = "promote: " + oneLine(err.Error())
		s.trackView(w, r, actionStatus(err), v)
		return
	}
	got := v.Ref
	for _, c := range t.Spec.Channels {
		if c.Name == v.Channel {
			got = firstOf(c.Version, shortDigest(c.Digest)) + " (" + shortDigest(c.Digest) + ")"
		}
	}
	s.log.Info("dashboard fleet promote", "track", name, "channel", v.Channel, "ref", v.Ref, "user", by)
	s.setFlash(r, fmt.Sprintf("promoted by %s: channel %s of %s is %s; the placements following it roll it out", by, v.Channel, name, got))
	http.Redirect(w, r, "/fleet/tracks/"+url.PathEscape(name), http.StatusSeeOther)
}
