package dashboard

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// memberView is one member: who it is, what it runs, what is placed on
// it, and for a carried member its bundles and the upload of its report.
type memberView struct {
	view
	Row        memberRow
	JoinedAt   string
	JoinedWith string
	Interval   string
	Receipt    string
	Receipted  string // its blobs and bytes
	Conditions []metav1.Condition
	Packages   []fleetv1.MemberPackage
	Desired    []desiredRow
	Carried    bool
	Notice     string
	Error      string
}

// From names the member for the import form: the page to come back to.
func (v *memberView) From() string { return v.Row.Name }

// desiredRow is a package the centre gives the member now.
type desiredRow struct {
	Package, Placement, Repository, Version string
	Values                                  bool
}

func (s *Server) memberPage(w http.ResponseWriter, r *http.Request) {
	s.memberView(w, r, http.StatusOK, s.takeFlash(r), "")
}

// memberView renders the request's {name} member with a notice or an
// error line.
func (s *Server) memberView(w http.ResponseWriter, r *http.Request, status int, notice, errLine string) {
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	name := r.PathValue("name")
	v := &memberView{view: s.view(r, "Member "+name), Row: memberRow{Name: name}, Notice: notice, Error: errLine}
	var m fleetv1.Member
	if err := a.fc.Get(ctx, client.ObjectKey{Namespace: s.fleetNamespace(), Name: name}, &m); err != nil {
		v.Error = strings.TrimPrefix(v.Error+"; ", "; ") + s.fleetError("member "+name, err).Error()
		s.renderStatus(w, r, max(status, statusOf(err)), "member", v)
		return
	}
	v.Row = newMemberRow(&m)
	v.Carried = v.Row.Mode == fleetv1.Carried
	v.JoinedAt, v.JoinedWith = when(m.Status.JoinedAt), m.Status.JoinedWith
	if m.Status.Interval != nil {
		v.Interval = m.Status.Interval.Duration.String()
	}
	if m.Status.Receipt != "" {
		v.Receipt = m.Status.Receipt
		v.Receipted = strconv.Itoa(m.Status.ReceiptBlobs) + " blobs, " + humanBytes(m.Status.ReceiptBytes)
	}
	v.Conditions, v.Packages = m.Status.Conditions, m.Status.Packages
	if !v.Row.Revoked {
		d, err := a.acts.Desired(ctx, name)
		if err != nil {
			v.Error = strings.TrimPrefix(v.Error+"; ", "; ") + "its desired state: " + oneLine(err.Error())
			d = &wire.Desired{}
		}
		for _, p := range d.Packages {
			v.Desired = append(v.Desired, desiredRow{Package: p.Name, Placement: p.Placement, Repository: p.Repository,
				Version: firstOf(p.Version, shortDigest(p.Digest)) + " (" + shortDigest(p.Digest) + ")", Values: len(p.Values) > 0})
		}
	}
	s.renderStatus(w, r, status, "member", v)
}

// bundle answers with a carried member's carry bundle of a package: the
// centre writes it into a folder of the spool, it is sent, and the folder
// removed. A POST: it costs the centre a delta, so no link, prefetch or
// other site may ask for one. Only for a user who may update the
// member's status (who may import its reports): the bundle is made from
// the centre's registry with the dashboard's credentials.
func (s *Server) bundle(w http.ResponseWriter, r *http.Request) {
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	member, pkg := r.PathValue("name"), strings.TrimSpace(r.PostFormValue("package"))
	if pkg == "" || len(pkg) > 63 || strings.ContainsAny(pkg, `/\"`) || !wire.ValidMemberName(member) {
		s.memberView(w, r, http.StatusBadRequest, "", "bundle: name one of the member's packages")
		return
	}
	if err := s.may(r, a, "update", "members", "status", member); err != nil {
		s.log.Warn("dashboard fleet bundle refused", "member", member, "package", pkg, "error", err)
		s.memberView(w, r, actionStatus(err), "", "bundle of "+pkg+": "+oneLine(err.Error()))
		return
	}
	dir, err := scratch.MkdirTemp(s.spool(), "ferry-bundle-")
	if err != nil {
		s.memberView(w, r, http.StatusInternalServerError, "", "bundle: "+oneLine(err.Error()))
		return
	}
	defer dir.Remove()
	name := member + "-" + pkg + ".tar.zst"
	out := filepath.Join(dir.Path, name)
	by := s.by(r, a)
	res, err := a.acts.Bundle(r.Context(), member, pkg, out)
	if err != nil {
		s.log.Warn("dashboard fleet bundle refused", "member", member, "package", pkg, "user", by, "error", err)
		s.memberView(w, r, actionStatus(err), "", "bundle of "+pkg+": "+oneLine(err.Error()))
		return
	}
	f, err := os.Open(out)
	if err != nil {
		s.memberView(w, r, http.StatusInternalServerError, "", "bundle of "+pkg+": "+oneLine(err.Error()))
		return
	}
	defer f.Close()
	// Sent from the open file: the folder goes now, not after the last
	// byte has reached the browser.
	_ = dir.Remove()
	fi, err := f.Stat()
	if err != nil {
		s.memberView(w, r, http.StatusInternalServerError, "", "bundle of "+pkg+": "+oneLine(err.Error()))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/zstd")
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	h.Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	n, err := io.Copy(w, f)
	s.log.Info("dashboard fleet bundle", "member", member, "package", pkg, "digest", res.Digest, "receipt", res.Receipt, "wholeReceipt", res.WholeReceipt, "user", by, "bytes", n, "error", err)
}

// values answers with the values a carried member's package is given
// (what the centre writes beside its bundle, <bundle>.values.json), for
// the person deploying the bundle at the site.
func (s *Server) values(w http.ResponseWriter, r *http.Request) {
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	member, pkg := r.PathValue("name"), r.URL.Query().Get("package")
	d, err := a.acts.Desired(r.Context(), member)
	if err != nil {
		s.memberView(w, r, actionStatus(err), "", "values of "+pkg+": "+oneLine(err.Error()))
		return
	}
	for _, p := range d.Packages {
		if p.Name != pkg {
			continue
		}
		if len(p.Values) == 0 {
			break
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", member+"-"+pkg+".tar.zst.values.json"))
		_, _ = w.Write(append(p.Values, '\n'))
		return
	}
	s.memberView(w, r, http.StatusNotFound, "", fmt.Sprintf("values of %s: member %s is given no values for package %q", pkg, member, pkg))
}

// spool is where bundles are written.
func (s *Server) spool() string {
	if s.opts.Fleet != nil && s.opts.Fleet.Spool != "" {
		return s.opts.Fleet.Spool
	}
	return ""
}

// importReport reads a carried member's signed report from a form's file
// (multipart, the CSRF token in the query, at most s.maxReport:
// wire.MaxReportFile)
// and has the centre import it; the result is one line on the member's
// page, or on the page the form was on.
func (s *Server) importReport(w http.ResponseWriter, r *http.Request) {
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	from := r.URL.Query().Get("from")
	back := func(status int, msg string) {
		if from != "" {
			r.SetPathValue("name", from)
			s.memberView(w, r, status, "", msg)
			return
		}
		s.fleetPageWith(w, r, status, msg)
	}
	// The user may update members' status: the import pushes the
	// report's receipts to the centre's registry with the dashboard's
	// credentials before it writes the member's.
	if err := s.may(r, a, "update", "members", "status", ""); err != nil {
		s.log.Warn("dashboard fleet import refused", "error", err)
		back(actionStatus(err), "import: "+oneLine(err.Error()))
		return
	}
	data, status, err := readReport(w, r, s.maxReport)
	if err != nil {
		back(status, "import: "+err.Error())
		return
	}
	by := s.by(r, a)
	m, err := a.acts.Import(r.Context(), data)
	if err != nil {
		s.log.Warn("dashboard fleet import refused", "user", by, "bytes", len(data), "error", err)
		back(actionStatus(err), "import: "+oneLine(err.Error()))
		return
	}
	msg := fmt.Sprintf("imported the report of %s (%d packages", m.Name, len(m.Status.Packages))
	if c := meta.FindStatusCondition(m.Status.Conditions, fleetv1.MemberReady); c != nil {
		msg += ", Ready " + string(c.Status)
	}
	if m.Status.LastSeen != nil {
		msg += ", made " + age(m.Status.LastSeen.Time) + " ago"
	}
	s.log.Info("dashboard fleet import", "member", m.Name, "user", by, "bytes", len(data))
	s.setFlash(r, msg+")")
	http.Redirect(w, r, "/fleet/members/"+url.PathEscape(m.Name), http.StatusSeeOther)
}

// readReport reads the form's report file, or says in one line why not,
// with its status.
func readReport(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, int, error) {
	r.Body = http.MaxBytesReader(w, r.Body, limit+64<<10)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, http.StatusBadRequest, errors.New("send the report as a form's file (multipart/form-data)")
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return nil, http.StatusBadRequest, errors.New("pick the report file first")
		}
		if err != nil {
			return nil, readStatus(err), fmt.Errorf("the form broke off: %s", oneLine(err.Error()))
		}
		if part.FormName() != "report" {
			_ = part.Close()
			continue
		}
		data, err := io.ReadAll(io.LimitReader(part, limit+1))
		switch {
		case err != nil:
			return nil, readStatus(err), fmt.Errorf("the report broke off after %s: %s", humanBytes(int64(len(data))), oneLine(err.Error()))
		case int64(len(data)) > limit:
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the report is larger than %s: not a report ferry fleet report writes", humanBytes(limit))
		case len(data) == 0:
			return nil, http.StatusBadRequest, errors.New("the report file is empty")
		}
		return data, 0, nil
	}
}

func readStatus(err error) int {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}
