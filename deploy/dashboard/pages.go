package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// view is what every page shows: the title, who the dashboard acts as,
// the clusters, and the session's CSRF token for its forms.
type view struct {
	Title    string
	CSRF     string
	User     string
	Login    bool
	Clusters []string
	Cluster  string
	Fleet    bool
}

func (s *Server) view(r *http.Request, title string) view {
	sess := sessionOf(r)
	v := view{Title: title, CSRF: s.csrfToken(sess), Login: s.opts.Login, Cluster: r.PathValue("cluster"), Fleet: s.opts.Fleet != nil}
	for _, c := range s.opts.Clusters {
		v.Clusters = append(v.Clusters, c.Name)
	}
	if v.Cluster == "" {
		v.Cluster = v.Clusters[0]
	}
	switch {
	case sess.user != "":
		v.User = sess.user
	case !s.opts.Login:
		v.User = "your kubeconfig"
	}
	return v
}

type errorView struct {
	view
	Status  int
	Message string
}

type loginView struct {
	view
	Error string
}

// render executes page into a buffer first: a template that fails leaves
// no half-written page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, page string, data any) {
	s.renderStatus(w, r, http.StatusOK, page, data)
}

// renderStatus renders page with status.
func (s *Server) renderStatus(w http.ResponseWriter, r *http.Request, status int, page string, data any) {
	var buf bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		s.fail(w, r, fmt.Errorf("render %s: %w", page, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// fail answers with the one line of err, its status from the API server's
// when it is one (403 stays 403).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusBadGateway
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Code != 0 {
		status = int(se.Status().Code)
	}
	s.refuse(w, r, status, err.Error())
}

// packageRow is one Package as the pages show it.
type packageRow struct {
	Cluster, Namespace, Name string
	Version, Digest, Short   string
	Ready, Reason, Message   string
	SignedBy, Keys           []string
	Components               []string
	Releases                 []v1alpha1.ReleaseStatus
	Images                   []imageRef
	ImagePolicies            []v1alpha1.ImagePolicyStatus
	LastError                string
	Age                      string
	Deleting                 bool
}

type imageRef struct {
	Path, Digest string
}

func newRow(cluster string, p *v1alpha1.Package) packageRow {
	row := packageRow{
		Cluster: cluster, Namespace: p.Namespace, Name: p.Name, Version: p.Status.Version,
		Digest: p.Status.Digest, SignedBy: p.Status.SignedBy, Components: p.Spec.Components,
		Releases: p.Status.Releases, ImagePolicies: p.Status.ImagePolicies, LastError: p.Status.LastError, Age: age(p.CreationTimestamp.Time),
		Deleting: p.DeletionTimestamp != nil, Ready: "Unknown",
	}
	if row.Digest == "" {
		row.Digest = p.Spec.Digest
	}
	row.Short = shortDigest(row.Digest)
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.Ready); c != nil {
		row.Ready, row.Reason, row.Message = string(c.Status), c.Reason, c.Message
	}
	for _, k := range p.Spec.Keys {
		kind := k.Kind
		if kind == "" {
			kind = "Secret"
		}
		row.Keys = append(row.Keys, kind+"/"+k.Name)
	}
	for _, img := range p.Status.Images {
		path, dg, _ := strings.Cut(img, "@")
		row.Images = append(row.Images, imageRef{Path: path, Digest: dg})
	}
	return row
}

// clusterPackages are one cluster's Packages, or why they could not be
// read.
type clusterPackages struct {
	Cluster  string
	Scope    string
	Packages []packageRow
	Error    string
}

type packagesView struct {
	view
	Sections []clusterPackages
}

// packagesPage lists every cluster's Packages: in every namespace when
// the user may list them there, else in ferry's.
func (s *Server) packagesPage(w http.ResponseWriter, r *http.Request) {
	v := &packagesView{view: s.view(r, "Packages")}
	for _, c := range s.opts.Clusters {
		sec := clusterPackages{Cluster: c.Name, Scope: "all namespaces"}
		list, err := s.listPackages(r, c)
		if apierrors.IsForbidden(err) {
			sec.Scope = "namespace " + s.opts.Namespace
			list, err = s.listPackages(r, c, client.InNamespace(s.opts.Namespace))
		}
		switch {
		case meta.IsNoMatchError(err):
			sec.Error = deploy.ErrNoPackageAPI.Error()
		case err != nil:
			sec.Error = oneLine(err.Error())
		}
		for i := range list {
			sec.Packages = append(sec.Packages, newRow(c.Name, &list[i]))
		}
		v.Sections = append(v.Sections, sec)
	}
	s.render(w, r, "packages", v)
}

func (s *Server) listPackages(r *http.Request, c Cluster, opts ...client.ListOption) ([]v1alpha1.Package, error) {
	a, err := s.actor(r, c)
	if err != nil {
		return nil, err
	}
	var list v1alpha1.PackageList
	if err := a.pc.List(r.Context(), &list, opts...); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(x, y v1alpha1.Package) int {
		return strings.Compare(x.Namespace+"/"+x.Name, y.Namespace+"/"+y.Name)
	})
	return list.Items, nil
}

// packageView is one Package: its graph, what it installed and how that
// is, its conditions and events, its releases' history.
type packageView struct {
	view
	Pkg        packageRow
	Conditions []metav1.Condition
	Graph      *node
	GraphError string
	SBOMs      []sbomLink
	Releases   []releaseView
	Objects    []objectView
	Events     []eventView
	EventError string
}

// node is one vertex of a package's graph.
type node struct {
	Kind, Label, Digest string
	Link                string
	Size                int64
	Children            []*node
}

type releaseView struct {
	v1alpha1.ReleaseStatus
	Status  string
	History []revisionView
	Error   string
}

type revisionView struct {
	Revision, Chart, Status, Updated string
}

type objectView struct {
	v1alpha1.ObjectStatus
	State string
	OK    bool
}

type eventView struct {
	Type, Reason, Message, Last string
	Count                       int32
}

func (s *Server) packagePage(w http.ResponseWriter, r *http.Request) {
	a, ok := s.clusterActor(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	var p v1alpha1.Package
	if err := a.pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		s.fail(w, r, fmt.Errorf("Package %s/%s: %w", ns, name, err))
		return
	}
	v := &packageView{view: s.view(r, "Package "+name), Pkg: newRow(a.cluster, &p), Conditions: p.Status.Conditions}
	var err error
	v.Graph, v.SBOMs, err = s.graph(ctx, a, &p)
	if err != nil {
		v.GraphError = oneLine(err.Error())
	}
	for _, rel := range p.Status.Releases {
		v.Releases = append(v.Releases, releaseHistory(ctx, a, rel))
	}
	for _, o := range p.Status.Objects {
		v.Objects = append(v.Objects, objectState(ctx, a, o))
	}
	v.Events, err = events(ctx, a, &p)
	if err != nil {
		v.EventError = oneLine(err.Error())
	}
	s.render(w, r, "package", v)
}

// graph reads the package's graph from the in-cluster registry (its
// manifests and ferry.json, not its layers): root → package manifest →
// components → images, charts, manifests, files; and its signatures.
func (s *Server) graph(ctx context.Context, a *actor, p *v1alpha1.Package) (*node, []sbomLink, error) {
	dg := packageDigest(p)
	if dg == "" {
		return nil, nil, errors.New("no digest resolved yet")
	}
	reg, _, err := a.registry(ctx, s.opts.Namespace)
	if err != nil {
		return nil, nil, fmt.Errorf("the in-cluster registry: %w", err)
	}
	repo, err := reg.Repository(ctx, p.Spec.Repository)
	if err != nil {
		return nil, nil, err
	}
	rep, err := artifact.Inspect(ctx, repo, dg, nil)
	if err != nil {
		return nil, nil, err
	}
	var sboms []sbomLink
	base := "/c/" + url.PathEscape(a.cluster) + "/packages/" + url.PathEscape(p.Namespace) + "/" + url.PathEscape(p.Name)
	root := &node{Kind: "package", Label: rep.Name + " " + rep.Version, Digest: rep.Root.String(), Size: rep.StoredSize}
	cfg := &node{Kind: "ferry.json", Label: "package manifest: " + strings.Join(rep.Platforms, ", ")}
	root.Children = append(root.Children, cfg)
	for _, comp := range rep.Components {
		cn := &node{Kind: "component", Label: comp.Name}
		if comp.Required {
			cn.Label += " (required)"
		}
		for _, img := range comp.Images {
			in := &node{Kind: "image", Label: img.Ref, Digest: img.Digest.String(), Size: img.Size}
			for _, sb := range img.SBOMs {
				l := sbomLink{Image: img.Ref, Platform: sb.Platform, Format: sb.ArtifactType, Digest: sb.Digest.String(), Link: base + "/sboms/" + sb.Digest.String()}
				sboms = append(sboms, l)
				in.Children = append(in.Children, &node{Kind: "sbom", Label: sb.Platform + " " + sb.ArtifactType, Digest: l.Digest, Size: sb.Size, Link: l.Link})
			}
			cn.Children = append(cn.Children, in)
		}
		for _, ch := range comp.Charts {
			cn.Children = append(cn.Children, &node{Kind: "chart", Label: ch.Name + " " + ch.Version, Digest: ch.Digest.String(), Size: ch.Size})
		}
		for _, m := range comp.Manifests {
			cn.Children = append(cn.Children, &node{Kind: "manifests", Label: m.Name + ": " + strings.Join(m.Files, ", "), Digest: m.Digest.String(), Size: m.Size})
		}
		for _, f := range comp.Files {
			cn.Children = append(cn.Children, &node{Kind: "file", Label: f.Target, Digest: f.Digest.String(), Size: f.Size})
		}
		for _, g := range comp.Repositories {
			cn.Children = append(cn.Children, &node{Kind: "git", Label: g.URL + " at " + g.Revision, Digest: g.Digest.String(), Size: g.Size})
		}
		cfg.Children = append(cfg.Children, cn)
	}
	// Signatures: at cosign's tag in a registry; and whatever else refers
	// to the root (OCI 1.1 referrers).
	sigs := rep.Signatures
	if len(sigs) == 0 {
		if d, err := repo.Resolve(ctx, artifact.SignatureTag(rep.Root)); err == nil {
			sigs = append(sigs, d.Digest)
		}
	}
	for _, sig := range sigs {
		label := "cosign signature"
		if len(p.Status.SignedBy) > 0 {
			label += ", verified with " + strings.Join(p.Status.SignedBy, ", ")
		}
		root.Children = append(root.Children, &node{Kind: "signature", Label: label, Digest: sig.String()})
	}
	if rd, err := repo.Resolve(ctx, dg); err == nil {
		_ = artifact.ListReferrers(ctx, repo, rd, "", func(refs []ocispec.Descriptor) error {
			for _, r := range refs {
				if slices.Contains(sigs, r.Digest) {
					continue
				}
				root.Children = append(root.Children, &node{Kind: "referrer", Label: r.ArtifactType, Digest: r.Digest.String(), Size: r.Size})
			}
			return nil
		})
	}
	return root, sboms, nil
}

// sbomLink is an SBOM of one image platform, as the package page links it.
type sbomLink struct {
	Image, Platform, Format, Digest, Link string
}

// releaseHistory reads a release's revisions from Helm's storage Secrets
// (their labels: no release is decoded).
func releaseHistory(ctx context.Context, a *actor, rel v1alpha1.ReleaseStatus) releaseView {
	v := releaseView{ReleaseStatus: rel}
	list, err := a.cs.CoreV1().Secrets(rel.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{"owner": "helm", "name": rel.Name}).String(),
	})
	if err != nil {
		v.Error = oneLine(err.Error())
		return v
	}
	for _, sec := range list.Items {
		l := sec.Labels
		rv := revisionView{Revision: l["version"], Status: l["status"], Updated: age(sec.CreationTimestamp.Time) + " ago"}
		if l["version"] == strconv.Itoa(rel.Revision) {
			v.Status = l["status"]
		}
		v.History = append(v.History, rv)
	}
	slices.SortFunc(v.History, func(x, y revisionView) int {
		a, _ := strconv.Atoi(x.Revision)
		b, _ := strconv.Atoi(y.Revision)
		return b - a
	})
	return v
}

// events are the Package's events, the latest first.
func events(ctx context.Context, a *actor, p *v1alpha1.Package) ([]eventView, error) {
	list, err := a.cs.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": v1alpha1.Kind, "involvedObject.name": p.Name}.AsSelector().String(),
	})
	if err != nil {
		return nil, err
	}
	items := list.Items
	slices.SortFunc(items, func(x, y corev1.Event) int { return eventTime(y).Compare(eventTime(x)) })
	var out []eventView
	for _, e := range items {
		n := e.Count
		if n == 0 {
			n = 1
		}
		out = append(out, eventView{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: n, Last: age(eventTime(e)) + " ago"})
	}
	return out, nil
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func shortDigest(d string) string {
	_, hex, ok := strings.Cut(d, ":")
	if !ok || len(hex) < 12 {
		return d
	}
	return hex[:12]
}

// age is how long ago t was, as kubectl says it (5s, 3m, 2h, 4d).
func age(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// humanBytes is n in B, KiB, MiB or GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 3; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGT"[exp])
}

var funcs = template.FuncMap{
	"bytes": humanBytes,
	"short": shortDigest,
	"join":  strings.Join,
	// pathEscape makes a cluster's name one path segment of a URL.
	"pathEscape": url.PathEscape,
	"pkgState":   packageState,
}

// parsePages parses each page with the layout.
func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, p := range []string{"error", "login", "packages", "package", "registry", "upload", "fleet", "matrix", "rollouts", "placement", "track", "member", "sbom", "search", "audit", "fleetsearch", "fleetaudit"} {
		t, err := template.New(p).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/sbomtables.html", "templates/"+p+".html")
		if err != nil {
			return nil, err
		}
		pages[p] = t
	}
	return pages, nil
}
